"""``sendMessage``: the Message Lambda. Store the customer's turn, then answer it.

1. Validate the frame (JSON object, known action, text of 1..4000 characters, no control
   characters); a refused frame gets an error frame and nothing is stored.
2. The caller must be a customer named by the ``$connect`` authorizer's context (without a
   customer id the message is refused: fail closed).
3. Admission and acceptance, three round trips (the use case
   :mod:`lambdas.usecases.send_message`): the connection must exist and name that customer, both
   rate buckets must admit (else a ``rate_limited`` frame with ``retry_after_seconds``; nothing is
   stored and nothing reaches the model), the customer's model tokens of the UTC day must be
   below the stage's budget (else a ``token_budget_exhausted`` frame with ``resets_at``, alike),
   and the turn is stored by a conditional write on a session that accepts turns, while the
   model's context is read.
5. Session in ``handoff``, or waiting for an agent (its handoff queued or escalated): no model
   call. The turn is in the table, where the agent console reads a session's turns
   (``GET /sessions/{id}/turns``) and which the stream carries on; the customer gets an ``ack``
   frame (status ``handoff``) saying an agent will answer, or that they are still queued.
6. Otherwise the :class:`~lambdas.shared.responder.Responder` (Bedrock or echo, per stage) answers
   from that context, and the reply is posted as it is written: ``delta`` frames, batched by
   :class:`~lambdas.ws.deltas.DeltaCoalescer` (far fewer posts than tokens). When the reply is
   complete it is stored once, as the next turn (with the tokens the model reported, which are
   added to the customer's budget of the day), and a ``final`` frame names that turn. A reply
   the stage's guardrail withholds is stored and sent as a fixed notice (``reply_blocked``).
   A stream that breaks midway gets a ``reply_interrupted`` error frame and stores nothing of
   the partial text. 410 Gone from the management API stops the stream and disconnects the
   session.

A reply the model stopped at its output budget (stopReason ``max_tokens``), or that was still being
written at the reply's deadline, is stored as it is, and its ``final`` frame says ``stopped`` and
``can_continue``: a ``continue`` frame (:mod:`lambdas.ws.continuation`) asks for the rest.

A ``rewind`` frame goes to :mod:`lambdas.ws.rewind`, whose rewound turn is answered as in step 6;
a reply is stored only if the chat was not rewound while it was written (``reply_superseded``).

Every failure after step 4 leaves the user's turn stored and tells the customer so; error frames
are ``{"type": "error", "code", "message"}`` and never carry internals.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Mapping
from typing import Any, Final

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from lambdas.shared import idempotency
from lambdas.shared.connections import DeliveryError, management_endpoint, post_to_connection
from lambdas.shared.errors import SessionChanged, SessionClosed, SessionNotFound
from lambdas.shared.logs import masked_formatter
from lambdas.shared.records import Role, SessionStatus, Turn
from lambdas.shared.responder import BLOCKED_REPLY, ReplyEnd, Responder, ResponderError
from lambdas.shared.store import AcceptedMessage, ChatContext, DynamoSessionStore
from lambdas.shared.tracing import tracer
from lambdas.usecases import send_message
from lambdas.usecases.rewind import chat_responder
from lambdas.ws import continuation, runtime
from lambdas.ws.deltas import DeltaCoalescer
from lambdas.ws.frames import (
    FrameError,
    RouteContext,
    ack_frame,
    busy_frame,
    delta_frame,
    duplicate_frame,
    error_frame,
    final_frame,
    parse_message,
    rate_limited_frame,
    reply_blocked_frame,
    route_context,
    token_budget_frame,
    wants_rewind,
)

logger = Logger(logger_formatter=masked_formatter())
metrics = Metrics()

HANDOFF_ACK: Final = "A support agent has your message and will reply here shortly."
WAITING_ACK: Final = "Your message is saved for the support agent who takes over; you are still in the queue."
NOT_AUTHORIZED: Final = error_frame(
    "forbidden", "This connection is not signed in as a customer. Reconnect with a customer token to chat."
)
NOT_READY: Final = error_frame(
    "session_not_ready", "Your chat session is still starting. Please send your message again in a moment."
)
SESSION_CLOSED: Final = error_frame("session_closed", "This chat session has ended. Reconnect to start a new one.")
CLIENT_MESSAGE_ID_REUSED: Final = error_frame(
    "client_message_id_reused",
    "This client_message_id was sent before with other text; nothing was stored. Use a new id for a new message.",
)
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
REPLY_INTERRUPTED: Final = error_frame(
    "reply_interrupted",
    "The assistant's reply broke off before it was finished, so discard the part you received. "
    "Your message is saved; ask again for a complete answer.",
)
REPLY_SUPERSEDED: Final = error_frame(
    "reply_superseded",
    "The chat was rewound while this reply was written, so discard it; the answer to your rewound message follows.",
)


def responder() -> Responder:
    """The chat's streamed responder (built once per container: the longest reply's budget and deadline)."""
    return chat_responder()


Send = Callable[[Mapping[str, Any]], bool]


#: The frame each refusal of :func:`lambdas.usecases.send_message.receive` is answered with.
REFUSALS: Final = {
    send_message.NOT_READY: NOT_READY,
    send_message.SESSION_CLOSED: SESSION_CLOSED,
    send_message.NOT_SAVED: NOT_SAVED,
    send_message.CLIENT_MESSAGE_ID_REUSED: CLIENT_MESSAGE_ID_REUSED,
}


def handle_message(store: DynamoSessionStore, model: Responder, ctx: RouteContext, body: str | None, send: Send) -> str:
    """Run the message path for one frame; returns the outcome (for logs and tests)."""
    if wants_rewind(body):
        from lambdas.ws import rewind  # an edit of the chat is rare: its module loads with the first one

        return rewind.handle_rewind(store, ctx, body, send, lambda accepted: answer(store, model, accepted, send))
    if continuation.wants_continue(body):
        return continuation.handle_continue(
            store, ctx, body, send, lambda accepted, cut: answer(store, model, accepted, send, continues=cut)
        )
    try:
        message = parse_message(body)
    except FrameError as err:
        send(error_frame(err.code, str(err)))
        return f"refused:{err.code}"
    if ctx.customer_id is None:
        send(NOT_AUTHORIZED)
        return "refused:forbidden"
    received = send_message.receive(store, ctx.connection_id, ctx.customer_id, message.text, message.client_message_id)
    if received.outcome == send_message.RATE_LIMITED:
        send(rate_limited_frame(received.retry_after_seconds))
        return received.outcome
    if received.outcome == send_message.OVER_BUDGET:
        send(token_budget_frame(received.retry_after_seconds, str(received.resets_at)))
        return received.outcome
    if received.outcome == send_message.DUPLICATE:
        frame = duplicate_frame(
            session_id=str(received.session_id),
            client_message_id=str(message.client_message_id),
            turn_number=int(received.turn_number or 0),
        )
        return "duplicate" if send(frame) else "gone"
    if received.accepted is None:
        send(REFUSALS[received.outcome])
        return received.outcome
    return answer(store, model, received.accepted, send)


def answer(
    store: DynamoSessionStore, model: Responder, accepted: AcceptedMessage, send: Send, *, continues: int | None = None
) -> str:
    """Answer a stored message: an ``ack`` in a handoff (the agent answers), else the model's streamed reply.

    ``continues``: the reply is the rest of that turn, a reply cut short (no new customer turn was stored).
    """
    session_id, user_turn = accepted.session.session_id, accepted.turn
    if continues is None:
        metrics.add_metric(name="ChatTurns", unit=MetricUnit.Count, value=1)
    logger.append_keys(session_id=session_id, turn_number=user_turn.turn_number)
    try:
        if accepted.context is None:  # a handoff, or one waiting for its agent: the agent answers
            frame = ack_frame(
                session_id=session_id,
                turn_number=user_turn.turn_number,
                status=str(SessionStatus.HANDOFF),
                message=WAITING_ACK if accepted.waiting else HANDOFF_ACK,
            )
            return "handoff" if send(frame) else "gone"
        return stream_reply(store, model, accepted, accepted.context, send, continues=continues)
    except (SessionClosed, SessionNotFound):
        send(SESSION_CLOSED)
        return "session_closed"
    except SessionChanged:  # the chat was rewound while this reply was written: the reply is dropped
        send(REPLY_SUPERSEDED)
        return "superseded"
    except DeliveryError:
        raise
    except Exception:
        logger.exception("reply failed after the user turn was stored")
        send(REPLY_FAILED)
        return "reply_failed"


def stream_reply(
    store: DynamoSessionStore,
    model: Responder,
    accepted: AcceptedMessage,
    context: ChatContext,
    send: Send,
    *,
    continues: int | None = None,
) -> str:
    """Post the model's reply as it is written, then store it and send the final frame; returns the outcome.

    Nothing of a reply is stored until the model has finished it: a stream that breaks, or a
    client that leaves (410) while it is written, leaves the customer's turn alone in the
    transcript. A finished reply is stored even when the client has just left; so is one cut
    short at the model's output budget or the deadline, with why (``stopped``), to be continued.
    """
    session_id, reply_to = accepted.session.session_id, accepted.turn.turn_number
    deltas = DeltaCoalescer()
    end = ReplyEnd("end_turn")
    posted = 0  # characters of the reply posted so far: the next delta's offset

    def post(text: str) -> bool:
        nonlocal posted
        offset, posted = posted, posted + len(text)
        return send(delta_frame(session_id=session_id, reply_to=reply_to, offset=offset, text=text))

    pieces = model.stream(context.turns, summary=context.summary)
    try:
        for piece in pieces:
            if isinstance(piece, ReplyEnd):
                end = piece
                continue
            batch = deltas.add(piece)
            if batch is not None and not post(batch):
                return "gone"
    except ResponderError as err:
        if err.reason == "busy":  # the stage's cap on model calls: no call was made, the turn is stored
            send(busy_frame(session_id=session_id, reply_to=reply_to, retry_after_seconds=err.retry_after_seconds))
            return "busy"
        logger.warning("no reply from the responder", extra={"reason": err.reason, "posted": deltas.posts})
        if deltas.posts:
            send(REPLY_INTERRUPTED)
            return "no_reply:interrupted"
        send(NO_REPLY)
        return f"no_reply:{err.reason}"
    finally:
        _close(pieces)
    if end.blocked:
        logger.info("reply withheld", extra={"stop_reason": end.stop_reason, "posted": deltas.posts})
        notice = _store_reply(store, accepted, BLOCKED_REPLY, end, stopped=None)
        frame = reply_blocked_frame(
            session_id=session_id, reply_to=reply_to, turn_number=notice.turn_number, text=BLOCKED_REPLY
        )
        return "blocked" if send(frame) else "gone"
    if not deltas.text.strip():
        send(NO_REPLY)
        return "no_reply:empty"
    # The customer gets the rest of the text first; the reply, complete, is stored whether or not
    # they are still there to see the final frame.
    rest = deltas.rest()
    delivered = rest is None or post(rest)
    stopped = end.stop_reason if end.can_continue else None
    reply_turn = _store_reply(store, accepted, deltas.text, end, stopped=stopped)
    if not delivered:
        return "gone"
    metrics.add_metric(name="ReplyPosts", unit=MetricUnit.Count, value=deltas.posts + 1)
    frame = final_frame(
        session_id=session_id,
        reply_to=reply_to,
        turn_number=reply_turn.turn_number,
        stopped=stopped,
        continues=continues,
    )
    if not send(frame):
        return "gone"
    return f"replied:{stopped}" if stopped else "replied"


def _store_reply(
    store: DynamoSessionStore, accepted: AcceptedMessage, text: str, end: ReplyEnd, *, stopped: str | None
) -> Turn:
    """Store the reply as the next turn with the model's usage, and count its tokens against the customer's day."""
    turn = store.turns.add_turn(
        accepted.session.session_id,
        Role.ASSISTANT,
        text,
        rewinds=accepted.session.rewinds,
        stopped=stopped,
        usage=end.usage,
    )
    send_message.spend(store, accepted.session.customer_id, end.usage)
    metrics.add_metric(name="ChatTurns", unit=MetricUnit.Count, value=1)
    return turn


def _close(pieces: Iterator[str | ReplyEnd]) -> None:
    """Release the model's stream when the reply is abandoned early (a generator's close does)."""
    if isinstance(pieces, Generator):
        pieces.close()


def sender(store: DynamoSessionStore, ctx: RouteContext) -> Send:
    """Post frames to the caller's connection; on 410 Gone, disconnect its session."""
    endpoint = management_endpoint(ctx.domain_name, ctx.stage)

    def send(frame: Mapping[str, Any]) -> bool:
        if post_to_connection(endpoint, ctx.connection_id, frame):
            return True
        # Imported here: a client gone mid-chat is rare, and the disconnect loads the handoff workflow's code.
        from lambdas.ws.disconnect import disconnect_connection

        outcome = disconnect_connection(store, ctx.connection_id)
        logger.info("connection gone", extra={"connection_id": ctx.connection_id, "outcome": outcome})
        return False

    return send


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    idempotency.remember_invocation(context)
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
