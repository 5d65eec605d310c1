"""``sendMessage``: the Message Lambda. Store the customer's turn, then answer it.

1. Validate the frame (JSON object, known action, text of 1..4000 characters, no control
   characters); a refused frame gets an error frame and nothing is stored.
2. The caller must be a customer named by the ``$connect`` authorizer's context and own the
   connection's session; without a customer id the message is refused (fail closed).
3. Rate limits: one token from the connection's bucket and one from the customer's (stage
   settings). A refused message gets a ``rate_limited`` frame with ``retry_after_seconds``; it is
   not stored and never reaches the model.
4. Find the session through the connection's ``CONN#`` record and ``add_turn`` the user turn.
5. Session in ``handoff``: no model call. The turn is in the table, where the agent console reads
   a session's turns (``GET /sessions/{id}/turns``) and which the stream carries on; the customer
   gets an ``ack`` frame saying an agent will answer.
6. Otherwise the :class:`~lambdas.shared.responder.Responder` (Bedrock or echo, per stage) answers
   from the latest summary and the newest turns; the reply is stored as the next turn, then
   posted to the connection. 410 Gone from the management API disconnects the session.

Every failure after step 4 leaves the user's turn stored and tells the customer so; error frames
are ``{"type": "error", "code", "message"}`` and never carry internals.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from botocore.exceptions import BotoCoreError, ClientError

from lambdas.shared import env
from lambdas.shared.connections import DeliveryError, management_endpoint, post_to_connection
from lambdas.shared.errors import SessionClosed, SessionNotFound
from lambdas.shared.records import TURN_ACCEPTING, Role, SessionStatus
from lambdas.shared.responder import Responder, ResponderError, responder_for
from lambdas.shared.settings import settings
from lambdas.shared.store import Admission, DynamoSessionStore
from lambdas.shared.store.limits import CONNECTION_SCOPE, CUSTOMER_SCOPE
from lambdas.shared.tracing import tracer
from lambdas.ws import runtime
from lambdas.ws.disconnect import disconnect_connection
from lambdas.ws.frames import (
    FrameError,
    RouteContext,
    ack_frame,
    error_frame,
    message_frame,
    parse_message,
    rate_limited_frame,
    route_context,
)

logger = Logger()
metrics = Metrics()

HANDOFF_ACK: Final = "A support agent has your message and will reply here shortly."
NOT_AUTHORIZED: Final = error_frame(
    "forbidden", "This connection is not signed in as a customer. Reconnect with a customer token to chat."
)
NOT_READY: Final = error_frame(
    "session_not_ready", "Your chat session is still starting. Please send your message again in a moment."
)
SESSION_CLOSED: Final = error_frame("session_closed", "This chat session has ended. Reconnect to start a new one.")
NOT_SAVED: Final = error_frame(
    "message_not_saved", "We could not save your message because of a problem on our side. Please send it again."
)
NO_REPLY: Final = error_frame(
    "assistant_unavailable",
    "Your message is saved, but the assistant cannot answer right now. Please try again in a moment.",
)
REPLY_FAILED: Final = error_frame(
    "internal_error", "Your message is saved, but something went wrong on our side while answering it."
)


def context_turns() -> int:
    """How many of the newest turns the responder sees (the token budget may cut further)."""
    return settings().context_turns


@env.once
def responder() -> Responder:
    """The stage's responder: ``BEDROCK_MODEL_ID`` set chooses Bedrock, absent the echo responder."""
    config = settings()
    return responder_for(
        config.bedrock_model_id,
        max_context_tokens=config.context_max_tokens,
        attempts=config.bedrock_attempts,
        deadline_seconds=float(config.bedrock_deadline_seconds),
    )


Send = Callable[[Mapping[str, Any]], bool]


def admit(store: DynamoSessionStore, connection_id: str, customer_id: str) -> Admission:
    """One message from the connection's bucket, then from the customer's; the first refusal wins."""
    config = settings()
    by_connection = store.take_message_token(
        CONNECTION_SCOPE,
        connection_id,
        per_minute=config.chat_connection_messages_per_minute,
        burst=config.chat_connection_burst,
    )
    if not by_connection.admitted:
        return by_connection
    return store.take_message_token(
        CUSTOMER_SCOPE,
        customer_id,
        per_minute=config.chat_customer_messages_per_minute,
        burst=config.chat_customer_burst,
    )


