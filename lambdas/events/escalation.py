"""Escalation queue consumer: pages the managers when a handoff escalates.

Queue filter: ``event_type`` = escalated, the router's event for a ``HANDOFF#`` record whose
status became ``escalated`` (no agent accepted in time; the handoff workflow now waits for a
manager, see docs/workflows.md). The workflow sets the status; this consumer only tells people:

1. the managers' shared inbox (``keys.MANAGERS_INBOX``), which every manager's console reads
   through ``GET /agents/me/inbox`` on every stage. The write is conditional on the handoff still
   being escalated, and on the item not existing yet, so it is also this page's record: a
   redelivered message finds it PRESENT and pages nobody again.
2. the managers' SNS topic (``MANAGERS_TOPIC_ARN``; prod subscribes ``managers_email``), with
   how to take the handoff. It is a topic of its own: a message on the handoff topic would be
   routed again.

If the publish fails, the inbox item is removed again and the message retried, so the e-mail is
never skipped by a redelivery; a crash between the two steps leaves the inbox item without the
e-mail (the managers' consoles still show it). A handoff taken, closed or failed meanwhile is
left alone (``moved_on``).
"""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from lambdas.events.messages import ATTR_EVENT_TYPE, EVENT_ESCALATED, EVENT_ESCALATION, InvalidMessage, parse_body
from lambdas.shared import aws, keys
from lambdas.shared.logs import masked_formatter
from lambdas.shared.settings import resource
from lambdas.shared.settings import store as store
from lambdas.shared.store import InboxWrite, preload
from lambdas.shared.tracing import tracer

preload("handoffs")  # used by its invocations: loaded at init, not by the first one
logger = Logger(logger_formatter=masked_formatter())
processor = BatchProcessor(event_type=EventType.SQS)


def managers_topic() -> str:
    return resource("MANAGERS_TOPIC_ARN")


def sns() -> Any:
    return aws.client("sns")


def page_text(session_id: str, handoff_id: str, reason: str, priority: str) -> str:
    return (
        f"No agent took a {priority}-priority handoff ({reason}) in time; it waits for a manager.\n\n"
        f"Session: {session_id}\nHandoff: {handoff_id}\n\n"
        f"Take it from your console's inbox, or: POST /handoffs/{session_id}/accept"
    )


def record_handler(record: SQSRecord) -> str:
    message = parse_body(record.body)
    if message.event_type != EVENT_ESCALATED:
        return "ignored"
    if message.handoff_id is None:
        raise InvalidMessage("an escalation message needs handoff_id")
    session_id, handoff_id = message.session_id, message.handoff_id
    reason, priority = message.reason or "unspecified", message.priority
    written = store().inbox.put_inbox_item(
        keys.MANAGERS_INBOX, session_id=session_id, handoff_id=handoff_id, reason=reason
    )
    if written is InboxWrite.STALE:
        return "moved_on"
    if written is InboxWrite.PRESENT:
        return "paged_already"
    try:
        sns().publish(
            TopicArn=managers_topic(),
            Subject="MangaAssist escalation: a customer waits for a manager",
            Message=page_text(session_id, handoff_id, reason, priority),
            MessageAttributes={
                ATTR_EVENT_TYPE: {"DataType": "String", "StringValue": EVENT_ESCALATION},
                "handoff": {"DataType": "String", "StringValue": json.dumps([session_id, handoff_id])},
            },
        )
    except Exception:
        handoff = store().handoffs.get_handoff(session_id, handoff_id)
        if handoff is not None:
            store().inbox.remove_inbox_item(keys.MANAGERS_INBOX, handoff)  # so the retry pages again
        raise
    logger.info("managers paged", extra={"session_id": session_id, "handoff_id": handoff_id})
    return "paged"


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    return process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)
