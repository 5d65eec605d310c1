"""The WebSocket chat protocol: client frames in, server frames out, plain functions without AWS.

Client -> server (one route per ``action``)::

    {"action": "sendMessage", "text": "Is volume 3 of Frieren out?"}

Server -> client, every frame has a ``type``::

    {"type": "welcome", "session_id": ..., "resumed": false, "status": "active", "message": ...}
    {"type": "welcome", ..., "resumed": true, "turns": [{"turn_number", "role", "text", "created_at"}], ...}
    {"type": "delta", "session_id": ..., "reply_to": 3, "offset": 0, "text": ...}  (the reply, as written)
    {"type": "final", "role": "assistant", "session_id": ..., "reply_to": 3, "turn_number": 4}
    {"type": "final", ..., "turn_number": 4, "stopped": "max_tokens", "can_continue": true}  (cut short: continue it)
    {"type": "continuing", "session_id": ..., "reply_to": 3, "turn_number": 4}  (deltas of turn 4's rest follow)
    {"type": "reply_blocked", "session_id": ..., "reply_to": 3, "turn_number": 4, "text": ...}
    {"type": "message", "role": "agent", "session_id": ..., "turn_number": 4, "text": ...}
    {"type": "ack", "session_id": ..., "turn_number": 3, "status": "handoff", "message": ...}
    {"type": "error", "code": "invalid_frame", "message": "..."}
    {"type": "error", "code": "rate_limited", "message": ..., "retry_after_seconds": 6}
    {"type": "error", "code": "token_budget_exhausted", "message": ..., "retry_after_seconds": 3600,
     "resets_at": "2026-11-29T00:00:00Z"}

Error frames have ``type``, ``code`` and ``message`` (a refused message also says when to send it
again, ``retry_after_seconds``); the message says what to fix and never carries internals (no AWS
error text, table names or stack traces).
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from typing import Any, Final

from contracts.chat import ACTIONS, REWIND, SEND_MESSAGE
from lambdas.shared.text import hidden_character

MAX_TEXT_CHARS: Final = 4000
#: A raw frame larger than this is refused before parsing (the text limit plus JSON overhead,
#: with every character escaped as \\uXXXX in the worst case).
MAX_FRAME_CHARS: Final = MAX_TEXT_CHARS * 6 + 1024


class FrameError(ValueError):
    """A client frame was refused; ``code`` is the error frame's code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class ChatMessage:
    """A validated ``sendMessage`` frame; ``client_message_id`` makes a resend of it harmless."""

    text: str
    client_message_id: str | None = None


#: A client's id for one message: sending the frame again with it stores nothing twice.
CLIENT_MESSAGE_ID: Final = re.compile(r"[A-Za-z0-9_-]{1,80}")


def error_frame(code: str, message: str) -> dict[str, str]:
    """The one shape of an error frame."""
    return {"type": "error", "code": code, "message": message}


def rate_limited_frame(retry_after_seconds: int) -> dict[str, Any]:
    """A message refused by a rate limit: it was not stored and not answered; send it again later."""
    return {
        **error_frame(
            "rate_limited",
            "You are sending messages faster than the chat allows; this one was not sent. "
            f"Send it again in {retry_after_seconds} seconds.",
        ),
        "retry_after_seconds": retry_after_seconds,
    }


def token_budget_frame(retry_after_seconds: int, resets_at: str) -> dict[str, Any]:
    """A message refused by the customer's daily token budget: not stored, not answered; send it after ``resets_at``."""
    return {
        **error_frame(
            "token_budget_exhausted",
            "You have used today's chat allowance, so this message was not sent. "
            f"Send it again after {resets_at} (midnight UTC), when the allowance resets.",
        ),
        "retry_after_seconds": retry_after_seconds,
        "resets_at": resets_at,
    }


def busy_frame(*, session_id: str, reply_to: int, retry_after_seconds: int) -> dict[str, Any]:
    """The assistant is at the stage's cap on model calls: the message is stored, not yet answered."""
    return {
        "type": "busy",
        "session_id": session_id,
        "reply_to": reply_to,
        "retry_after_seconds": retry_after_seconds,
        "message": "Your message is saved, but the assistant is busy right now. "
        f"Ask again in {retry_after_seconds} seconds.",
    }


