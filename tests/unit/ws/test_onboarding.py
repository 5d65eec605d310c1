"""lambdas.ws.onboarding: the onboarding workflow steps (onboard, deliver, abandon) on moto."""

from __future__ import annotations

import pytest
from botocore.stub import Stubber

from lambdas.shared import connections
from lambdas.shared.records import Role, SessionStatus
from lambdas.shared.store import DynamoSessionStore
from lambdas.ws import onboarding
from tests.support.websocket import DOMAIN, ENDPOINT, STAGE, sent_frames
from tests.unit.ws.chat import CONN, CTX, OTHER_CONN, onboarded


def test_onboard_creates_session_connection_and_greeting(ws: DynamoSessionStore) -> None:
    session_id = onboarded()
    session = ws.sessions.get_session(session_id)
    assert session is not None
    assert session.customer_id == "alice"
    assert session.status == SessionStatus.ACTIVE
    assert session.connection_id == CONN
    conn = ws.connections.get_connection(CONN)
    assert conn is not None
    assert (conn.session_id, conn.customer_id, conn.domain_name, conn.stage) == (session_id, "alice", DOMAIN, STAGE)
    assert conn.ttl == conn.connected_at + 24 * 3600
    [greeting] = ws.turns.list_turns(session_id).items
    assert greeting.role == Role.ASSISTANT
    assert greeting.content == onboarding.GREETING


def test_onboard_is_safe_to_retry(ws: DynamoSessionStore) -> None:
    first = onboarded()
    assert onboarded() == first
    assert len(ws.turns.list_turns(first).items) == 1
    assert ws.sessions.list_customer_sessions("alice").items[0].session_id == first


def test_onboard_resumes_with_a_welcome_back_turn(ws: DynamoSessionStore) -> None:
    session_id = onboarded()
    resumed = onboarding.handler(
        {"step": "onboard", "connection_id": OTHER_CONN, "customer_id": "alice", "session_id": session_id,
         "domain_name": DOMAIN, "stage": STAGE},
        CTX,
    )  # fmt: skip
    assert resumed["session_id"] == session_id
    assert resumed["frame"]["type"] == "welcome"
    assert resumed["frame"]["resumed"] is True
    session = ws.sessions.get_session(session_id)
    assert session is not None
    assert session.connection_id == OTHER_CONN
    assert [t.content for t in ws.turns.list_turns(session_id).items][-1] == onboarding.WELCOME_BACK


def _onboard_result(session_id: str, connection_id: str = CONN) -> dict[str, object]:
    return onboarding.handler(
        {"step": "onboard", "connection_id": connection_id, "customer_id": "alice", "session_id": session_id,
         "domain_name": DOMAIN, "stage": STAGE},
        CTX,
    )  # fmt: skip


def test_first_connect_to_a_session_created_over_rest_is_greeted_as_new(ws: DynamoSessionStore) -> None:
    # Given a session created by POST /sessions: no turn yet, never connected
    session_id = ws.sessions.create_session("alice").session_id
    # When the customer connects to it for the first time
    result = _onboard_result(session_id)
    # Then the welcome is the new-session greeting, not "welcome back"
    frame = result["frame"]
    assert isinstance(frame, dict)
    assert (result["resumed"], frame["resumed"], frame["message"]) == (False, False, onboarding.GREETING)
    assert [t.content for t in ws.turns.list_turns(session_id).items] == [onboarding.GREETING]


def test_a_retried_first_connect_is_still_greeted_as_new(ws: DynamoSessionStore) -> None:
    session_id = ws.sessions.create_session("alice").session_id
    _onboard_result(session_id)
    again = _onboard_result(session_id)
    frame = again["frame"]
    assert isinstance(frame, dict)
    assert (frame["resumed"], frame["message"]) == (False, onboarding.GREETING)
    assert len(ws.turns.list_turns(session_id).items) == 1


def test_a_retried_return_is_still_greeted_as_resumed(ws: DynamoSessionStore) -> None:
    session_id = onboarded()
    _onboard_result(session_id, OTHER_CONN)
    again = _onboard_result(session_id, OTHER_CONN)
    frame = again["frame"]
    assert isinstance(frame, dict)
    assert (frame["resumed"], frame["message"]) == (True, onboarding.WELCOME_BACK)


def test_onboard_refuses_a_foreign_session(ws: DynamoSessionStore) -> None:
    session_id = ws.sessions.create_session("mallory").session_id
    with pytest.raises(onboarding.ForeignSession):
        onboarded("alice", session_id=session_id)
    assert ws.connections.get_connection(CONN) is None


def test_deliver_posts_the_frame(ws: DynamoSessionStore) -> None:
    frame = {"type": "welcome", "session_id": "s"}
    result = onboarding.deliver({"connection_id": CONN, "domain_name": DOMAIN, "stage": STAGE, "frame": frame}, CTX)
    assert result == {"delivered": True, "type": "welcome"}
    assert sent_frames(CONN) == [frame]


@pytest.mark.parametrize(("code", "status"), [("GoneException", 410), ("ForbiddenException", 403)])
def test_deliver_reports_a_connection_that_is_not_open_yet(ws: DynamoSessionStore, code: str, status: int) -> None:
    with Stubber(connections.management_client(ENDPOINT)) as stub:
        stub.add_client_error("post_to_connection", code, http_status_code=status)
        with pytest.raises(onboarding.ConnectionNotReady):
            onboarding.deliver(
                {"connection_id": CONN, "domain_name": DOMAIN, "stage": STAGE, "frame": {"type": "welcome"}}, CTX
            )


def test_abandon_disconnects_the_session_of_a_client_that_left(ws: DynamoSessionStore) -> None:
    session_id = onboarded()
    assert onboarding.handler({"step": "abandon", "connection_id": CONN}, CTX) == {"outcome": "disconnected"}
    session = ws.sessions.get_session(session_id)
    assert session is not None
    assert session.status == SessionStatus.DISCONNECTED
    assert ws.connections.get_connection(CONN) is None
