"""``$disconnect``: the session becomes ``disconnected`` (entering the cleanup index), ``CONN#`` goes.

Idempotent and harmless: API Gateway may deliver ``$disconnect`` more than once, after a
reconnect, or for a connection whose onboarding never finished. Only the connection that is
still the session's current one disconnects the session; an older connection of a session the
customer has resumed elsewhere only loses its ``CONN#`` record.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Tracer

from lambdas.shared.errors import ConnectionSuperseded, InvalidTransition, SessionNotFound
from lambdas.shared.records import TURN_ACCEPTING, SessionStatus
from lambdas.shared.store import DynamoSessionStore
from lambdas.ws import runtime
from lambdas.ws.frames import route_context

logger = Logger()
tracer = Tracer()


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
