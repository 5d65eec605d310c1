"""Typed errors of the data-access layer.

Each class carries the HTTP status an API handler answers with (``http_status``), so the mapping
lives next to the error and not in every handler. Messages name ids and statuses only, never
table names, keys or AWS error text, so ``str(error)`` is safe to return to a caller.
"""

from __future__ import annotations


def _plain(value: str) -> str:
    """A status as the caller knows it: ``'deleted'``, never the enum's ``<SessionStatus.DELETED: 'deleted'>``."""
    return repr(str(value))


class StoreError(Exception):
    """Base of every error the store raises on purpose."""

    http_status = 500


class InvalidInput(StoreError, ValueError):
    """An argument is malformed (unknown role, limit out of range, empty id, ...)."""

    http_status = 400
    #: True when the argument came from the request's parameters (path, query, header), not its body.
    parameter = False


class InvalidCursor(InvalidInput):
    """A pagination cursor is malformed, or was minted for another session, customer or list."""

    parameter = True

    def __init__(self, reason: str = "the cursor is malformed") -> None:
        super().__init__(f"invalid cursor: {reason}; restart the listing without a cursor")


class NotFound(StoreError):
    """The addressed record does not exist."""

    http_status = 404

    def __init__(self, kind: str, ident: str) -> None:
        super().__init__(f"{kind} {ident!r} not found")
        self.ident = ident


class SessionNotFound(NotFound):
    def __init__(self, session_id: str) -> None:
        super().__init__("session", session_id)
        self.session_id = session_id


class HandoffNotFound(NotFound):
    def __init__(self, session_id: str, handoff_id: str) -> None:
        super().__init__("handoff", f"{session_id}/{handoff_id}")
        self.session_id = session_id
        self.handoff_id = handoff_id


class AgentNotFound(NotFound):
    def __init__(self, agent_id: str) -> None:
        super().__init__("agent", agent_id)
        self.agent_id = agent_id


class AgentNotRegistered(AgentNotFound):
    """The caller acts as an agent but no agent with its id is in the registry."""

    def __init__(self, agent_id: str) -> None:
        super().__init__(agent_id)
        self.args = (f"agent {agent_id!r} is not registered; an admin registers agents with POST /admin/agents",)


class Conflict(StoreError):
    """A conditional write lost: the record exists already or changed under the caller."""

    http_status = 409


class InvalidTransition(Conflict):
    """The session's current status does not allow moving to the requested one."""

    def __init__(self, session_id: str, current: str, requested: str) -> None:
        super().__init__(f"session {session_id!r} cannot move from {_plain(current)} to {_plain(requested)}")
        self.session_id = session_id
        self.current = str(current)
        self.requested = str(requested)


class UnexpectedStatus(InvalidTransition):
    """The caller's ``expected`` status no longer holds (someone else moved the session)."""

    def __init__(self, session_id: str, current: str, requested: str, expected: str) -> None:
        super().__init__(session_id, current, requested)
        self.expected = str(expected)
        self.args = (
            f"session {session_id!r} is {_plain(current)}, not the expected {_plain(expected)}; "
            f"it was not moved to {_plain(requested)}",
        )


class ConnectionSuperseded(Conflict):
    """The session's live connection is no longer the one the caller acted for (it resumed elsewhere)."""

    def __init__(self, session_id: str, connection_id: str) -> None:
        super().__init__(f"session {session_id!r} is no longer on connection {connection_id!r}")
        self.session_id = session_id
        self.connection_id = connection_id


class SessionClosed(Conflict):
    """The session exists but its status accepts no turns or connections."""

    def __init__(self, session_id: str, status: str) -> None:
        super().__init__(
            f"session {session_id!r} is {_plain(status)}; only active or handoff sessions accept turns and connections"
        )
        self.session_id = session_id
        self.status = str(status)


class NotTheAssignedAgent(Conflict):
    """The handoff is no longer assigned to the agent who acts on it (it was requeued and reassigned)."""

    def __init__(self, handoff_id: str, agent_id: str) -> None:
        super().__init__(f"handoff {handoff_id!r} is not assigned to agent {agent_id!r} (any more)")


class SessionInHandoff(Conflict):
    """The session is with a support agent: the assistant's answers cannot be rewound until the handoff ends."""

    def __init__(self, session_id: str) -> None:
        super().__init__(
            f"session {session_id!r} is with a support agent; it can be rewound once the handoff is closed"
        )
        self.session_id = session_id


class SessionChanged(Conflict):
    """A message or reply was stored, or the session was rewound, after the caller read it: nothing was changed."""

    def __init__(self, session_id: str) -> None:
        super().__init__(
            f"session {session_id!r} changed while it was being rewound (a message or reply arrived); "
            "nothing was removed: read its turns and try again"
        )
        self.session_id = session_id


class RewindTooLong(InvalidInput):
    """Rewinding would remove more records than one transaction may hold."""

    def __init__(self, session_id: str, turn_number: int, records: int, maximum: int) -> None:
        super().__init__(
            f"rewinding session {session_id!r} to turn {turn_number} would remove {records} records; "
            f"at most {maximum} can be removed at once: rewind to a later turn"
        )
        self.records = records


class AgentUnavailable(Conflict):
    """The agent was reserved, released or changed by someone else first."""

    def __init__(self, agent_id: str, reason: str) -> None:
        super().__init__(f"agent {agent_id!r} {reason}")
        self.agent_id = agent_id


class AgentExists(Conflict):
    """An agent with this id is registered already (retired ones included: their id stays taken)."""

    def __init__(self, agent_id: str, status: str) -> None:
        super().__init__(f"agent {agent_id!r} is already registered (status {_plain(status)})")
        self.agent_id = agent_id


class AgentRetired(Conflict):
    """The agent was retired from the registry: it takes no handoffs and changes no presence."""

    def __init__(self, agent_id: str) -> None:
        super().__init__(f"agent {agent_id!r} is retired; an admin must register an active agent id")
        self.agent_id = agent_id


class AgentBusy(Conflict):
    """The agent holds a live assignment (a reserved or assigned handoff); it cannot be retired now."""

    def __init__(self, agent_id: str, session_id: str | None) -> None:
        super().__init__(
            f"agent {agent_id!r} holds the handoff of session {session_id!r}; close that handoff "
            "(POST /handoffs/{session_id}/close) or wait for it to end, then retire the agent"
        )
        self.agent_id = agent_id
        self.session_id = session_id


class BatchWriteIncomplete(StoreError):
    """BatchWriteItem still returned UnprocessedItems after the retry bound.

    ``remaining`` items (the unprocessed ones plus those never sent) are still in the table; the
    operation is safe to run again.
    """

    http_status = 503

    def __init__(self, remaining: int, deleted: int) -> None:
        super().__init__(f"{remaining} item(s) left undeleted after retries ({deleted} deleted); retry later")
        self.remaining = remaining
        self.deleted = deleted
