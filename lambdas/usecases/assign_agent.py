"""Assigning an agent: the session handed to the agent in ONE transaction.

One TransactWriteItems: the session META ``active -> handoff``, the ``HANDOFF#`` record
(assigned to the agent, out of the shared inboxes) and a system TURN. The turn number comes from
the session's atomic ``turn_count`` counter: the transaction sets ``turn_count = n + 1``
conditioned on it still being ``n`` (read just before), so the number is unique and the counter
exact; when a concurrent turn moves the counter first, the transaction is cancelled and the
session read again (at most :data:`MAX_BEGIN_READS` times).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from lambdas.shared import keys
from lambdas.shared.errors import Conflict
from lambdas.shared.records import Handoff, HandoffStatus, Role, SessionStatus, Turn
from lambdas.shared.store import DynamoSessionStore
from lambdas.shared.store.handoffs import ASSIGNABLE, PREVIOUS_AGENT, HandoffConflict, SessionNotActive
from lambdas.shared.store.table import Cancelled, Transaction, read_modify_write

#: How often an assignment re-reads a session whose turn counter moved under it (optimistic locking).
MAX_BEGIN_READS: Final = 5


@dataclass(frozen=True)
class Begun:
    handoff: Handoff
    turn_number: int | None  # None when a retry found the transaction already applied


def begin_handoff(
    store: DynamoSessionStore,
    session_id: str,
    *,
    handoff_id: str,
    agent_id: str,
    reason: str,
    priority: str,
    execution_arn: str | None,
    system_text: str,
) -> Begun:
    """Hand the session to ``agent_id`` in one transaction (see the module docstring).

    Raises SessionNotActive (missing or not active), HandoffConflict, or Conflict when the
    turn counter kept moving for MAX_BEGIN_READS reads. A retry after success returns the
    stored handoff (``turn_number`` None) without writing again.
    """

    def attempt() -> Begun:
        session = store.sessions.get_session(session_id)
        if session is None:
            raise SessionNotActive(session_id, "missing")
        stored = store.table.get(keys.handoff_key(session_id, handoff_id))
        existing = Handoff.from_item(stored) if stored else None
        if (
            existing is not None
            and existing.status == HandoffStatus.ASSIGNED
            and existing.agent_id == agent_id
            and session.status == SessionStatus.HANDOFF
        ):
            return Begun(existing, None)
        if session.status != SessionStatus.ACTIVE:
            raise SessionNotActive(session_id, str(session.status))
        if existing is not None and existing.status not in ASSIGNABLE:
            raise HandoffConflict(f"handoff {handoff_id!r} is {existing.status}; it cannot be assigned")
        now = store.table.now()
        ttl = now + store.table.ttl_seconds
        handoff = Handoff(
            session_id=session_id,
            handoff_id=handoff_id,
            reason=reason,
            priority=existing.priority if existing else priority,  # where it waited in the queue
            status=HandoffStatus.ASSIGNED,
            created_at=existing.created_at if existing else now,
            updated_at=now,
            ttl=ttl,
            agent_id=agent_id,
            execution_arn=execution_arn,
            assigned_at=now,
        )
        turn = Turn(session_id, session.turn_count + 1, Role.SYSTEM, system_text, now, ttl)
        carried = {PREVIOUS_AGENT: stored[PREVIOUS_AGENT]} if stored and stored.get(PREVIOUS_AGENT) else {}
        tx = Transaction(store.table.table_name)
        store.sessions.enter_handoff(
            tx, session_id, handoff_id=handoff_id, turn_count=session.turn_count, now=now, ttl=ttl
        )
        store.handoffs.assign(tx, handoff, carried)
        store.turns.put_in(tx, turn)
        try:
            store.table.commit(tx)
        except Cancelled as cancelled:
            if "handoff" in cancelled.failed:
                raise HandoffConflict(f"handoff {handoff_id!r} changed concurrently") from None
            raise  # the session moved or the counter moved: read again
        return Begun(handoff, turn.turn_number)

    return read_modify_write(
        MAX_BEGIN_READS,
        attempt,
        exhausted=lambda: Conflict(f"session {session_id!r} kept changing; handoff {handoff_id!r} not started, retry"),
    )
