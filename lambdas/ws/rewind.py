"""``rewind``: the customer edits their message or asks for another answer; the chat is rewound and answered again.

Client frame::

    {"action": "rewind", "turn_number": 3, "text": "Is volume 4 out?", "client_message_id": "r-1"}

``turn_number`` names one of the customer's own turns; ``text`` (optional, the rules of a
message's text) replaces it; ``client_message_id`` (optional) makes a resend harmless: it gets a
``duplicate`` frame and nothing changes again. The Message Lambda hands such frames here.

1. The frame is validated (an error frame, nothing changed), and it passes the gate of a model
   call (:mod:`lambdas.ws.gate`): a customer, a connection that names the session, the rate
   buckets and the day's token budget.
2. :func:`lambdas.usecases.rewind.rewind` removes every later turn and the summaries that covered
   them in one conditional transaction. Refused whole, with an error frame:
   ``session_in_handoff`` (an agent has the chat), ``session_changed`` (a message or reply was
   stored meanwhile), ``rewind_too_long`` (more than one transaction removes),
   ``invalid_turn`` (not one of the customer's turns), ``session_closed``.
3. A ``rewound`` frame says what was removed; the turn is then answered like a message (delta
   frames, then ``final``). A reply to the old transcript still being written is not stored
   (its ``reply_superseded`` error frame reaches the customer).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from aws_lambda_powertools import Logger
from botocore.exceptions import BotoCoreError, ClientError

from lambdas.shared import idempotency
from lambdas.shared.errors import (
    InvalidInput,
    RewindTooLong,
    SessionChanged,
    SessionClosed,
    SessionInHandoff,
    SessionNotFound,
)
from lambdas.shared.logs import masked_formatter
from lambdas.shared.store import AcceptedMessage, DynamoSessionStore
from lambdas.usecases import rewind as rewinding
from lambdas.ws.frames import (
    FrameError,
    RouteContext,
    checked_client_message_id,
    checked_text,
    duplicate_frame,
    error_frame,
    read_frame,
)
from lambdas.ws.gate import Refused, admitted

logger = Logger(logger_formatter=masked_formatter())

Send = Callable[[Mapping[str, Any]], bool]
Answer = Callable[[AcceptedMessage], str]

IN_HANDOFF: Final = error_frame(
    "session_in_handoff",
    "A support agent is handling this chat, so earlier messages cannot be changed now; nothing was changed.",
)
CHANGED: Final = error_frame(
    "session_changed",
    "The chat changed while it was being rewound (a message or reply arrived); nothing was changed. "
    "Look at the latest messages and try again.",
)
NOT_REWOUND: Final = error_frame(
    "rewind_failed", "We could not rewind the chat because of a problem on our side; nothing was changed. Try again."
)


def parse_rewind(body: str | None) -> tuple[int, str | None, str | None]:
    """``(turn_number, text or None, client_message_id or None)`` of a rewind frame; else FrameError."""
    frame = read_frame(body)
    turn_number = frame.get("turn_number")
    if isinstance(turn_number, bool) or not isinstance(turn_number, int) or turn_number < 1:
        raise FrameError("invalid_turn", '"turn_number" must be the number of one of your messages (an integer >= 1).')
    text = frame.get("text")
    return turn_number, None if text is None else checked_text(text), checked_client_message_id(frame)


def rewound_frame(answer: Mapping[str, Any]) -> dict[str, Any]:
    """The chat was rewound to ``turn_number``: the removed turns are gone, an answer to it follows."""
    return {
        "type": "rewound",
        "session_id": answer["session_id"],
        "turn_number": answer["turn_number"],
        "removed_turns": list(answer["removed_turns"]),
    }


def handle_rewind(store: DynamoSessionStore, ctx: RouteContext, body: str | None, send: Send, answer: Answer) -> str:
    """Run a rewind frame (see the module docstring); returns the outcome (for logs and tests)."""
    try:
        turn_number, text, client_message_id = parse_rewind(body)
    except FrameError as err:
        send(error_frame(err.code, str(err)))
        return f"refused:{err.code}"
    try:
        asking = admitted(store, ctx)  # a rewind asks the model again
    except Refused as refused:
        send(refused.frame)
        return refused.outcome
    except (ClientError, BotoCoreError):
        logger.exception("rewind not admitted")
        send(NOT_REWOUND)
        return "rewind_failed"
    session_id = asking.session_id
    try:
        done = rewinding.rewind(store, session_id, asking.customer_id, turn_number, text, client_message_id)
    except Exception as err:  # every refusal changed nothing; the frame says why
        frame, outcome = _refusal(err)
        send(frame)
        return outcome
    if done.rewound is None:
        frame = duplicate_frame(
            session_id=session_id, client_message_id=str(client_message_id), turn_number=turn_number
        )
        return "duplicate" if send(frame) else "gone"
    logger.info("rewound", extra={"session_id": session_id, "turn_number": turn_number})
    if not send(rewound_frame(done.answer)):
        return "gone"
    rewound = done.rewound
    return answer(AcceptedMessage(rewound.session, rewound.turn, rewound.context))


def _refusal(err: Exception) -> tuple[Mapping[str, Any], str]:
    """The error frame and outcome of a refused rewind."""
    if isinstance(err, SessionInHandoff):
        return IN_HANDOFF, "refused:session_in_handoff"
    if isinstance(err, SessionChanged):
        return CHANGED, "refused:session_changed"
    if isinstance(err, RewindTooLong):
        return error_frame("rewind_too_long", f"{err} Nothing was changed."), "refused:rewind_too_long"
    if isinstance(err, (SessionClosed, SessionNotFound)):
        return error_frame("session_closed", "This chat session has ended. Reconnect to start a new one."), (
            "refused:session_closed"
        )
    if isinstance(err, idempotency.KeyReused):
        message = "This client_message_id was sent before with another rewind; nothing was changed. Use a new id."
        return error_frame("client_message_id_reused", message), "refused:client_message_id_reused"
    if isinstance(err, idempotency.StillRunning):
        message = "This rewind is still being made; wait for its answer before sending it again."
        return error_frame("client_message_id_busy", message), "refused:client_message_id_busy"
    if isinstance(err, InvalidInput):
        return error_frame("invalid_turn", str(err)), "refused:invalid_turn"
    logger.exception("rewind failed")
    return NOT_REWOUND, "rewind_failed"