def handle_message(store: DynamoSessionStore, model: Responder, ctx: RouteContext, body: str | None, send: Send) -> str:
    """Run the message path for one frame; returns the outcome (for logs and tests)."""
    try:
        message = parse_message(body)
    except FrameError as err:
        send(error_frame(err.code, str(err)))
        return f"refused:{err.code}"

    if ctx.customer_id is None:
        send(NOT_AUTHORIZED)
        return "refused:forbidden"
    connection = store.get_connection(ctx.connection_id)
    if connection is None or connection.customer_id != ctx.customer_id:
        send(NOT_READY)
        return "not_ready"
    try:
        admission = admit(store, ctx.connection_id, ctx.customer_id)
    except (ClientError, BotoCoreError):
        logger.exception("rate limit not checked")
        send(NOT_SAVED)
        return "not_saved"
    if not admission.admitted:
        send(rate_limited_frame(admission.retry_after_seconds))
        return "rate_limited"
    session = store.get_session(connection.session_id)
    if session is None or session.status not in TURN_ACCEPTING:
        send(SESSION_CLOSED)
        return "session_closed"
    try:
        user_turn = store.add_turn(session.session_id, Role.USER, message.text)
    except (SessionClosed, SessionNotFound):
        send(SESSION_CLOSED)
        return "session_closed"
    except Exception:
        logger.exception("user turn not stored", extra={"session_id": session.session_id})
        send(NOT_SAVED)
        return "not_saved"
    metrics.add_metric(name="ChatTurns", unit=MetricUnit.Count, value=1)
    logger.append_keys(session_id=session.session_id, turn_number=user_turn.turn_number)

    try:
        if session.status == SessionStatus.HANDOFF:
            frame = ack_frame(
                session_id=session.session_id,
                turn_number=user_turn.turn_number,
                status=str(session.status),
                message=HANDOFF_ACK,
            )
            return "handoff" if send(frame) else "gone"
        turns = store.list_turns(session.session_id, limit=context_turns()).items
        summary = store.latest_summary(session.session_id)
        try:
            reply = model.reply(turns, summary=summary)
        except ResponderError as err:
            logger.warning("no reply from the responder", extra={"reason": err.reason})
            send(NO_REPLY)
            return f"no_reply:{err.reason}"
        reply_turn = store.add_turn(session.session_id, Role.ASSISTANT, reply)
        metrics.add_metric(name="ChatTurns", unit=MetricUnit.Count, value=1)
        frame = message_frame(
            role=str(Role.ASSISTANT),
            session_id=session.session_id,
            turn_number=reply_turn.turn_number,
            text=reply,
        )
        return "replied" if send(frame) else "gone"
    except (SessionClosed, SessionNotFound):
        send(SESSION_CLOSED)
        return "session_closed"
    except DeliveryError:
        raise
    except Exception:
        logger.exception("reply failed after the user turn was stored")
        send(REPLY_FAILED)
        return "reply_failed"


def sender(store: DynamoSessionStore, ctx: RouteContext) -> Send:
    """Post frames to the caller's connection; on 410 Gone, disconnect its session."""
    endpoint = management_endpoint(ctx.domain_name, ctx.stage)

    def send(frame: Mapping[str, Any]) -> bool:
        if post_to_connection(endpoint, ctx.connection_id, frame):
            return True
        outcome = disconnect_connection(store, ctx.connection_id)
        logger.info("connection gone", extra={"connection_id": ctx.connection_id, "outcome": outcome})
        return False

    return send


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    ctx = route_context(event)
    logger.append_keys(connection_id=ctx.connection_id)
    store = runtime.store()
    body = None if event.get("isBase64Encoded") else event.get("body")
    try:
        outcome = handle_message(store, responder(), ctx, body, sender(store, ctx))
    except DeliveryError as err:  # the frame could not be posted; what was stored stays stored
        logger.error("frame not delivered", extra={"code": err.code})
        outcome = "undelivered"
    logger.info("message handled", extra={"outcome": outcome})
    # One metric per outcome class (refused, replied, no_reply, ...): alarms watch no_reply and gone.
    metrics.add_metric(name=f"Message_{outcome.split(':')[0]}", unit=MetricUnit.Count, value=1)
    return {"statusCode": 200}
