"""``$disconnect``: the session becomes ``disconnected`` (entering the cleanup index), ``CONN#`` goes.

Idempotent and harmless: API Gateway may deliver ``$disconnect`` more than once, after a
reconnect, or for a connection whose onboarding never finished. Only the connection that is
still the session's current one disconnects the session; an older connection of a session the
customer has resumed elsewhere only loses its ``CONN#`` record. A disconnect during a handoff
ends the handoff too, in the same transaction that disconnects the session:

* an assigned handoff is completed and its agent released; the workflow notices at its next
  step (the reply wait's timeout finds it closed);
* a handoff that still waits (``queued`` for an agent, ``escalated`` for a manager) fails with
  the resolution "customer left", its waiting and managers inbox items go, and the waiting
  task's token is taken off the record (the store's ``abandon_handoff``), so a later accept
  gets 409. The wait is then stopped with ``SendTaskFailure`` and the error
  :data:`CUSTOMER_LEFT_ERROR`: the workflow's WaitForAgent catches every error other than a
  timeout (``States.ALL``) into HandoffFailed, which finds the handoff failed already and ends
  the execution failed (a timeout would escalate instead, so the name must not be one).

Environment: ``TABLE_NAME`` and ``states:SendTaskFailure`` on the handoff state machine.
"""

from __future__ import annotations

from typing import Any, Final

from aws_lambda_powertools import Logger
from botocore.exceptions import BotoCoreError, ClientError

# The error a waiting handoff's task fails with; WaitForAgent's States.ALL catch ends it in HandoffFailed.
from contracts.workflows import CUSTOMER_LEFT as CUSTOMER_LEFT_ERROR
from lambdas.shared.errors import Conflict, ConnectionSuperseded, InvalidTransition, NotFound, SessionNotFound
from lambdas.shared.records import TURN_ACCEPTING, HandoffStatus, Session, SessionStatus
from lambdas.shared.store import DynamoSessionStore
from lambdas.shared.store.handoff_life import WAITING_STATUSES
from lambdas.shared.tracing import tracer
from lambdas.ws import runtime
from lambdas.ws.frames import route_context

logger = Logger()
CUSTOMER_LEFT = "the customer disconnected during the handoff"
#: The resolution of a handoff that still waited for an agent or a manager when the customer left.
CUSTOMER_LEFT_WAITING: Final = "customer left: the customer disconnected before anyone took the handoff"
#: SendTaskFailure answers for a wait that ended already (timed out, execution over): nothing to stop.
_ENDED_TASK_CODES: Final = frozenset({"TaskTimedOut", "TaskDoesNotExist", "InvalidToken"})


def disconnect_connection(store: DynamoSessionStore, connection_id: str) -> str:
    """Forget the connection and disconnect its session if it is still the live one.

    Returns what happened: ``unknown``, ``superseded``, ``already_closed`` or ``disconnected``.
    Used by ``$disconnect`` and by the message path when the management API answers 410 Gone.
    """
    connection = store.get_connection(connection_id)
    if connection is None:
        return "unknown"
    outcome = "already_closed"
    session = store.get_session(connection.session_id)
    if session is not None and session.connection_id not in (None, connection_id):
        outcome = "superseded"
    elif session is not None and _ends_handoff(store, session, connection_id):
        outcome = "disconnected"
    elif session is not None and session.status in TURN_ACCEPTING:
        # The condition re-checks the connection in the same write: a resume that lands between
        # the read above and this write keeps the session open.
        guard = {"if_connection": connection_id} if session.connection_id is not None else {}
        try:
            store.update_status(session.session_id, SessionStatus.DISCONNECTED, connection_id=None, **guard)
            outcome = "disconnected"
        except ConnectionSuperseded:
            outcome = "superseded"
        except (InvalidTransition, SessionNotFound):
            outcome = "already_closed"  # a concurrent $disconnect or delete won the race
    store.delete_connection(connection_id)
    return outcome


