"""lambdas.ws.gate: what a ``rewind`` or ``continue`` passes before it asks the model again."""

from __future__ import annotations

import pytest

from embedded.clock import FakeClock
from lambdas.shared import env
from lambdas.shared.records import TokenUsage
from lambdas.shared.store import DynamoSessionStore
from lambdas.usecases import send_message
from lambdas.ws import gate
from lambdas.ws.frames import RouteContext
from tests.support.websocket import DOMAIN, STAGE
from tests.unit.ws.chat import CONN, onboarded


def context(customer_id: str | None) -> RouteContext:
    return RouteContext("continue", CONN, DOMAIN, STAGE, "req-1", customer_id, "customer" if customer_id else None)


ALICE = context("alice")


def refusal(store: DynamoSessionStore, ctx: RouteContext) -> gate.Refused:
    with pytest.raises(gate.Refused) as refused:
        gate.admitted(store, ctx)
    return refused.value


def test_a_customer_on_a_ready_connection_is_admitted_to_her_session(ws: DynamoSessionStore) -> None:
    session_id = onboarded()
    assert gate.admitted(ws, ALICE) == gate.Admitted(session_id, "alice")


def test_a_connection_without_a_customer_is_refused(ws: DynamoSessionStore) -> None:
    onboarded()
    refused = refusal(ws, context(None))
    assert (refused.frame, refused.outcome) == (gate.FORBIDDEN, "refused:forbidden")


def test_a_connection_whose_session_is_not_ready_is_refused(ws: DynamoSessionStore) -> None:
    refused = refusal(ws, ALICE)
    assert (refused.frame, refused.outcome) == (gate.NOT_READY, send_message.NOT_READY)


def test_past_the_connections_burst_the_gate_says_when_to_ask_again(
    ws: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHAT_CONNECTION_BURST", "2")
    env.reset()
    onboarded()
    frozen = DynamoSessionStore(ws.table.table_name, clock=FakeClock())  # no token refills meanwhile
    for _ in range(2):
        gate.admitted(frozen, ALICE)
    refused = refusal(frozen, ALICE)
    assert refused.outcome == send_message.RATE_LIMITED
    assert (refused.frame["code"], refused.frame["retry_after_seconds"] > 0) == ("rate_limited", True)


def test_a_customer_whose_tokens_of_the_day_are_spent_is_told_when_they_reset(
    ws: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHAT_DAILY_TOKEN_BUDGET", "1000")
    env.reset()
    onboarded()
    ws.budgets.spend_tokens("alice", TokenUsage(900, 100))
    refused = refusal(ws, ALICE)
    assert refused.outcome == send_message.OVER_BUDGET
    assert refused.frame["code"] == "token_budget_exhausted"
    assert refused.frame["resets_at"].endswith("T00:00:00Z")
