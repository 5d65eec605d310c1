"""lambdas.ws.connect: $connect starts onboarding, resumes a session of the caller, caps live connections."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from embedded.events import ws_event
from lambdas.shared import env
from lambdas.shared.records import SessionStatus
from lambdas.shared.store import DynamoSessionStore
from lambdas.ws import connect, disconnect
from tests.support.websocket import DOMAIN, STAGE
from tests.unit.ws.chat import ALICE, CONN, CTX, customer_context, executions


def test_connect_passes_the_customers_verified_email_to_onboarding(ws: DynamoSessionStore) -> None:
    authorizer = {**ALICE, "email": "alice@example.com"}
    assert connect.handler(ws_event("$connect", connection_id=CONN, authorizer=authorizer), CTX) == {"statusCode": 200}
    [execution] = executions()
    assert json.loads(execution["input"])["customer_email"] == "alice@example.com"


def test_connect_starts_onboarding_for_a_new_session(ws: DynamoSessionStore) -> None:
    response = connect.handler(ws_event("$connect", connection_id=CONN, authorizer=ALICE), CTX)
    assert response == {"statusCode": 200}
    [execution] = executions()
    assert json.loads(execution["input"]) == {
        "connection_id": CONN,
        "customer_id": "alice",
        "session_id": None,
        "domain_name": DOMAIN,
        "stage": STAGE,
        "request_id": json.loads(execution["input"])["request_id"],
    }
    assert "=" not in execution["name"]


def test_connect_resumes_the_callers_own_session(ws: DynamoSessionStore) -> None:
    session_id = ws.sessions.create_session("alice").session_id
    response = connect.handler(
        ws_event("$connect", query={"session_id": session_id, "token": "t"}, authorizer=ALICE), CTX
    )
    assert response == {"statusCode": 200}
    assert json.loads(executions()[0]["input"])["session_id"] == session_id


@pytest.mark.parametrize("owner", ["mallory", None])
def test_connect_refuses_a_foreign_or_unknown_session_alike(ws: DynamoSessionStore, owner: str | None) -> None:
    session_id = ws.sessions.create_session(owner).session_id if owner else "0b7c5e3a-0000-4000-8000-000000000000"
    response = connect.handler(ws_event("$connect", query={"session_id": session_id}, authorizer=ALICE), CTX)
    assert response["statusCode"] == 403
    assert json.loads(response["body"]) == {"code": "forbidden", "message": "You cannot resume this session."}
    assert executions() == []


@pytest.mark.parametrize(
    ("status", "ago"),
    [(SessionStatus.DISCONNECTED, 3601), (SessionStatus.DISCONNECTED, 86400), (SessionStatus.DELETED, 1)],
)
def test_connect_refuses_a_session_of_the_caller_closed_or_disconnected_past_its_grace(
    ws: DynamoSessionStore, status: SessionStatus, ago: int
) -> None:
    # Given the caller's session, disconnected (or deleted) longer ago than the hour's grace period
    session_id = ws.sessions.create_session("alice").session_id
    stamp = "disconnected_at" if status == SessionStatus.DISCONNECTED else "deleted_at"
    ws.sessions.update_status(session_id, status, **{stamp: int(time.time()) - ago})
    # When the customer connects to resume it
    response = connect.handler(ws_event("$connect", query={"session_id": session_id}, authorizer=ALICE), CTX)
    # Then a clear refusal: start a new session; nothing was started
    assert response["statusCode"] == 410
    body = json.loads(response["body"])
    assert body["code"] == "session_closed"
    assert "up to 60 minutes" in body["message"]
    assert "without session_id" in body["message"]
    assert executions() == []


def test_connect_resumes_a_session_disconnected_within_its_grace_with_the_clients_last_turn(
    ws: DynamoSessionStore,
) -> None:
    # Given the caller's session, whose only connection dropped 59 minutes ago
    session_id = ws.sessions.create_session("alice").session_id
    ws.sessions.update_status(session_id, SessionStatus.DISCONNECTED, disconnected_at=int(time.time()) - 59 * 60)
    # When the customer connects again with it and the newest turn they saw
    query = {"session_id": session_id, "last_turn": "7"}
    response = connect.handler(ws_event("$connect", connection_id=CONN, query=query, authorizer=ALICE), CTX)
    # Then onboarding starts to resume it from turn 8
    assert response == {"statusCode": 200}
    started = json.loads(executions()[0]["input"])
    assert (started["session_id"], started["last_turn"]) == (session_id, 7)


@pytest.mark.parametrize("last_turn", ["-1", "x", "12345678901", "1.5"])
def test_connect_rejects_a_malformed_last_turn(ws: DynamoSessionStore, last_turn: str) -> None:
    session_id = ws.sessions.create_session("alice").session_id
    query = {"session_id": session_id, "last_turn": last_turn}
    response = connect.handler(ws_event("$connect", query=query, authorizer=ALICE), CTX)
    assert response["statusCode"] == 400
    assert json.loads(response["body"])["code"] == "invalid_last_turn"
    assert executions() == []


@pytest.mark.parametrize("session_id", ["../etc", "x" * 65, "a b"])
def test_connect_rejects_a_malformed_session_id(ws: DynamoSessionStore, session_id: str) -> None:
    response = connect.handler(ws_event("$connect", query={"session_id": session_id}, authorizer=ALICE), CTX)
    assert response["statusCode"] == 400


def test_connect_refuses_non_customers(ws: DynamoSessionStore) -> None:
    assert (
        connect.handler(ws_event("$connect", authorizer=customer_context("alice", role="agent")), CTX)["statusCode"]
        == 403
    )
    assert connect.handler(ws_event("$connect"), CTX)["statusCode"] == 403


def test_connect_answers_500_without_internals_when_the_workflow_cannot_start(
    ws: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ONBOARDING_STATE_MACHINE_ARN", "arn:aws:states:us-east-1:123456789012:stateMachine:gone")
    env.reset()
    response = connect.handler(ws_event("$connect", authorizer=ALICE), CTX)
    assert response["statusCode"] == 500
    assert "StateMachineDoesNotExist" not in response["body"]


def connect_as(customer: str, connection_id: str) -> dict[str, Any]:
    return connect.handler(
        ws_event("$connect", connection_id=connection_id, authorizer=customer_context(customer)), CTX
    )


def test_connect_caps_the_live_connections_of_a_customer_and_a_disconnect_frees_one(
    ws: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a stage that allows two live connections per customer
    monkeypatch.setenv("CHAT_MAX_CONNECTIONS_PER_CUSTOMER", "2")
    env.reset()
    assert connect_as("alice", "c-1")["statusCode"] == 200
    assert connect_as("alice", "c-2")["statusCode"] == 200
    # When a third connects, it is refused before any workflow starts, saying what to do
    refused = connect_as("alice", "c-3")
    assert refused["statusCode"] == 429
    assert json.loads(refused["body"])["code"] == "too_many_connections"
    assert "2" in json.loads(refused["body"])["message"]
    assert len(executions()) == 2
    # Another customer is not counted against alice
    assert connect_as("bob", "c-9")["statusCode"] == 200
    # Then a disconnect frees a slot (even of a connection whose onboarding never finished)
    disconnect.handler(ws_event("$disconnect", connection_id="c-1", authorizer=ALICE), CTX)
    assert connect_as("alice", "c-3")["statusCode"] == 200


def test_connect_frees_its_slot_when_the_workflow_cannot_start(
    ws: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHAT_MAX_CONNECTIONS_PER_CUSTOMER", "1")
    monkeypatch.setenv("ONBOARDING_STATE_MACHINE_ARN", "arn:aws:states:us-east-1:123456789012:stateMachine:gone")
    env.reset()
    assert connect_as("alice", "c-1")["statusCode"] == 500
    assert connect_as("alice", "c-2")["statusCode"] == 500  # not 429: the failed attempt holds no slot