def unknown_action_frame(action: object = None) -> dict[str, str]:
    valid = ", ".join(ACTIONS)
    given = f" {action!r} is not one of them." if isinstance(action, str) and len(action) <= 64 else ""
    return error_frame(
        "unknown_action",
        f'Valid actions: {valid}. Send {{"action": "{SEND_MESSAGE}", "text": "..."}}.{given}',
    )


def parse_message(body: str | None) -> ChatMessage:
    """Validate a ``sendMessage`` frame: JSON object, known action, text of 1..4000 characters.

    The text is NFC-normalised and stripped of surrounding whitespace before it is measured.
    Raises FrameError with the code and the fix.
    """
    frame = read_frame(body)
    return ChatMessage(text=checked_text(frame.get("text")), client_message_id=checked_client_message_id(frame))


def read_frame(body: str | None) -> dict[str, Any]:
    """A client frame: a JSON object of a bounded size with a known ``action``; else FrameError."""
    if body is None or not body.strip():
        raise FrameError("invalid_frame", f'Send a JSON object such as {{"action": "{SEND_MESSAGE}", "text": "..."}}.')
    if len(body) > MAX_FRAME_CHARS:
        raise FrameError("message_too_long", f"A message may hold at most {MAX_TEXT_CHARS} characters.")
    try:
        frame = json.loads(body)
    except (ValueError, RecursionError):
        raise FrameError("invalid_frame", "The frame is not valid JSON.") from None
    if not isinstance(frame, dict):
        raise FrameError("invalid_frame", "The frame must be a JSON object.")
    action = frame.get("action")
    if action not in ACTIONS:
        raise FrameError("unknown_action", unknown_action_frame(action)["message"])
    return frame


def wants_rewind(body: str | None) -> bool:
    """Whether a frame asks for a rewind (a malformed frame does not: the message path reports it)."""
    try:
        return read_frame(body).get("action") == REWIND
    except FrameError:
        return False


def checked_text(text: object) -> str:
    """A message's text as it is stored: NFC, stripped, 1..4000 characters, no control characters; else FrameError."""
    if not isinstance(text, str):
        raise FrameError("invalid_text", '"text" must be a string.')
    text = unicodedata.normalize("NFC", text.replace("\r\n", "\n")).strip()
    if not text:
        raise FrameError("invalid_text", '"text" must not be empty.')
    if len(text) > MAX_TEXT_CHARS:
        raise FrameError("message_too_long", f"A message may hold at most {MAX_TEXT_CHARS} characters.")
    problem = hidden_character(text)
    if problem is not None:
        raise FrameError("invalid_text", f'"text" {problem}.')
    return text


def checked_client_message_id(frame: dict[str, Any]) -> str | None:
    """The frame's ``client_message_id`` (None when absent); FrameError when it is not 1-80 letters, digits, - or _."""
    client_message_id = frame.get("client_message_id")
    if client_message_id is not None and (
        not isinstance(client_message_id, str) or not CLIENT_MESSAGE_ID.fullmatch(client_message_id)
    ):
        raise FrameError("invalid_client_message_id", '"client_message_id" must be 1-80 letters, digits, - or _.')
    return client_message_id


def duplicate_frame(*, session_id: str, client_message_id: str, turn_number: int) -> dict[str, Any]:
    """A resent message that was stored before (same ``client_message_id``): nothing new is stored or answered.

    The reply to the first send reached the connection that sent it; a client that lost it reads
    the transcript (``GET /sessions/{id}/turns``).
    """
    return {
        "type": "duplicate",
        "session_id": session_id,
        "client_message_id": client_message_id,
        "turn_number": turn_number,
    }


def message_frame(*, role: str, session_id: str, turn_number: int, text: str) -> dict[str, Any]:
    return {"type": "message", "role": role, "session_id": session_id, "turn_number": turn_number, "text": text}


