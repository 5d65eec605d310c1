"""lambdas.orchestration.handoff: the workflow steps reserve an agent once and never undo a handoff that is over."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from lambdas.orchestration import handoff as handoff_steps
from lambdas.shared import env as lambda_env
from lambdas.shared.records import Agent, HandoffStatus
from lambdas.shared.store import DynamoSessionStore


@pytest.fixture
def steps_env(table_name: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TABLE_NAME", table_name)
    lambda_env.reset()
    yield
    lambda_env.reset()


def test_concurrent_reservations_never_share_an_agent(store: DynamoSessionStore, steps_env: None) -> None:
    # Given three available agents and ten handoffs asking at once
    for n in range(3):
        store.agents.put_agent(Agent(agent_id=f"agent-{n}", skills=("billing",)))
    winners: list[str | None] = []
    lock = threading.Lock()

    def ask(n: int) -> None:
        agent_id = handoff_steps._reserve_first("billing", f"session-{n}")
        with lock:
            winners.append(agent_id)

    threads = [threading.Thread(target=ask, args=(n,)) for n in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    # Then each agent went to exactly one handoff
    taken = [w for w in winners if w is not None]
    assert sorted(taken) == ["agent-0", "agent-1", "agent-2"]
    assert winners.count(None) == 7


@pytest.mark.parametrize(
    ("status", "after"),
    [
        (HandoffStatus.COMPLETED, HandoffStatus.COMPLETED),  # closed meanwhile: its completion stays
        (HandoffStatus.FAILED, HandoffStatus.FAILED),
        (HandoffStatus.QUEUED, HandoffStatus.FAILED),
        (HandoffStatus.ESCALATED, HandoffStatus.FAILED),
    ],
)
def test_a_late_failure_never_overwrites_a_handoff_that_is_over(
    store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch, status: HandoffStatus, after: HandoffStatus
) -> None:
    monkeypatch.setattr(handoff_steps, "store", lambda: store)
    session = store.sessions.create_session("cust-1")
    store.handoffs.put_handoff(session.session_id, reason="billing", status=status, handoff_id="h-1")
    state = {"session_id": session.session_id, "error": {"Error": "CustomerLeft"}}
    result = handoff_steps.fail.__wrapped__({"state": state, "handoff_id": "h-1"}, None)
    handoff = store.handoffs.get_handoff(session.session_id, "h-1")
    assert handoff is not None
    assert handoff.status == after
    assert result["marked_failed"] is (status != after)
    assert result["reason"] == "the customer left before an agent took the handoff"
