"""Customer-notification queue consumer (deployed in ApiStack): tells the customer about their handoff.

What arrives, one source per notice so the customer hears each once:

* from the handoff workflow, straight to the queue: ``handoff_started`` and ``handoff_failed``,
  with the ``text`` to show and an ``event_id`` made of the execution and the notice;
* from the stream router, through the handoff topic (filter ``event_type`` queued, escalated or
  completed): the handoff queued because no agent was free (with how many customers asking the
  same help wait ahead), the handoff escalated to a manager, or the handoff closed (with its
  ``resolution`` and ``outcome``). This module writes their text (:func:`notice_for`).

Where it goes, in this order:

1. the session's live WebSocket connection, as a frame (``notification``; a closed handoff is the
   ``handoff_closed`` frame of the WebSocket protocol), through ``WEBSOCKET_ENDPOINT`` or the
   endpoint the connection record names;
2. when the customer is not connected (or the client is gone: 410, and the stale connection is
   cleared), by e-mail to the address recorded on the session, if the stage may mail it
   (:mod:`lambdas.shared.mail`: a sender is set, the domain is allowed, SES accepts it);
3. otherwise as a ``system`` turn of the conversation, which the customer reads on return (only
   while the session accepts turns; a closed session's notice is only logged).

A deleted session gets nothing, whatever the notice: its customer deleted it, an admin did, or the
customer asked to be erased, and the erasure ends a running handoff before it removes the
session's items. Its notices (the handoff closed or failed with it) arrive while those items may
still be there, and neither the connection nor the address the session names is used again.

A queued notice goes only to a live connection: it answers the customer's request as it happens,
and a customer who comes back later is greeted with the session's status (``handoff``) instead.

Exactly once: a message with an ``event_id`` is handled under Powertools' idempotency utility on
the stage's table, keyed on that id, so an SQS redelivery neither posts, mails nor records twice.
A crash after delivering but before the record completes can repeat that one notice after the
function's timeout (a duplicate, never a loss); the frame carries ``event_id`` so a client can
drop it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig
from aws_lambda_powertools.utilities.typing import LambdaContext

from lambdas.events.messages import EVENT_CLOSED, EVENT_ESCALATED, EVENT_QUEUED, HandoffMessage, parse_body
from lambdas.shared import connections, env, idempotency, mail
from lambdas.shared.logs import masked_formatter
from lambdas.shared.records import TURN_ACCEPTING, Connection, HandoffStatus, Role, Session, SessionStatus
from lambdas.shared.settings import optional_resource
from lambdas.shared.settings import store as store
from lambdas.shared.store import DynamoSessionStore, preload
from lambdas.shared.tracing import tracer

preload("handoffs", "inbox", "sessions")  # used by its invocations: loaded at init, not by the first one
logger = Logger(logger_formatter=masked_formatter())
processor = BatchProcessor(event_type=EventType.SQS)

ESCALATED_TEXT: Final = (
    "No support agent was free in time, so a manager has been asked to take over. They will answer you here."
)
#: The queued handoff's text; ``{ahead}`` says how many customers asking the same help wait before them.
QUEUED_TEXT: Final = (
    "All our support agents are busy; you are in the queue ({ahead}). You can keep writing here: "
    "the agent who takes over reads your messages."
)
#: The closed handoff's text by how the session goes on (the close route's ``outcome``).
CLOSED_TEXT: Final = {
    "resume": "The support agent has finished; the assistant is here to help again.",
    "end": "The support agent has closed this conversation.",
}
SUBJECT: Final = "MangaAssist: an update on your support request"
#: A notice is remembered for a week, far longer than any SQS redelivery.
NOTICE_MEMORY_SECONDS: Final = 7 * 86400


@env.once
def configured_endpoint() -> str | None:
    return optional_resource("WEBSOCKET_ENDPOINT")


@dataclass(frozen=True)
class Notice:
    """What the customer is told: the text, and the frame that carries it over the WebSocket."""

    text: str
    frame: dict[str, Any]


def _ahead(count: int) -> str:
    return "you are next" if count == 0 else f"{count} customer{'s' if count > 1 else ''} before you"


def notice_for(message: HandoffMessage, *, ahead: int | None = None) -> Notice | None:
    """The notice a queue message carries; None for a message that is not for the customer.

    ``ahead``: for a queued handoff, how many customers asking the same help wait before it.
    """
    base = {"session_id": message.session_id, "event_id": message.event_id}
    if message.event_type == EVENT_QUEUED:
        count = max(ahead or 0, 0)
        text = QUEUED_TEXT.format(ahead=_ahead(count))
        frame = {
            "type": "notification",
            "event_type": message.event_type,
            "status": str(SessionStatus.HANDOFF),
            "handoff_id": message.handoff_id,
            "priority": message.priority,
            "ahead": count,
            "text": text,
            **base,
        }
        return Notice(text, frame)
    if message.text:
        frame = {"type": "notification", "event_type": message.event_type, "text": message.text, **base}
        return Notice(message.text, frame)
    if message.event_type == EVENT_ESCALATED:
        frame = {"type": "notification", "event_type": message.event_type, "text": ESCALATED_TEXT, **base}
        return Notice(ESCALATED_TEXT, frame)
    if message.event_type == EVENT_CLOSED:
        # Only a session that went back to the assistant resumes; one ended or deleted with the
        # handoff must not be told that the assistant answers again.
        outcome = "resume" if message.outcome == str(SessionStatus.ACTIVE) else "end"
        text = CLOSED_TEXT[outcome]
        frame = {"type": "handoff_closed", "outcome": outcome, "text": text, **base}
        if message.resolution:
            frame["resolution"] = message.resolution
            text = f"{text}\n\nWhat was done: {message.resolution}"
        return Notice(text, frame)
    return None


def notify(
    session_store: DynamoSessionStore,
    message: HandoffMessage,
    endpoint: str | None = None,
    send: Callable[[str, str, str], mail.MailOutcome] | None = None,
) -> str:
    """delivered | mailed | recorded | skipped | dropped (see the module docstring)."""
    if message.event_type == EVENT_QUEUED:
        return _notify_queued(session_store, message, endpoint)
    notice = notice_for(message)
    if notice is None:
        return "skipped"
    session = session_store.sessions.get_session(message.session_id)
    if session is None or session.status == SessionStatus.DELETED:
        return "dropped"
    connection = _live_connection(session_store, session)
    if connection is not None and _post(connection, notice.frame, endpoint):
        return "delivered"
    if session.connection_id:  # gone, or never opened: the next notice goes by e-mail straight away
        session_store.sessions.clear_connection(session.session_id, session.connection_id)
    if session.customer_email:
        outcome = (send or mail.send_mail)(session.customer_email, SUBJECT, notice.text)
        if outcome is mail.MailOutcome.SENT:
            return "mailed"
        logger.info("notice not mailed", extra={"outcome": outcome.value, "session_id": session.session_id})
    if session.status not in TURN_ACCEPTING:
        return "dropped"
    session_store.turns.add_turn(session.session_id, Role.SYSTEM, notice.text)
    return "recorded"


def _notify_queued(session_store: DynamoSessionStore, message: HandoffMessage, endpoint: str | None) -> str:
    """The queued notice, to the customer's live connection only, while the handoff still waits."""
    handoff = session_store.handoffs.get_handoff(message.session_id, message.handoff_id) if message.handoff_id else None
    if handoff is None or handoff.status != HandoffStatus.QUEUED:
        return "skipped"  # an agent took it (or it ended) before the notice: the customer hears that instead
    session = session_store.sessions.get_session(message.session_id)
    connection = _live_connection(session_store, session) if session is not None else None
    if connection is None:
        return "skipped"
    notice = notice_for(message, ahead=session_store.inbox.ahead_of(handoff))
    if notice is None:
        return "skipped"
    return "delivered" if _post(connection, notice.frame, endpoint) else "skipped"


