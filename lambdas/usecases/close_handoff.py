"""Closing a handoff: the record completed, the agent released and the session moved, in ONE transaction.

A handoff ends when its agent (or an admin) closes it with a resolution, or when the customer
disconnects during it (:mod:`.customer_leaves`). Either way one TransactWriteItems:

* the ``HANDOFF#`` record ``assigned -> completed`` with the resolution, who closed it and when,
  conditioned on its status and on the agent it was assigned to (a second close changes nothing,
  and a close racing a failure never overwrites ``failed``);
* the session META ``handoff -> active`` (the assistant answers again) or ``-> disconnected``
  (the session ends and waits for cleanup), conditioned on the session still being in this
  handoff (``current_handoff_id``);
* the agent's release (``busy -> available``, back into the AvailableAgentsIndex) when the agent
  still serves this session, conditioned on the revision just read;
* the handoff's items in the agent's inbox and in the shared waiting and managers inboxes
  deleted, so that every console's inbox shows only handoffs someone must still act on.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final

from lambdas.shared.errors import Conflict, HandoffNotFound, InvalidInput, NotTheAssignedAgent
from lambdas.shared.records import AgentStatus, Handoff, HandoffStatus, SessionStatus
from lambdas.shared.store import DynamoSessionStore
from lambdas.shared.store.handoffs import HandoffClosed
from lambdas.shared.store.table import Cancelled, Transaction, read_modify_write, require_id

#: Where a closed handoff leaves the session: the assistant answers again, the session ended, or
#: (a DELETE during the handoff) the session deleted.
CLOSE_OUTCOMES: Final = (SessionStatus.ACTIVE, SessionStatus.DISCONNECTED, SessionStatus.DELETED)
MAX_RESOLUTION: Final = 1000
#: How often a close re-reads a handoff or an agent whose record changed between the read and the write.
MAX_CLOSE_READS: Final = 3


@dataclass(frozen=True)
class Closed:
    """What a close wrote."""

    handoff: Handoff
    session_status: SessionStatus
    released_agent_id: str | None


def require_resolution(resolution: str) -> None:
    if not resolution.strip() or len(resolution) > MAX_RESOLUTION:
        raise InvalidInput(f"resolution must be a non-empty text of at most {MAX_RESOLUTION} characters")


def close_handoff(
    store: DynamoSessionStore,
    session_id: str,
    handoff_id: str,
    *,
    closed_by: str,
    resolution: str,
    outcome: SessionStatus | str,
    if_connection: str | None = None,
    assigned_to: str | None = None,
) -> Closed:
    """Close an assigned handoff in one transaction (see the module docstring).

    ``if_connection`` adds "the session's connection is this one" (a customer's disconnect).
    ``assigned_to`` closes only while the handoff is assigned to that agent (an agent's own close:
    a handoff requeued and given to another agent since the caller was authorised raises
    NotTheAssignedAgent; the transaction's condition on the agent read makes it hold at the write).
    Raises HandoffNotFound, HandoffClosed (409: nothing was changed) or Conflict when the
    handoff or agent kept changing.
    """
    require_id(closed_by, "closed_by")
    new_status = SessionStatus(outcome)
    if new_status not in CLOSE_OUTCOMES:
        raise InvalidInput(f"outcome must be one of {[str(s) for s in CLOSE_OUTCOMES]} (given {outcome!r})")
    require_resolution(resolution)

    def attempt() -> Closed:
        handoff = store.handoffs.get_handoff(session_id, handoff_id)
        if handoff is None:
            raise HandoffNotFound(session_id, handoff_id)
        if handoff.status != HandoffStatus.ASSIGNED or not handoff.agent_id:
            raise HandoffClosed(f"handoff {handoff_id!r} is {handoff.status}; only an assigned handoff can close")
        if assigned_to is not None and handoff.agent_id != assigned_to:
            raise NotTheAssignedAgent(handoff_id, assigned_to)
        now = store.table.now()
        tx = Transaction(store.table.table_name)
        store.handoffs.complete(tx, handoff, closed_by=closed_by, resolution=resolution, outcome=new_status, now=now)
        store.sessions.leave_handoff(tx, session_id, handoff_id, new_status, now=now, if_connection=if_connection)
        released_id = _release_if_serving(store, tx, handoff)
        try:
            store.table.commit(tx)
        except Cancelled as cancelled:
            if "session" in cancelled.failed and "handoff" not in cancelled.failed:
                raise HandoffClosed(f"session {session_id!r} is no longer in handoff {handoff_id!r}") from None
            raise  # the handoff moved (it is closed or re-queued now) or the agent changed: read again
        completed = replace(handoff, status=HandoffStatus.COMPLETED, updated_at=now)
        return Closed(completed, new_status, released_id)

    return read_modify_write(
        MAX_CLOSE_READS,
        attempt,
        exhausted=lambda: Conflict(f"handoff {handoff_id!r} kept changing while it was closed; retry"),
    )


def _release_if_serving(store: DynamoSessionStore, tx: Transaction, handoff: Handoff) -> str | None:
    """Add the release of the handoff's agent to ``tx`` when it still serves this session; its id, or None."""
    agent = store.agents.get_agent(str(handoff.agent_id))
    if agent is None or agent.status != AgentStatus.BUSY or agent.current_session_id != handoff.session_id:
        return None
    store.agents.release(tx, agent, session_id=handoff.session_id)
    return agent.agent_id