def delta_frame(*, session_id: str, reply_to: int, offset: int, text: str) -> dict[str, Any]:
    """The next part of the assistant's reply to turn ``reply_to``: ``text``, which follows ``offset`` characters.

    A post whose answer is lost is retried, so a client may get a delta twice: it appends ``text``
    only when ``offset`` is the length of what it has, and drops a repeat (``offset`` below it).
    """
    return {"type": "delta", "session_id": session_id, "reply_to": reply_to, "offset": offset, "text": text}


def final_frame(
    *, session_id: str, reply_to: int, turn_number: int, stopped: str | None = None, continues: int | None = None
) -> dict[str, Any]:
    """The reply to turn ``reply_to`` is complete: its deltas, joined, are stored as turn ``turn_number``.

    ``stopped`` (``max_tokens``, ``deadline``): the reply was cut short, and ``can_continue`` says a
    ``continue`` frame asks for the rest. ``continues``: this reply is the rest of turn ``continues``.
    """
    frame: dict[str, Any] = {
        "type": "final",
        "role": "assistant",
        "session_id": session_id,
        "reply_to": reply_to,
        "turn_number": turn_number,
    }
    if continues is not None:
        frame["continues"] = continues
    if stopped is not None:
        frame["stopped"] = stopped
        frame["can_continue"] = True
    return frame


def reply_blocked_frame(*, session_id: str, reply_to: int, turn_number: int, text: str) -> dict[str, Any]:
    """The reply to turn ``reply_to`` was withheld: show ``text`` (stored as ``turn_number``) instead of any deltas."""
    return {
        "type": "reply_blocked",
        "session_id": session_id,
        "reply_to": reply_to,
        "turn_number": turn_number,
        "text": text,
    }


def ack_frame(*, session_id: str, turn_number: int, status: str, message: str) -> dict[str, Any]:
    return {"type": "ack", "session_id": session_id, "turn_number": turn_number, "status": status, "message": message}


def welcome_frame(
    *,
    session_id: str,
    resumed: bool,
    status: str,
    message: str,
    turn_number: int,
    turns: list[dict[str, Any]] | None = None,
    earlier_turns: bool = False,
) -> dict[str, Any]:
    """The first frame of a connection; a resumed session's also carries the ``turns`` the client missed.

    ``turns`` (oldest first): the turns after the client's ``last_turn`` (or the most recent ones),
    each ``{turn_number, role, text, created_at}``; ``earlier_turns`` says that older ones were
    missed too and are read with ``GET /sessions/{id}/turns``.
    """
    frame: dict[str, Any] = {
        "type": "welcome",
        "session_id": session_id,
        "resumed": resumed,
        "status": status,
        "message": message,
        "turn_number": turn_number,
    }
    if turns is not None:
        frame["turns"] = turns
        frame["earlier_turns"] = earlier_turns
    return frame


@dataclass(frozen=True)
class RouteContext:
    """What a WebSocket route event tells about the caller and the connection."""

    route_key: str
    connection_id: str
    domain_name: str
    stage: str
    request_id: str
    customer_id: str | None
    role: str | None
    email: str | None = None


def route_context(event: dict[str, Any]) -> RouteContext:
    """Read the request context API Gateway sends with every WebSocket route invocation.

    ``customer_id``/``role`` come from the $connect authorizer's context, which API Gateway
    attaches to every later route of the same connection.
    """
    ctx = event.get("requestContext") or {}
    authorizer = ctx.get("authorizer") or {}
    customer_id = authorizer.get("customer_id") or authorizer.get("principalId")
    return RouteContext(
        route_key=str(ctx.get("routeKey", "")),
        connection_id=str(ctx.get("connectionId", "")),
        domain_name=str(ctx.get("domainName", "")),
        stage=str(ctx.get("stage", "")),
        request_id=str(ctx.get("requestId", "")),
        customer_id=str(customer_id) if customer_id else None,
        role=str(authorizer["role"]) if authorizer.get("role") else None,
        email=str(authorizer["email"]) if authorizer.get("email") else None,
    )
