"""A customer leaving: the connection forgotten, the session disconnected, a handoff ended with it.

Idempotent and harmless: API Gateway may deliver ``$disconnect`` more than once, after a
reconnect, or for a connection whose onboarding never finished. Only the connection that is
still the session's current one disconnects the session; an older connection of a session the
customer has resumed elsewhere only loses its ``CONN#`` record. A disconnect during a handoff
ends the handoff too, in the same transaction that disconnects the session:

* an assigned handoff is completed and its agent released (:mod:`.close_handoff`); the workflow
  notices at its next step (the reply wait's timeout finds it closed);
* a handoff that still waits (``queued`` for an agent, ``escalated`` for a manager) is abandoned
  (:func:`abandon_handoff`): it fails with the resolution "customer left", its waiting and
  managers inbox items go, and the waiting task's token is taken off the record, so a later
  accept gets 409. The caller's ``stop_wait`` then ends the workflow's wait with that token.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Final

from aws_lambda_powertools import Logger

from lambdas.shared import keys
from lambdas.shared.errors import (
    Conflict,
    ConnectionSuperseded,
    HandoffNotFound,
    InvalidTransition,
    NotFound,
    SessionNotFound,
)
from lambdas.shared.logs import masked_formatter
from lambdas.shared.records import TURN_ACCEPTING, WAITING_STATUSES, Handoff, HandoffStatus, Session, SessionStatus
from lambdas.shared.store import DynamoSessionStore
from lambdas.shared.store.handoffs import HandoffClosed
from lambdas.shared.store.table import Cancelled, Transaction, read_modify_write, require_id
from lambdas.usecases.close_handoff import MAX_CLOSE_READS, close_handoff, require_resolution

logger = Logger(logger_formatter=masked_formatter())

CUSTOMER_LEFT: Final = "the customer disconnected during the handoff"
#: The resolution of a handoff whose session was deleted (by its customer or an admin) during it.
SESSION_DELETED: Final = "the session was deleted during the handoff"
#: The resolution of a handoff that still waited for an agent or a manager when the customer left.
CUSTOMER_LEFT_WAITING: Final = "customer left: the customer disconnected before anyone took the handoff"

#: Ends the wait of the handoff's workflow with the token taken off the record: ``(token, handoff_id) -> stopped``.
StopWait = Callable[[str, str], bool]


@dataclass(frozen=True)
class Abandoned:
    """What :func:`abandon_handoff` wrote, and the waiting task's token it took (if any)."""

    handoff: Handoff
    task_token: str | None
    waiting_for: str | None


def disconnect_connection(store: DynamoSessionStore, connection_id: str, *, stop_wait: StopWait) -> str:
    """Forget the connection and disconnect its session if it is still the live one.

    Returns what happened: ``unknown``, ``superseded``, ``already_closed`` or ``disconnected``.
    """
    connection = store.connections.get_connection(connection_id)
    if connection is None:
        return "unknown"
    outcome = "already_closed"
    session = store.sessions.get_session(connection.session_id)
    if session is not None and session.connection_id not in (None, connection_id):
        outcome = "superseded"
    elif session is not None and _ends_handoff(store, session, connection_id, stop_wait):
        outcome = "disconnected"
    elif session is not None and session.status in TURN_ACCEPTING:
        # The condition re-checks the connection in the same write: a resume that lands between
        # the read above and this write keeps the session open.
        guard = {"if_connection": connection_id} if session.connection_id is not None else {}
        try:
            store.sessions.update_status(session.session_id, SessionStatus.DISCONNECTED, connection_id=None, **guard)
            outcome = "disconnected"
        except ConnectionSuperseded:
            outcome = "superseded"
        except (InvalidTransition, SessionNotFound):
            outcome = "already_closed"  # a concurrent $disconnect or delete won the race
    store.connections.delete_connection(connection_id)
    return outcome


def delete_during_handoff(store: DynamoSessionStore, session: Session, *, deleted_by: str, stop_wait: StopWait) -> bool:
    """A session deleted during a handoff: the handoff ends with it, as when the customer leaves.

    True when one transaction ended the handoff (an assigned one completed and its agent released,
    so the agent's access ends; a waiting one failed, its inbox items gone and its wait stopped)
    and deleted the session. False when there was no handoff to end: the caller deletes the
    session the ordinary way.
    """
    return _ends_handoff(
        store, session, None, stop_wait, outcome=SessionStatus.DELETED, closed_by=deleted_by, why=SESSION_DELETED
    )