def _ends_handoff(store: DynamoSessionStore, session: Session, connection_id: str) -> bool:
    """The customer leaves during a handoff: True when that ended the handoff and the session with it."""
    if session.status == SessionStatus.HANDOFF:
        return _end_handoff(store, session, connection_id)
    if session.status == SessionStatus.ACTIVE:  # a handoff waiting for an agent leaves the session active
        return _abandon_waiting_handoff(store, session, connection_id)
    return False


def _end_handoff(store: DynamoSessionStore, session: Session, connection_id: str) -> bool:
    """A customer who leaves during a handoff ends it: completed, agent released, session disconnected.

    False when there is nothing to close (the handoff already ended, or the session moved); the
    caller then disconnects the session the ordinary way.
    """
    handoff = store.current_handoff(session.session_id)
    if handoff is None or handoff.status != HandoffStatus.ASSIGNED:
        return False
    guard = connection_id if session.connection_id is not None else None
    try:
        store.close_handoff(
            session.session_id,
            handoff.handoff_id,
            closed_by=session.customer_id,
            resolution=CUSTOMER_LEFT,
            outcome=SessionStatus.DISCONNECTED,
            if_connection=guard,
        )
    except (Conflict, NotFound):
        return False
    return True


def _abandon_waiting_handoff(store: DynamoSessionStore, session: Session, connection_id: str) -> bool:
    """A customer who leaves while the handoff waits for an agent or a manager ends it (module docstring).

    False when nothing waits (no handoff, or it was taken, closed or failed meanwhile) or the
    session moved; the caller then disconnects the session the ordinary way.
    """
    handoff = store.current_handoff(session.session_id)
    if handoff is None or handoff.status not in WAITING_STATUSES:
        return False
    guard = connection_id if session.connection_id is not None else None
    try:
        abandoned = store.abandon_handoff(
            session.session_id,
            handoff.handoff_id,
            closed_by=session.customer_id,
            resolution=CUSTOMER_LEFT_WAITING,
            if_connection=guard,
        )
    except (Conflict, NotFound):
        return False
    stopped = abandoned.task_token is not None and _stop_wait(abandoned.task_token, handoff.handoff_id)
    logger.info(
        "waiting handoff ended: the customer left",
        extra={"handoff_id": handoff.handoff_id, "was": str(handoff.status), "wait_stopped": stopped},
    )
    return True


def _stop_wait(token: str, handoff_id: str) -> bool:
    """Fail the waiting task, whose token only this caller holds now; False when that did not happen.

    A wait that ended already (timed out, execution over) needs nothing. Any other refusal or a
    timeout (the client retried already) is logged and not raised: the handoff is failed and the
    session disconnected in the table, and the wait ends at its own timeout, after which the
    workflow's next step finds the session no longer active and ends in HandoffFailed.
    """
    try:
        runtime.stepfunctions().send_task_failure(
            taskToken=token, error=CUSTOMER_LEFT_ERROR, cause=f"handoff {handoff_id}: {CUSTOMER_LEFT_WAITING}"
        )
    except ClientError as err:
        code = err.response.get("Error", {}).get("Code")
        if code not in _ENDED_TASK_CODES:
            logger.exception("the handoff's wait was not stopped", extra={"handoff_id": handoff_id, "code": code})
        return False
    except BotoCoreError:
        # A connect or read timeout after the client's retries: no answer at all. Raising here would
        # leave the connection's record behind (the caller deletes it after the handoff is ended).
        logger.exception("the handoff's wait was not stopped", extra={"handoff_id": handoff_id, "code": None})
        return False
    return True


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    ctx = route_context(event)
    store = runtime.store()
    if ctx.customer_id:  # the connection's slot under the customer's connection cap is free again
        store.close_connection_slot(ctx.customer_id, ctx.connection_id)
    outcome = disconnect_connection(store, ctx.connection_id)
    logger.info("disconnected", extra={"connection_id": ctx.connection_id, "outcome": outcome})
    return {"statusCode": 200}
