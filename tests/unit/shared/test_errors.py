"""lambdas.shared.errors: every store error is a StoreError of the HTTP class it answers as."""

from __future__ import annotations

from lambdas.shared import errors


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