def _live_connection(session_store: DynamoSessionStore, session: Session) -> Connection | None:
    """The connection the session names, if its record is still there."""
    if not session.connection_id:
        return None
    return session_store.connections.get_connection(session.connection_id)


def _post(connection: Connection, frame: Mapping[str, Any], endpoint: str | None) -> bool:
    """Post ``frame`` to ``connection`` (through ``endpoint`` when given); False when the client is gone."""
    target = endpoint or connections.management_endpoint(connection.domain_name, connection.stage)
    return connections.post_to_connection(target, connection.connection_id, frame)


IDEMPOTENCY: Final = IdempotencyConfig(event_key_jmespath="event_id", expires_after_seconds=NOTICE_MEMORY_SECONDS)


#: ``notify`` once per notice, on the stage's table (Powertools idempotency).
_notify_once = idempotency.once(
    lambda body: notify(store(), HandoffMessage(**body), configured_endpoint()), config=IDEMPOTENCY
)


def record_handler(record: SQSRecord) -> str:
    message = parse_body(record.body)
    if message.event_id:
        outcome = str(_notify_once(message.__dict__))
    else:  # a sender that names no event: delivered at least once, as SQS does
        outcome = notify(store(), message, configured_endpoint())
    logger.info("customer notification", extra={"session_id": message.session_id, "outcome": outcome})
    return outcome


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    IDEMPOTENCY.register_lambda_context(context)
    return process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)
