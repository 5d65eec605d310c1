"""Customer-notification queue consumer (deployed in ApiStack): tells the customer about a handoff.

Body: ``{"session_id", "event_type", "text", ...}`` (the handoff message, or a message the
handoff workflow sends straight to the queue). A message without ``text`` is not for the
customer (the queue gets every message of the handoff topic, e.g. the workflow's
``handoff_context`` for the agent) and is skipped. When the session has a live WebSocket connection
the text goes to it as a frame, through ``WEBSOCKET_ENDPOINT`` (the management endpoint, set by
ApiStack) or else the endpoint the connection record names; when it has none, or the client is gone (410), the text is
recorded as a ``system`` turn of the conversation, so the customer reads it on return (and a
gone connection is cleared). A closed session (disconnected, archived, deleted) is only logged.
SQS is at-least-once: a redelivered message may post or record the text twice; the frame
carries ``event_id`` so a client can drop a repeat.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from lambdas.events.messages import HandoffMessage, parse_body
from lambdas.shared import connections, env
from lambdas.shared.records import TURN_ACCEPTING, Role
from lambdas.shared.settings import optional_resource
from lambdas.shared.settings import store as store
from lambdas.shared.store import DynamoSessionStore

logger = Logger()
tracer = Tracer()
processor = BatchProcessor(event_type=EventType.SQS)


@env.once
def configured_endpoint() -> str | None:
    return optional_resource("WEBSOCKET_ENDPOINT")


def frame(message: HandoffMessage) -> dict[str, Any]:
    return {
        "type": "notification",
        "event_type": message.event_type,
        "session_id": message.session_id,
        "text": message.text,
        "event_id": message.event_id,
    }


def notify(session_store: DynamoSessionStore, message: HandoffMessage, endpoint: str | None = None) -> str:
    """delivered | recorded | skipped | dropped (see the module docstring)."""
    if not message.text:
        return "skipped"
    session = session_store.get_session(message.session_id)
    if session is None:
        return "dropped"
    if session.connection_id:
        connection = session_store.get_connection(session.connection_id)
        if connection is not None:
            target = endpoint or connections.management_endpoint(connection.domain_name, connection.stage)
            if connections.post_to_connection(target, connection.connection_id, frame(message)):
                return "delivered"
        session_store.clear_connection(session.session_id, session.connection_id)
    if session.status not in TURN_ACCEPTING:
        return "dropped"
    session_store.add_turn(session.session_id, Role.SYSTEM, message.text)
    return "recorded"


def record_handler(record: SQSRecord) -> str:
    message = parse_body(record.body)
    outcome = notify(store(), message, configured_endpoint())
    logger.info("customer notification", extra={"session_id": message.session_id, "outcome": outcome})
    return outcome


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    return process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)
