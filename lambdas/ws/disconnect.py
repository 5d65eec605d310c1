"""``$disconnect``: the session becomes ``disconnected`` (entering the cleanup index), ``CONN#`` goes.

A thin handler over the use case :mod:`lambdas.usecases.customer_leaves`, which says what a
disconnect does to the session and to a handoff in progress. A handoff that still waited for an
agent or a manager loses its waiting task's token to the use case, and this handler stops the
wait with ``SendTaskFailure`` and the error :data:`CUSTOMER_LEFT_ERROR`: the workflow's
WaitForAgent catches every error other than a timeout (``States.ALL``) into HandoffFailed, which
finds the handoff failed already and ends the execution failed (a timeout would escalate
instead, so the name must not be one).

Environment: ``TABLE_NAME`` and ``states:SendTaskFailure`` on the handoff state machine.
"""

from __future__ import annotations

from typing import Any, Final

from aws_lambda_powertools import Logger
from botocore.exceptions import BotoCoreError, ClientError

# The error a waiting handoff's task fails with; WaitForAgent's States.ALL catch ends it in HandoffFailed.
from contracts.workflows import CUSTOMER_LEFT as CUSTOMER_LEFT_ERROR
from lambdas.shared.store import DynamoSessionStore
from lambdas.shared.tracing import tracer
from lambdas.usecases import customer_leaves
from lambdas.usecases.customer_leaves import CUSTOMER_LEFT_WAITING
from lambdas.ws import runtime
from lambdas.ws.frames import route_context

__all__ = ["CUSTOMER_LEFT_ERROR", "CUSTOMER_LEFT_WAITING", "disconnect_connection", "handler"]

logger = Logger()
#: SendTaskFailure answers for a wait that ended already (timed out, execution over): nothing to stop.
_ENDED_TASK_CODES: Final = frozenset({"TaskTimedOut", "TaskDoesNotExist", "InvalidToken"})


def disconnect_connection(store: DynamoSessionStore, connection_id: str) -> str:
    """The customer leaves (:mod:`lambdas.usecases.customer_leaves`); a waiting handoff's wait is failed.

    Returns what happened: ``unknown``, ``superseded``, ``already_closed`` or ``disconnected``.
    Used by ``$disconnect``, by onboarding when its client left, and by the message path when the
    management API answers 410 Gone.
    """
    return customer_leaves.disconnect_connection(store, connection_id, stop_wait=_stop_wait)


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
        store.limits.close_connection_slot(ctx.customer_id, ctx.connection_id)
    outcome = disconnect_connection(store, ctx.connection_id)
    logger.info("disconnected", extra={"connection_id": ctx.connection_id, "outcome": outcome})
    return {"statusCode": 200}
