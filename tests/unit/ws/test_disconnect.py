"""lambdas.ws.disconnect: $disconnect disconnects the live session once and forgets the connection."""

from __future__ import annotations

from typing import Any

import pytest

from embedded.events import ws_event
from lambdas.shared.errors import ConnectionSuperseded
from lambdas.shared.records import SessionStatus
from lambdas.shared.store import DynamoSessionStore
from lambdas.shared.store.sessions import Sessions
from lambdas.ws import disconnect
from tests.unit.ws.chat import ALICE, CONN, CTX, OTHER_CONN, onboarded


def test_disconnect_marks_the_session_for_cleanup_and_forgets_the_connection(ws: DynamoSessionStore) -> None:
    session_id = onboarded()
    assert disconnect.handler(ws_event("$disconnect", authorizer=ALICE), CTX) == {"statusCode": 200}
    session = ws.sessions.get_session(session_id)
    assert session is not None
    assert session.status == SessionStatus.DISCONNECTED
    assert session.disconnected_at is not None
    assert session.connection_id is None
    assert ws.connections.get_connection(CONN) is None
    waiting = ws.sessions.sessions_awaiting_cleanup(session.disconnected_at + 1).items
    assert [c.session_id for c in waiting] == [session_id]


def test_disconnect_twice_is_harmless(ws: DynamoSessionStore) -> None:
    session_id = onboarded()
    disconnect.handler(ws_event("$disconnect", authorizer=ALICE), CTX)
    before = ws.sessions.get_session(session_id)
    assert disconnect.handler(ws_event("$disconnect", authorizer=ALICE), CTX) == {"statusCode": 200}
    assert ws.sessions.get_session(session_id) == before


def test_disconnect_of_an_unknown_connection_is_harmless(ws: DynamoSessionStore) -> None:
    assert disconnect.handler(ws_event("$disconnect", connection_id="never-seen", authorizer=ALICE), CTX) == {
        "statusCode": 200
    }


def test_disconnect_of_a_superseded_connection_leaves_the_resumed_session_open(ws: DynamoSessionStore) -> None:
    # Given a session resumed on a second connection before the first one's $disconnect arrives
    session_id = onboarded()
    onboarded(connection_id=OTHER_CONN, session_id=session_id)
    # When the old connection disconnects
    disconnect.handler(ws_event("$disconnect", connection_id=CONN, authorizer=ALICE), CTX)
    # Then only its record goes; the session stays active on the new connection
    session = ws.sessions.get_session(session_id)
    assert session is not None
    assert (session.status, session.connection_id) == (SessionStatus.ACTIVE, OTHER_CONN)
    assert ws.connections.get_connection(CONN) is None
    assert ws.connections.get_connection(OTHER_CONN) is not None


def test_update_status_if_connection_is_part_of_the_condition(ws: DynamoSessionStore) -> None:
    session_id = onboarded()
    with pytest.raises(ConnectionSuperseded):
        ws.sessions.update_status(session_id, SessionStatus.DISCONNECTED, if_connection=OTHER_CONN)
    session = ws.sessions.get_session(session_id)
    assert session is not None
    assert session.status == SessionStatus.ACTIVE
    moved = ws.sessions.update_status(session_id, SessionStatus.DISCONNECTED, if_connection=CONN, connection_id=None)
    assert (moved.status, moved.connection_id) == (SessionStatus.DISCONNECTED, None)


def test_resume_racing_a_late_disconnect_keeps_the_session_open(
    ws: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the customer resumes on a new connection right after $disconnect read the session
    session_id = onboarded()
    read = Sessions.get_session

    def read_then_resume(self: Sessions, sid: str, **kwargs: Any) -> Any:
        session = read(self, sid, **kwargs)
        self.set_connection(sid, OTHER_CONN)
        return session

    monkeypatch.setattr(Sessions, "get_session", read_then_resume)
    # When the old connection's disconnect writes
    outcome = disconnect.disconnect_connection(ws, CONN)
    monkeypatch.undo()
    # Then the conditional write refuses, and the session stays open on the new connection
    assert outcome == "superseded"
    session = ws.sessions.get_session(session_id)
    assert session is not None
    assert (session.status, session.connection_id) == (SessionStatus.ACTIVE, OTHER_CONN)
    assert ws.connections.get_connection(CONN) is None
