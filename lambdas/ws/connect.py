"""``$connect``: admit the caller and start the Onboarding workflow, without waiting for it.

The authorizer has verified the token; this handler checks what only the table knows (a
``session_id`` to resume must be the caller's own, and open, or disconnected within the stage's
resume grace period ``SESSION_RESUME_GRACE_SECONDS``), then starts the Express
Onboarding state machine asynchronously (StartExecution) and accepts the connection. The
workflow creates or resumes the session, records the connection and greets the customer once
the connection is open (no frame can reach a client during ``$connect``).

A customer may hold a stage-set number of live connections (``CHAT_MAX_CONNECTIONS_PER_CUSTOMER``):
each connection takes a slot here, ``$disconnect`` frees it, and a connection that fails here
frees its slot at once.

``last_turn`` (optional, with ``session_id``): the newest turn the client has; the welcome frame
of a resumed session carries the turns after it.

Answers: 200 connected; 400 malformed ``session_id`` or ``last_turn``; 403 not a customer, or a
session that is not the caller's (an unknown id gets the same answer, so ids cannot be probed);
410 the caller's session is closed, or was disconnected longer than the grace period ago (connect
without ``session_id`` to start a new one); 429 the customer already
holds the most connections allowed (close one); 500 the workflow could not be started (the
client retries).
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

from aws_lambda_powertools import Logger
from botocore.exceptions import BotoCoreError, ClientError

from lambdas.shared import env
from lambdas.shared.keys import is_session_id
from lambdas.shared.logs import masked_formatter
from lambdas.shared.records import TURN_ACCEPTING, Session, SessionStatus
from lambdas.shared.settings import resource, settings
from lambdas.shared.tracing import tracer
from lambdas.ws import runtime
from lambdas.ws.frames import RouteContext, route_context

logger = Logger(logger_formatter=masked_formatter())

_NAME_UNSAFE: Final = re.compile(r"[^A-Za-z0-9_-]")
_TURN_NUMBER: Final = re.compile(r"[0-9]{1,10}")


@env.once
def state_machine_arn() -> str:
    return resource("ONBOARDING_STATE_MACHINE_ARN")


def _answer(status: int, code: str, message: str) -> dict[str, Any]:
    return {"statusCode": status, "body": json.dumps({"code": code, "message": message})}


def execution_name(ctx: RouteContext) -> str:
    """A unique, legal execution name (<= 80 chars of [A-Za-z0-9_-]) that traces back to the request."""
    raw = f"{ctx.connection_id}-{ctx.request_id}"
    return _NAME_UNSAFE.sub("_", raw)[:80]


def onboarding_input(
    ctx: RouteContext, customer_id: str, session_id: str | None, last_turn: int | None = None
) -> dict[str, Any]:
    started: dict[str, Any] = {
        "connection_id": ctx.connection_id,
        "customer_id": customer_id,
        "session_id": session_id,
        "domain_name": ctx.domain_name,
        "stage": ctx.stage,
        "request_id": ctx.request_id,
    }
    if ctx.email:  # the customer's verified address: a new session keeps it for notices
        started["customer_email"] = ctx.email
    if last_turn is not None:
        started["last_turn"] = last_turn
    return started


def resumable(session: Session, now: int) -> bool:
    """Open, or disconnected no longer than the stage's resume grace period ago."""
    if session.status in TURN_ACCEPTING:
        return True
    grace = settings().session_resume_grace_seconds
    return session.status == SessionStatus.DISCONNECTED and (session.disconnected_at or 0) >= now - grace


def _last_turn(raw: str | None) -> int | None:
    """The client's newest turn number (digits, at most 10); ValueError otherwise."""
    if raw is None:
        return None
    if not _TURN_NUMBER.fullmatch(raw):
        raise ValueError(raw)
    return int(raw)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    ctx = route_context(event)
    logger.append_keys(connection_id=ctx.connection_id)
    if not ctx.customer_id or ctx.role != "customer":
        return _answer(403, "forbidden", "Only customers can open a chat connection.")
    query = event.get("queryStringParameters") or {}
    session_id = query.get("session_id") or None
    store = runtime.store()
    last_turn = None
    if session_id is not None:
        if not is_session_id(session_id):
            return _answer(400, "invalid_session_id", "session_id must be the id of one of your sessions.")
        try:
            last_turn = _last_turn(query.get("last_turn") or None)
        except ValueError:
            return _answer(400, "invalid_last_turn", "last_turn must be the number of the newest turn you have.")
        session = store.sessions.get_session(session_id)
        if session is None or session.customer_id != ctx.customer_id:
            logger.info("resume refused", extra={"session_id": session_id, "found": session is not None})
            return _answer(403, "forbidden", "You cannot resume this session.")
        if not resumable(session, store.table.now()):
            minutes = settings().session_resume_grace_seconds // 60
            return _answer(
                410,
                "session_closed",
                f"This session has ended (a session can be resumed up to {minutes} minutes after its connection "
                "closed); connect without session_id to start a new one.",
            )
    cap = settings().chat_max_connections_per_customer
    try:
        slot = store.limits.open_connection_slot(ctx.customer_id, ctx.connection_id, cap=cap)
    except (ClientError, BotoCoreError):
        logger.exception("connection slot not taken")
        return _answer(500, "unavailable", "The chat is temporarily unavailable; please try again.")
    if not slot.admitted:
        logger.info("connection cap reached", extra={"cap": cap})
        return _answer(
            429,
            "too_many_connections",
            f"You already have {cap} chat connections open; close one and connect again.",
        )
    try:
        execution = runtime.stepfunctions().start_execution(
            stateMachineArn=state_machine_arn(),
            name=execution_name(ctx),
            input=json.dumps(onboarding_input(ctx, ctx.customer_id, session_id, last_turn)),
        )
    except (ClientError, BotoCoreError):
        logger.exception("onboarding could not be started")
        store.limits.close_connection_slot(ctx.customer_id, ctx.connection_id)
        return _answer(500, "unavailable", "The chat is temporarily unavailable; please try again.")
    logger.info("onboarding started", extra={"execution_arn": execution["executionArn"], "resume": bool(session_id)})
    return {"statusCode": 200}
