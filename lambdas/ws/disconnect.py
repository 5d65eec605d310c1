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

from typing import Any

from aws_lambda_powertools import Logger

# The error a waiting handoff's task fails with; WaitForAgent's States.ALL catch ends it in HandoffFailed.
from contracts.workflows import CUSTOMER_LEFT as CUSTOMER_LEFT_ERROR
from lambdas.shared.logs import masked_formatter
from lambdas.shared.store import DynamoSessionStore
from lambdas.shared.tracing import tracer
from lambdas.shared.waits import fail_wait
from lambdas.usecases import customer_leaves
from lambdas.usecases.customer_leaves import CUSTOMER_LEFT_WAITING
from lambdas.ws import runtime
from lambdas.ws.frames import route_context

__all__ = ["CUSTOMER_LEFT_ERROR", "CUSTOMER_LEFT_WAITING", "disconnect_connection", "handler"]

logger = Logger(logger_formatter=masked_formatter())


def disconnect_connection(store: DynamoSessionStore, connection_id: str) -> str:
    """The customer leaves (:mod:`lambdas.usecases.customer_leaves`); a waiting handoff's wait is failed.

    Returns what happened: ``unknown``, ``superseded``, ``already_closed`` or ``disconnected``.
    Used by ``$disconnect``, by onboarding when its client left, and by the message path when the
    management API answers 410 Gone.
    """
    return customer_leaves.disconnect_connection(store, connection_id, stop_wait=_stop_wait)


def _stop_wait(token: str, handoff_id: str) -> bool:
    """Fail the waiting task (:func:`lambdas.shared.waits.fail_wait`); False when that did not happen."""
    return fail_wait(runtime.stepfunctions(), token, handoff_id, CUSTOMER_LEFT_WAITING)


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
