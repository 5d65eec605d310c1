"""Agent-dashboard queue consumer: puts each handoff into the inbox of the agent it concerns.

Queue filter: ``agent_id`` exists (an assigned handoff: that agent's inbox), or ``event_type``
``handoff_waiting`` (a customer waits for any agent: the shared ``keys.WAITING_INBOX`` every
agent's console reads). One inbox item per (inbox, handoff), written only while the handoff
is in the state that inbox means (queued for the waiting inbox, assigned to that agent for an
agent's) and only once: a redelivered message changes nothing, and a message that arrives after
the handoff moved on (accepted, closed, failed, reassigned) writes nothing and is no error,
so a late message never puts back an item the handoff's transition removed
(``lambdas/shared/store/inbox.py``). Partial batch responses: a failed message is retried
alone and reaches the DLQ after 3 receives.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from lambdas.events.messages import EVENT_HANDOFF_WAITING, InvalidMessage, parse_body
from lambdas.shared import keys
from lambdas.shared.logs import masked_formatter
from lambdas.shared.settings import store as store
from lambdas.shared.store import preload
from lambdas.shared.tracing import tracer

preload("inbox")  # used by its invocations: loaded at init, not by the first one
logger = Logger(logger_formatter=masked_formatter())
processor = BatchProcessor(event_type=EventType.SQS)

#: The broadcast the handoff workflow's assignment-queue consumer sends before any agent is known.
WAITING_EVENT = EVENT_HANDOFF_WAITING


def record_handler(record: SQSRecord) -> str:
    message = parse_body(record.body)
    inbox = message.agent_id
    if inbox is None and message.event_type == WAITING_EVENT:
        inbox = keys.WAITING_INBOX
    if inbox is None or message.handoff_id is None:
        raise InvalidMessage("a dashboard message needs handoff_id and agent_id (or event_type handoff_waiting)")
    written = store().inbox.put_inbox_item(
        inbox,
        session_id=message.session_id,
        handoff_id=message.handoff_id,
        reason=message.reason or "unspecified",
    )
    logger.info("inbox", extra={"inbox": inbox, "handoff_id": message.handoff_id, "inbox_write": written.value})
    return message.handoff_id


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    return process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)
