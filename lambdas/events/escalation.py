"""Escalation queue consumer: marks an escalated handoff and tells the managers.

Queue filter: ``reason`` = escalated. Only the creation message (``event_type`` handoff) acts;
the later "assigned" message of the same handoff is ignored, so an assignment never turns an
assigned handoff back into an escalated one.

Managers are told on their own SNS topic (``MANAGERS_TOPIC_ARN``), not on the handoff topic: a
message there would carry ``reason`` escalated again and loop back into this queue. Order:
publish first, then mark the handoff; a crash in between re-publishes on redelivery (managers
may see a duplicate, never nothing), and a redelivery after both steps sees the handoff already
escalated and does nothing.
"""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from lambdas.events.messages import ATTR_EVENT_TYPE, EVENT_ESCALATION, EVENT_HANDOFF, InvalidMessage, parse_body
from lambdas.shared import aws
from lambdas.shared.records import HandoffStatus
from lambdas.shared.settings import resource
from lambdas.shared.settings import store as store

logger = Logger()
tracer = Tracer()
processor = BatchProcessor(event_type=EventType.SQS)

# A handoff in one of these states is over or done: escalating it again means nothing.
_FINAL = frozenset({HandoffStatus.ESCALATED, HandoffStatus.COMPLETED, HandoffStatus.FAILED})


def managers_topic() -> str:
    return resource("MANAGERS_TOPIC_ARN")


def sns() -> Any:
    return aws.client("sns")


def record_handler(record: SQSRecord) -> str:
    message = parse_body(record.body)
    if message.handoff_id is None:
        raise InvalidMessage("an escalation message needs handoff_id")
    if message.event_type != EVENT_HANDOFF:
        return "ignored"
    handoff = store().get_handoff(message.session_id, message.handoff_id)
    if handoff is None:
        logger.warning("handoff gone", extra={"session_id": message.session_id, "handoff_id": message.handoff_id})
        return "gone"
    if handoff.status in _FINAL:
        return "done"
    sns().publish(
        TopicArn=managers_topic(),
        Subject="MangaAssist escalation",
        Message=json.dumps(
            {
                "session_id": handoff.session_id,
                "handoff_id": handoff.handoff_id,
                "reason": handoff.reason,
                "priority": handoff.priority,
                "agent_id": handoff.agent_id,
            },
            separators=(",", ":"),
            sort_keys=True,
        ),
        MessageAttributes={ATTR_EVENT_TYPE: {"DataType": "String", "StringValue": EVENT_ESCALATION}},
    )
    store().update_handoff(message.session_id, message.handoff_id, status=HandoffStatus.ESCALATED)
    logger.info("escalated", extra={"session_id": message.session_id, "handoff_id": message.handoff_id})
    return "escalated"


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    return process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)
