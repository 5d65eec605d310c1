"""lambdas.ws.onboarding: the onboarding workflow steps (onboard, deliver, abandon) on moto."""

from __future__ import annotations

import time
from typing import Any

import pytest
from botocore.stub import Stubber

from lambdas.shared import connections
from lambdas.shared.errors import SessionClosed
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


def _resume(session_id: str, last_turn: int | None = None, connection_id: str = OTHER_CONN) -> dict[str, Any]:
    request: dict[str, Any] = {"session_id": session_id}
    if last_turn is not None:
        request["last_turn"] = last_turn
    return onboarding.handler(
        {"step": "onboard", "connection_id": connection_id, "customer_id": "alice", "session_id": session_id,
         "domain_name": DOMAIN, "stage": STAGE, "request": request},
        CTX,
    )  # fmt: skip


def _dropped(ws: DynamoSessionStore, turns: int, ago: int, then: tuple[str, ...] = ()) -> str:
    """A session: greeting, ``turns`` turns, the replies ``then``; its only connection closed ``ago`` s ago."""
    session_id = onboarded()
    for n in range(turns):
        ws.turns.add_turn(session_id, Role.USER if n % 2 == 0 else Role.ASSISTANT, f"turn {n + 2}")
    for text in then:
        ws.turns.add_turn(session_id, Role.ASSISTANT, text)
    ws.connections.delete_connection(CONN)
    stamp = int(time.time()) - ago  # what $disconnect writes, ``ago`` seconds back
    ws.sessions.update_status(session_id, SessionStatus.DISCONNECTED, connection_id=None, disconnected_at=stamp)
    return session_id


def test_a_dropped_session_resumes_within_its_grace_with_the_turns_the_client_missed(ws: DynamoSessionStore) -> None:
    # Given a session of 5 turns whose connection dropped 30 minutes ago; the client saw turn 3
    session_id = _dropped(ws, turns=4, ago=1800)
    # When it reconnects with that session and last_turn 3
    result = _resume(session_id, last_turn=3)
    # Then the session is active again on the new connection and out of the cleanup's reach
    session = ws.sessions.get_session(session_id)
    assert session is not None
    assert (session.status, session.connection_id, session.cleanup_at) == (SessionStatus.ACTIVE, OTHER_CONN, None)
    # And the welcome frame says resumed, with turns 4 and 5 (what it missed) and the welcome back as turn 6
    frame = result["frame"]
    assert (frame["resumed"], frame["status"], frame["message"]) == (True, "active", onboarding.WELCOME_BACK)
    assert [(t["turn_number"], t["role"], t["text"]) for t in frame["turns"]] == [
        (4, "user", "turn 4"),
        (5, "assistant", "turn 5"),
    ]
    assert frame["earlier_turns"] is False
    assert frame["turn_number"] == 6


def test_a_resume_without_last_turn_gets_the_most_recent_turns_within_the_bounds(ws: DynamoSessionStore) -> None:
    # Given a session of 31 turns, one of them long
    session_id = _dropped(ws, turns=30, ago=60, then=("x" * 4000,))
    # When the client resumes without saying what it has
    frame = _resume(session_id)["frame"]
    # Then it gets the newest 20 turns at most, oldest first, and is told there are earlier ones
    numbers = [t["turn_number"] for t in frame["turns"]]
    assert numbers == list(range(13, 33))
    assert frame["earlier_turns"] is True
    assert sum(len(t["text"]) for t in frame["turns"]) <= 12_000


def test_a_resume_within_the_character_budget_keeps_the_newest_turns(ws: DynamoSessionStore) -> None:
    session_id = _dropped(ws, turns=0, ago=60, then=("y" * 4000,) * 4)
    frame = _resume(session_id, last_turn=1)["frame"]
    assert [t["turn_number"] for t in frame["turns"]] == [3, 4, 5]
    assert frame["earlier_turns"] is True


def test_a_dropped_session_past_its_grace_is_not_resumed(ws: DynamoSessionStore) -> None:
    # Given a session whose connection dropped an hour and a second ago
    session_id = _dropped(ws, turns=2, ago=3601)
    # When onboarding tries to resume it (the $connect check passed a moment before the grace ended)
    with pytest.raises(SessionClosed):
        _resume(session_id)
    # Then it stays disconnected, waiting for its cleanup, and got no turn
    session = ws.sessions.get_session(session_id)
    assert session is not None
    assert (session.status, session.turn_count) == (SessionStatus.DISCONNECTED, 3)


def test_a_session_claimed_by_the_cleanup_is_not_resumed(ws: DynamoSessionStore) -> None:
    session_id = _dropped(ws, turns=2, ago=600)
    assert ws.sessions.claim_for_cleanup(session_id, eligible_before=int(time.time())) is True
    with pytest.raises(SessionClosed):
        _resume(session_id)
    assert ws.sessions.get_session(session_id).status == SessionStatus.DISCONNECTED  # type: ignore[union-attr]


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
