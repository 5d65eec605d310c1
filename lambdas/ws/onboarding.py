"""The Lambda steps of the Onboarding (Express) workflow started by ``$connect``.

``handler`` (table access) runs one of two steps, named by the input's ``step``:
``onboard`` creates the session, or takes up the caller's own (greeted as a return only when it
already has turns; a ``disconnected`` one is resumed by a conditional write while its grace period
lasts, and its welcome frame carries the turns after the client's ``last_turn``); records the ``CONN#`` item (TTL) and
the session's ``connection_id``; writes the greeting turn; returns the welcome frame.
``abandon`` runs when the welcome could never be delivered (the client left before its
connection opened, possibly before ``$disconnect`` could see a ``CONN#`` record): it disconnects
the session exactly as ``$disconnect`` does, so it does not stay ``active`` with a dead connection.
``deliver`` (management API access only): post one frame to the connection. While the connection is not established yet
(API Gateway answers 410 Gone or 403 Forbidden until ``$connect`` has returned) it raises
:class:`ConnectionNotReady`, which the state machine retries with backoff and full jitter,
bounded; the workflow, not this code, owns the retry policy.

Both are safe to run again: a retried ``onboard`` finds its ``CONN#`` record and reuses the
session instead of creating a second one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from aws_lambda_powertools import Logger

from contracts.workflows import ConnectionNotReady
from lambdas.shared import keys
from lambdas.shared.connections import DeliveryError, management_endpoint, post_to_connection
from lambdas.shared.logs import masked_formatter
from lambdas.shared.records import Role, Session, SessionStatus
from lambdas.shared.settings import settings
from lambdas.shared.tracing import tracer
from lambdas.ws import runtime
from lambdas.ws.disconnect import disconnect_connection
from lambdas.ws.frames import welcome_frame

logger = Logger(logger_formatter=masked_formatter())

GREETING: Final = (
    "Hi, I'm MangaAssist! Ask me about series, volumes, editions or your orders, and I'll help you find your next read."
)
WELCOME_BACK: Final = "Welcome back! Pick up where you left off; I still have our conversation."
_NOT_READY: Final = frozenset({"ForbiddenException"})
#: The most turns a resumed session's welcome frame carries, and their characters in all: the frame
#: stays far below the Express state (256 KB) and WebSocket frame (128 KB) limits.
RESUME_TURNS: Final = 20
RESUME_CHARS: Final = 12_000


class ForeignSession(Exception):
    """The session to resume belongs to another customer (checked again after $connect)."""


def _field(event: Mapping[str, Any], name: str) -> str:
    value = event.get(name)
    if not isinstance(value, str) or not value:
        raise ValueError(f"onboarding input needs a non-empty string {name!r}")
    return value


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """The table-side steps of the workflow, chosen by ``event["step"]``."""
    step = event.get("step")
    if step == "onboard":
        return onboard(event)
    if step == "abandon":
        connection_id = _field(event, "connection_id")
        outcome = disconnect_connection(runtime.store(), connection_id)
        logger.info(
            "welcome undeliverable; connection abandoned", extra={"connection_id": connection_id, "outcome": outcome}
        )
        return {"outcome": outcome}
    raise ValueError(f"step must be 'onboard' or 'abandon' (given {step!r})")


def onboard(event: Mapping[str, Any]) -> dict[str, Any]:
    """Create or resume the session, record the connection, greet; returns the welcome frame."""
    connection_id = _field(event, "connection_id")
    customer_id = _field(event, "customer_id")
    domain_name, stage = _field(event, "domain_name"), _field(event, "stage")
    requested = event.get("session_id") or None
    if requested is not None and not keys.is_session_id(requested):
        raise ForeignSession("session_id must be the id of one of the customer's sessions")
    logger.append_keys(connection_id=connection_id)
    store = runtime.store()

    existing = store.connections.get_connection(connection_id)
    session: Session | None
    if existing is not None:  # a retry of this step: the session was chosen already
        if existing.customer_id != customer_id:
            raise ForeignSession(f"connection {connection_id!r} belongs to another customer")
        session = store.sessions.get_session(existing.session_id)
        greet = session is not None and session.turn_count == 0
        # The first attempt may have written its greeting already: a return means more than that one turn.
        resumed = requested is not None and session is not None and session.turn_count > 1
    elif requested is not None:
        session = store.sessions.get_session(requested)
        if session is None or session.customer_id != customer_id:
            raise ForeignSession(f"session {requested!r} cannot be resumed by this customer")
        # A session created over REST and never connected has no turn: it is new to the customer.
        resumed, greet = session.turn_count > 0, True
    else:
        request = event.get("request")
        email = request.get("customer_email") if isinstance(request, Mapping) else None
        session = store.sessions.create_session(
            customer_id, metadata={"channel": "websocket"}, email=email if isinstance(email, str) else None
        )
        resumed, greet = False, True
    if session is None:
        raise ForeignSession(f"the session of connection {connection_id!r} no longer exists")

    if existing is None:
        store.connections.put_connection(
            connection_id, session_id=session.session_id, customer_id=customer_id, domain_name=domain_name, stage=stage
        )
    if requested is not None and session.status == SessionStatus.DISCONNECTED:
        # SessionClosed when the grace period is over or a cleanup took the session meanwhile.
        since = store.table.now() - settings().session_resume_grace_seconds
        session = store.sessions.resume_session(session.session_id, customer_id, connection_id, since=since)
        resumed = True
    else:
        session = store.sessions.set_connection(session.session_id, connection_id)  # SessionClosed if it ended
    missed = missed_turns(session, _last_turn(event)) if resumed else None
    text = WELCOME_BACK if resumed else GREETING
    turn_number = session.turn_count
    if greet:
        turn_number = store.turns.add_turn(session.session_id, Role.ASSISTANT, text).turn_number
    logger.info("onboarded", extra={"session_id": session.session_id, "resumed": resumed})
    return {
        "session_id": session.session_id,
        "resumed": resumed,
        "frame": welcome_frame(
            session_id=session.session_id,
            resumed=resumed,
            status=str(store.handoffs.shown_status(session)),
            message=text,
            turn_number=turn_number,
            turns=None if missed is None else missed[0],
            earlier_turns=missed is not None and missed[1],
        ),
    }


def _last_turn(event: Mapping[str, Any]) -> int | None:
    request = event.get("request")
    value = request.get("last_turn") if isinstance(request, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def missed_turns(session: Session, last_seen: int | None) -> tuple[list[dict[str, Any]], bool]:
    """The turns after ``last_seen`` (without it, every turn), the newest ones within the bounds.

    Returns them oldest first, and whether older missed turns were left out.
    """
    newest, first = session.turn_count, 1 if last_seen is None else last_seen + 1
    if first > newest:
        return [], False
    window = max(first, newest - RESUME_TURNS + 1)
    turns = runtime.store().turns.turns_between(session.session_id, window, newest)
    kept: list[dict[str, Any]] = []
    chars = 0
    for turn in reversed(turns):
        chars += len(turn.content)
        if kept and chars > RESUME_CHARS:
            break
        kept.append(
            {
                "turn_number": turn.turn_number,
                "role": str(turn.role),
                "text": turn.content,
                "created_at": turn.created_at,
            }
        )
    kept.reverse()
    return kept, bool(kept) and kept[0]["turn_number"] > first


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def deliver(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Post ``event["frame"]`` to the connection; ConnectionNotReady while it cannot take it."""
    connection_id = _field(event, "connection_id")
    frame = event.get("frame")
    if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
        raise ValueError("deliver input needs a 'frame' object with a 'type'")
    endpoint = management_endpoint(_field(event, "domain_name"), _field(event, "stage"))
    try:
        delivered = post_to_connection(endpoint, connection_id, frame)
    except DeliveryError as err:
        if err.code in _NOT_READY:
            raise ConnectionNotReady(f"connection {connection_id!r} is not open yet ({err.code})") from None
        raise
    if not delivered:
        raise ConnectionNotReady(f"connection {connection_id!r} is not open yet (410 Gone)")
    return {"delivered": True, "type": frame["type"]}
