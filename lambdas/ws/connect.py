"""``$connect``: admit the caller and start the Onboarding workflow, without waiting for it.

The authorizer has verified the token; this handler checks what only the table knows (a
``session_id`` to resume must be the caller's own and still open), then starts the Express
Onboarding state machine asynchronously (StartExecution) and accepts the connection. The
workflow creates or resumes the session, records the connection and greets the customer once
the connection is open (no frame can reach a client during ``$connect``).

A customer may hold a stage-set number of live connections (``CHAT_MAX_CONNECTIONS_PER_CUSTOMER``):
each connection takes a slot here, ``$disconnect`` frees it, and a connection that fails here
frees its slot at once.

Answers: 200 connected; 400 malformed ``session_id``; 403 not a customer, or a session that is
not the caller's (an unknown id gets the same answer, so ids cannot be probed); 410 the caller's
session is closed (connect without ``session_id`` to start a new one); 429 the customer already
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
from lambdas.shared.records import TURN_ACCEPTING
from lambdas.shared.settings import resource, settings
from lambdas.shared.tracing import tracer
from lambdas.ws import runtime
from lambdas.ws.frames import RouteContext, route_context

logger = Logger()

_NAME_UNSAFE: Final = re.compile(r"[^A-Za-z0-9_-]")


@env.once
def state_machine_arn() -> str:
    return resource("ONBOARDING_STATE_MACHINE_ARN")


def _answer(status: int, code: str, message: str) -> dict[str, Any]:
    return {"statusCode": status, "body": json.dumps({"code": code, "message": message})}


def execution_name(ctx: RouteContext) -> str:
    """A unique, legal execution name (<= 80 chars of [A-Za-z0-9_-]) that traces back to the request."""
    raw = f"{ctx.connection_id}-{ctx.request_id}"
    return _NAME_UNSAFE.sub("_", raw)[:80]


def onboarding_input(ctx: RouteContext, customer_id: str, session_id: str | None) -> dict[str, Any]:
    started = {
        "connection_id": ctx.connection_id,
        "customer_id": customer_id,
        "session_id": session_id,
        "domain_name": ctx.domain_name,
        "stage": ctx.stage,
        "request_id": ctx.request_id,
    }
    if ctx.email:  # the customer's verified address: a new session keeps it for notices
        started["customer_email"] = ctx.email
    return started


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    ctx = route_context(event)
    logger.append_keys(connection_id=ctx.connection_id)
    if not ctx.customer_id or ctx.role != "customer":
        return _answer(403, "forbidden", "Only customers can open a chat connection.")
    session_id = (event.get("queryStringParameters") or {}).get("session_id") or None
    if session_id is not None:
        if not is_session_id(session_id):
            return _answer(400, "invalid_session_id", "session_id must be the id of one of your sessions.")
        session = runtime.store().sessions.get_session(session_id)
        if session is None or session.customer_id != ctx.customer_id:
            logger.info("resume refused", extra={"session_id": session_id, "found": session is not None})
            return _answer(403, "forbidden", "You cannot resume this session.")
        if session.status not in TURN_ACCEPTING:
            return _answer(
                410, "session_closed", "This session has ended; connect without session_id to start a new one."
            )
    store = runtime.store()
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
            input=json.dumps(onboarding_input(ctx, ctx.customer_id, session_id)),
        )
    except (ClientError, BotoCoreError):
        logger.exception("onboarding could not be started")
        store.limits.close_connection_slot(ctx.customer_id, ctx.connection_id)
        return _answer(500, "unavailable", "The chat is temporarily unavailable; please try again.")
    logger.info("onboarding started", extra={"execution_arn": execution["executionArn"], "resume": bool(session_id)})
    return {"statusCode": 200}