def _ends_handoff(
    store: DynamoSessionStore,
    session: Session,
    connection_id: str | None,
    stop_wait: StopWait,
    *,
    outcome: SessionStatus = SessionStatus.DISCONNECTED,
    closed_by: str | None = None,
    why: str | None = None,
) -> bool:
    """The customer leaves during a handoff: True when that ended the handoff and the session with it.

    False when there is nothing to end (no handoff, or it was taken, closed or failed meanwhile)
    or the session moved; the caller then disconnects the session the ordinary way. ``outcome``,
    ``closed_by`` and ``why`` say where the session goes, who ended it and why (a deletion).
    """
    if session.status not in (SessionStatus.HANDOFF, SessionStatus.ACTIVE):
        return False
    handoff = store.handoffs.current_handoff(session.session_id)
    if handoff is None:
        return False
    guard = connection_id if connection_id is not None and session.connection_id is not None else None
    try:
        if session.status == SessionStatus.HANDOFF and handoff.status == HandoffStatus.ASSIGNED:
            close_handoff(
                store,
                session.session_id,
                handoff.handoff_id,
                closed_by=closed_by or session.customer_id,
                resolution=why or CUSTOMER_LEFT,
                outcome=outcome,
                if_connection=guard,
            )
            return True
        if session.status != SessionStatus.ACTIVE or handoff.status not in WAITING_STATUSES:
            return False  # a handoff waiting for an agent leaves the session active
        abandoned = abandon_handoff(
            store,
            session.session_id,
            handoff.handoff_id,
            closed_by=closed_by or session.customer_id,
            resolution=why or CUSTOMER_LEFT_WAITING,
            if_connection=guard,
            outcome=outcome,
        )
    except (Conflict, NotFound):
        return False
    stopped = abandoned.task_token is not None and stop_wait(abandoned.task_token, handoff.handoff_id)
    logger.info(
        "waiting handoff ended: the customer left",
        extra={"handoff_id": handoff.handoff_id, "was": str(handoff.status), "wait_stopped": stopped},
    )
    return True


def abandon_handoff(
    store: DynamoSessionStore,
    session_id: str,
    handoff_id: str,
    *,
    closed_by: str,
    resolution: str,
    if_connection: str | None = None,
    outcome: SessionStatus = SessionStatus.DISCONNECTED,
) -> Abandoned:
    """End a handoff nobody took yet because the customer left (see the module docstring).

    One transaction: ``HANDOFF#`` ``queued|escalated -> failed`` with the resolution, the
    waiting task's token removed (conditioned on being the token just read, so exactly one of
    this and an agent's accept gets it); the session META ``active -> disconnected``
    (conditioned on its current handoff and, with ``if_connection``, on its connection);
    the waiting and managers inbox items deleted. Returns the token for the caller to fail
    the wait with. Raises HandoffNotFound, or HandoffClosed when the handoff is no longer
    waiting (taken, closed, failed) or the session moved (nothing was changed).
    """
    require_id(closed_by, "closed_by")
    require_resolution(resolution)

    def attempt() -> Abandoned:
        stored = store.table.get(keys.handoff_key(session_id, handoff_id))
        if stored is None:
            raise HandoffNotFound(session_id, handoff_id)
        handoff = Handoff.from_item(stored)
        if handoff.status not in WAITING_STATUSES:
            raise HandoffClosed(f"handoff {handoff_id!r} is {handoff.status}; nobody waits on it any more")
        token = str(stored["callback_token"]) if stored.get("callback_token") else None
        waiting_for = str(stored["waiting_for"]) if stored.get("waiting_for") else None
        now = store.table.now()
        tx = Transaction(store.table.table_name)
        store.handoffs.abandon(tx, handoff, token, closed_by=closed_by, resolution=resolution, outcome=outcome, now=now)
        store.sessions.leave_handoff(
            tx,
            session_id,
            handoff_id,
            outcome,
            now=now,
            if_connection=if_connection,
            from_status=SessionStatus.ACTIVE,
        )
        try:
            store.table.commit(tx)
        except Cancelled as cancelled:
            if "session" in cancelled.failed:
                raise HandoffClosed(f"session {session_id!r} moved on from handoff {handoff_id!r}") from None
            raise  # the handoff moved (accepted, escalated, its token taken): read again
        return Abandoned(replace(handoff, status=HandoffStatus.FAILED, updated_at=now), token, waiting_for)

    return read_modify_write(
        MAX_CLOSE_READS,
        attempt,
        exhausted=lambda: Conflict(f"handoff {handoff_id!r} kept changing while it was abandoned; retry"),
    )
