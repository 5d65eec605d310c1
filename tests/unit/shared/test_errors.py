"""lambdas.shared.errors: every store error is a StoreError of the HTTP class it answers as."""

from __future__ import annotations

from lambdas.shared import errors
from lambdas.shared.records import AgentStatus, SessionStatus


def test_refusals_are_conflicts_and_absences_are_not_found() -> None:
    assert issubclass(errors.SessionClosed, errors.Conflict)
    assert issubclass(errors.UnexpectedStatus, errors.InvalidTransition)
    assert issubclass(errors.AgentNotRegistered, errors.AgentNotFound)
    assert issubclass(errors.HandoffNotFound, errors.NotFound)
    assert issubclass(errors.InvalidCursor, errors.InvalidInput)
    for kind in (errors.Conflict, errors.NotFound, errors.InvalidInput, errors.BatchWriteIncomplete):
        assert issubclass(kind, errors.StoreError)


def test_messages_name_what_was_refused() -> None:
    assert "s-1" in str(errors.SessionNotFound("s-1"))
    assert "agent-1" in str(errors.AgentUnavailable("agent-1", "is busy"))


def test_messages_print_a_status_as_its_value_never_as_a_python_repr() -> None:
    deleted, active = SessionStatus.DELETED, SessionStatus.ACTIVE
    messages = [
        str(errors.InvalidTransition("s-1", deleted, deleted)),
        str(errors.UnexpectedStatus("s-1", deleted, active, active)),
        str(errors.SessionClosed("s-1", deleted)),
        str(errors.AgentExists("agent-1", AgentStatus.RETIRED)),
    ]
    assert messages[0] == "session 's-1' cannot move from 'deleted' to 'deleted'"
    assert "is 'deleted'" in messages[2]
    assert "(status 'retired')" in messages[3]
    for message in messages:
        assert "Status" not in message, message
        assert "<" not in message, message
