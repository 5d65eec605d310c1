"""Session Lambda behind the REST API: session CRUD, listings, execution status, rewinding a chat.

``POST /sessions/{id}/rewind`` ``{"turn_number", "text"?}`` (the session's customer only, with an
optional ``Idempotency-Key``): everything after the customer's turn is taken back in one
conditional transaction (:mod:`lambdas.usecases.rewind`) and the turn, with its new text if given,
is answered again; a REST caller cannot be streamed to, so the reply comes whole in the answer
(``reply``: ``{"turn_number", "text", "blocked"}``, null when the model could not answer) and is
stored as the next turn. 409 ``SessionInHandoff`` during a handoff, 409 ``SessionChanged`` when a
turn arrived meanwhile, 400 when the turn is not the customer's or the tail is longer than one
transaction takes; 404 for another customer's session. Nothing changes in any of them.

``GET /admin/sessions?status=&limit=&cursor=`` lists the sessions in one status, newest into it
first: admins any status, agents ``handoff`` only (the queue they work from; 403 otherwise).

Routing is Powertools' ``APIGatewayRestResolver``. Every route validates its input again with the
rules of :mod:`lambdas.api.validation` (the same ones API Gateway's models enforce, plus what they
cannot: uuids, path and query parameters), checks the caller's role against
:mod:`lambdas.api.access` and then ownership: a customer sees and changes only their own sessions
and listing, an agent reads only sessions whose current handoff is assigned to them, an admin
everything. Anything the caller may not see answers 404, exactly like a missing record, except
that an agent whose handoff of the session has ended gets 403 (its access ended with it).

Errors answer ``{"error": {"code", "message", "request_id"}}``: validation 400, forbidden 403,
missing or foreign 404, conflict / illegal transition 409, anything unexpected 500 with only the
request id (the details go to the log).

Environment:
    TABLE_NAME: the sessions table (required).
    BEDROCK_MODEL_ID (and the other model settings): the model that answers a rewound turn
        (absent: the echo responder).
    CORS_ALLOWED_ORIGINS: comma-separated origins answered with CORS headers (required), and the
        other stage settings of :mod:`lambdas.shared.settings`.
    STATE_MACHINE_ARNS: comma-separated state machines whose executions ``GET /executions/{id}``
        may describe (default: none, every execution answers 404).
    The role may also ``states:SendTaskFailure`` on the handoff workflow: ``DELETE`` of a session
    whose handoff still waits for an agent fails that wait.
    HANDOFF_STATE_MACHINE_ARN: the handoff workflow ``POST /sessions/{id}/handoff`` starts
        (required by that route only).

``POST /sessions/{id}/handoff`` ``{"reason", "priority"?}`` checks the session id and the body here
(API Gateway cannot check a path parameter's pattern), then starts the handoff workflow with
``{session_id, reason, priority, requested_by, role}`` (the caller from the authorizer; the
workflow checks the session is active and the caller's own): 202 ``{"execution_arn", "started_at",
"request_id"}``. The ``Idempotency-Key`` header is the execution's name (and so the handoff id): a
retry with the same key and body answers the first 202 again and starts nothing; the same key with
another body, or a key naming another request's handoff, is 409. Without a key every request is a
new handoff.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, CORSConfig, Response
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import ClientError

from lambdas.api import access, validation
from lambdas.api.responses import Forbidden, json_response, register_error_handlers
from lambdas.shared import aws, env, idempotency
from lambdas.shared.errors import Conflict, NotFound
from lambdas.shared.logs import masked_formatter
from lambdas.shared.records import HandoffStatus, Session, SessionStatus
from lambdas.shared.serialize import public
from lambdas.shared.settings import optional_resource, resource, settings
from lambdas.shared.settings import store as store
from lambdas.shared.tracing import tracer
from lambdas.shared.waits import fail_wait
from lambdas.usecases import customer_leaves
from lambdas.usecases import rewind as rewinding
from lambdas.ws import frames

logger = Logger(logger_formatter=masked_formatter())


@env.once
def state_machine_arns() -> frozenset[str]:
    """``STATE_MACHINE_ARNS``: comma-separated; resources, not a stage setting."""
    arns = optional_resource("STATE_MACHINE_ARNS") or ""
    return frozenset(part.strip() for part in arns.split(",") if part.strip())


def sfn() -> Any:
    return aws.client("stepfunctions")


def _stop_wait(token: str, handoff_id: str) -> bool:
    """Fail the wait of a handoff whose session was deleted before anyone took it."""
    return fail_wait(sfn(), token, handoff_id, customer_leaves.SESSION_DELETED)


def handoff_state_machine_arn() -> str:
    return resource("HANDOFF_STATE_MACHINE_ARN")


class HandoffKeyTaken(Conflict):
    """The ``Idempotency-Key`` names a handoff another request started."""


def _execution_of(machine_arn: str, name: str) -> str:
    """The ARN of ``machine_arn``'s execution called ``name``."""
    prefix, _, machine = machine_arn.rpartition(":stateMachine:")
    return f"{prefix}:execution:{machine}:{name}"


def _start_handoff(caller: Caller, session_id: str, body: dict[str, Any], name: str, request_id: str) -> dict[str, Any]:
    """Start the handoff workflow as ``name``; an execution of that name with this input is this request's."""
    state = {
        "session_id": session_id,
        "reason": body["reason"],
        "priority": body.get("priority", "normal"),
        "requested_by": caller.sub,
        "role": caller.role,
    }
    machine = handoff_state_machine_arn()
    try:
        started = sfn().start_execution(stateMachineArn=machine, name=name, input=json.dumps(state))
    except ClientError as err:
        if err.response.get("Error", {}).get("Code") != "ExecutionAlreadyExists":
            raise
        # The first attempt started it but its answer was lost (or its record expired): the same
        # request gets the first answer, any other request a 409.
        started = sfn().describe_execution(executionArn=_execution_of(machine, name))
        if json.loads(started.get("input") or "{}") != state:
            raise HandoffKeyTaken("this Idempotency-Key names another request's handoff; use a new key") from None
    return {
        "execution_arn": started["executionArn"],
        "started_at": started["startDate"].isoformat(),
        "request_id": request_id,
    }


@env.once
def app() -> APIGatewayRestResolver:
    """The resolver, built once per container (its CORS origins come from the stage settings)."""
    origins = settings().origins()
    cors = CORSConfig(
        allow_origin=origins[0] if origins else "",
        extra_origins=list(origins[1:]),
        allow_headers=["Authorization", "Content-Type", "Idempotency-Key"],
        max_age=600,
    )
    resolver = APIGatewayRestResolver(cors=cors)
    _register(resolver)
    return resolver


@dataclass(frozen=True)
class Caller:
    sub: str
    role: str
    email: str | None = None


def _caller(resolver: APIGatewayRestResolver, method: str, path: str) -> Caller:
    """The authorizer's identity, checked against the route table (defence in depth)."""
    context = resolver.current_event.request_context.authorizer.get_context() or {}
    sub, role = context.get("sub"), context.get("role")
    if not isinstance(sub, str) or not sub or role not in access.route(method, path).roles:
        raise Forbidden()
    email = context.get("email")
    return Caller(sub, str(role), email if isinstance(email, str) and email else None)


def _can_read(caller: Caller, session: Session) -> bool:
    if caller.role == access.ADMIN:
        return True
    if caller.role == access.CUSTOMER:
        return session.customer_id == caller.sub
    if caller.role == access.AGENT:
        # Only while serving it: access ends with the handoff (closed, failed, re-queued).
        handoff = store().handoffs.current_handoff(session.session_id)
        return handoff is not None and handoff.agent_id == caller.sub and handoff.status == HandoffStatus.ASSIGNED
    return False


def _can_change(caller: Caller, session: Session) -> bool:
    return caller.role == access.ADMIN or (caller.role == access.CUSTOMER and session.customer_id == caller.sub)


def _visible_session(caller: Caller, session_id: str, *, change: bool = False) -> Session:
    """The session if the caller may see (or change) it; NotFound otherwise, whichever the cause."""
    session = store().sessions.get_session(session_id)
    allowed = session is not None and (_can_change(caller, session) if change else _can_read(caller, session))
    ended = session is not None and not allowed and caller.role == access.AGENT
    if ended and store().handoffs.served_before(session_id, caller.sub):
        raise Forbidden("your handoff of this session has ended; only its current agent may read it")
    if session is None or not allowed:
        raise NotFound("session", session_id)
    return session


def _message_text(text: str | None) -> str | None:
    """A rewound message's new text under the chat's rules for a message (NFC, trimmed, no control characters)."""
    if text is None:
        return None
    try:
        return frames.checked_text(text)
    except frames.FrameError as err:
        raise validation.ValidationError(f"body.text: {err}") from None


def _session_id(resolver: APIGatewayRestResolver, value: str) -> str:
    return validation.parse_path(value, validation.SESSION_ID, "id")


def _register(resolver: APIGatewayRestResolver) -> None:
    @resolver.post("/sessions")
    @tracer.capture_method(capture_response=False)
    def create_session() -> Response:
        caller = _caller(resolver, "POST", "/sessions")
        body = validation.parse_body(resolver.current_event.body, validation.CREATE_SESSION)
        if caller.role == access.CUSTOMER and body["customer_id"] != caller.sub:
            raise Forbidden()
        # The customer's own address goes with the session (an admin's would be the wrong person).
        email = caller.email if caller.role == access.CUSTOMER else None

        def create() -> dict[str, Any]:
            return public(
                store().sessions.create_session(body["customer_id"], metadata=body.get("metadata") or {}, email=email)
            )

        # A client that retries with its Idempotency-Key gets the session it created, not a second one.
        key = resolver.current_event.headers.get("Idempotency-Key")
        return json_response(201, idempotency.replay(caller.sub, "POST /sessions", key, body, create))

    @resolver.get("/sessions/<session_id>")
    @tracer.capture_method(capture_response=False)
    def get_session(session_id: str) -> Response:
        caller = _caller(resolver, "GET", "/sessions/{id}")
        session = _visible_session(caller, _session_id(resolver, session_id))
        # A customer waiting for an agent is shown ``handoff``, as every frame of their chat says.
        return json_response(200, {**public(session), "status": str(store().handoffs.shown_status(session))})

    @resolver.get("/sessions/<session_id>/turns")
    @tracer.capture_method(capture_response=False)
    def get_turns(session_id: str) -> Response:
        caller = _caller(resolver, "GET", "/sessions/{id}/turns")
        sid = _session_id(resolver, session_id)
        query = validation.parse_query(resolver.current_event.query_string_parameters, validation.TURNS_QUERY)
        _visible_session(caller, sid)
        page = store().turns.list_turns(sid, limit=query["limit"], cursor=query.get("cursor"))
        return json_response(
            200,
            {"session_id": sid, "turns": [public(turn) for turn in page.items], "next_cursor": page.next_cursor},
        )

    @resolver.delete("/sessions/<session_id>")
    @tracer.capture_method(capture_response=False)
    def delete_session(session_id: str) -> Response:
        caller = _caller(resolver, "DELETE", "/sessions/{id}")
        session = _visible_session(caller, _session_id(resolver, session_id), change=True)
        # A handoff in progress ends with the session (its agent released, its access gone), in the
        # same transaction that deletes it; otherwise the session alone is deleted.
        if not customer_leaves.delete_during_handoff(store(), session, deleted_by=caller.sub, stop_wait=_stop_wait):
            store().sessions.update_status(session.session_id, SessionStatus.DELETED)
        return json_response(202, {"session_id": session.session_id, "status": str(SessionStatus.DELETED)})

    _register_listings(resolver)
    _register_session_actions(resolver)

    @resolver.get("/executions/<execution_id>")
    @tracer.capture_method(capture_response=False)
    def describe_execution(execution_id: str) -> Response:
        caller = _caller(resolver, "GET", "/executions/{id}")
        arn = validation.parse_path(execution_id, validation.EXECUTION_ID, "id")
        return json_response(200, _execution(caller, arn))

    register_error_handlers(resolver, logger)


def _register_session_actions(resolver: APIGatewayRestResolver) -> None:
    """What a customer asks of a session besides reading it: another answer (rewind), a human (handoff)."""

    @resolver.post("/sessions/<session_id>/rewind")
    @tracer.capture_method(capture_response=False)
    def rewind_session(session_id: str) -> Response:
        caller = _caller(resolver, "POST", "/sessions/{id}/rewind")
        sid = _session_id(resolver, session_id)
        body = validation.parse_body(resolver.current_event.body, validation.REWIND_REQUEST)
        done = rewinding.rewind(
            store(),
            sid,
            caller.sub,
            body["turn_number"],
            _message_text(body.get("text")),
            resolver.current_event.headers.get("Idempotency-Key"),
            reply=lambda rewound: rewinding.whole_reply(store(), rewinding.stage_responder(), rewound),
        )
        return json_response(200, done.answer)

    @resolver.post("/sessions/<session_id>/handoff")
    @tracer.capture_method(capture_response=False)
    def start_handoff(session_id: str) -> Response:
        caller = _caller(resolver, "POST", "/sessions/{id}/handoff")
        sid = _session_id(resolver, session_id)
        body = validation.parse_body(resolver.current_event.body, validation.HANDOFF_REQUEST)
        key = resolver.current_event.headers.get("Idempotency-Key") or ""
        if key and not idempotency.KEY_PATTERN.fullmatch(key):
            raise idempotency.InvalidKey("header.Idempotency-Key must be 1-80 letters, digits, - or _")
        name = key or str(uuid.uuid4())
        request_id = str(resolver.current_event.request_context.request_id or "")
        route, request = "POST /sessions/{id}/handoff", {"id": sid, **body}
        answer = idempotency.replay(
            caller.sub, route, key, request, lambda: _start_handoff(caller, sid, body, name, request_id)
        )
        return json_response(202, answer)


def _register_listings(resolver: APIGatewayRestResolver) -> None:
    """The session listings: a customer's sessions, and the sessions in one status."""

    @resolver.get("/customers/<customer_id>/sessions")
    @tracer.capture_method(capture_response=False)
    def list_customer_sessions(customer_id: str) -> Response:
        caller = _caller(resolver, "GET", "/customers/{id}/sessions")
        cid = validation.parse_path(customer_id, validation.CUSTOMER_ID, "id")
        query = validation.parse_query(
            resolver.current_event.query_string_parameters, validation.CUSTOMER_SESSIONS_QUERY
        )
        if caller.role != access.ADMIN and cid != caller.sub:
            raise NotFound("customer", cid)
        page = store().sessions.list_customer_sessions(cid, limit=query["limit"], cursor=query.get("cursor"))
        return json_response(
            200,
            {"customer_id": cid, "sessions": [public(s) for s in page.items], "next_cursor": page.next_cursor},
        )

    @resolver.get("/admin/sessions")
    @tracer.capture_method(capture_response=False)
    def list_sessions_by_status() -> Response:
        caller = _caller(resolver, "GET", "/admin/sessions")
        query = validation.parse_query(
            resolver.current_event.query_string_parameters, validation.SESSIONS_BY_STATUS_QUERY
        )
        status = query["status"]
        if caller.role == access.AGENT and status != validation.AGENT_LISTABLE_STATUS:
            raise Forbidden(f"agents may list only sessions in status {validation.AGENT_LISTABLE_STATUS}")
        page = store().sessions.list_by_status(status, limit=query["limit"], cursor=query.get("cursor"))
        return json_response(
            200, {"status": status, "sessions": [public(s) for s in page.items], "next_cursor": page.next_cursor}
        )


def _execution(caller: Caller, execution_arn: str) -> dict[str, Any]:
    """Status of an execution the caller started (admins: any of ours); NotFound otherwise."""
    workflow, _, _name = execution_arn.rpartition(":")
    state_machine_arn = workflow.replace(":execution:", ":stateMachine:", 1)
    if state_machine_arn not in state_machine_arns():
        raise NotFound("execution", execution_arn)
    try:
        described = sfn().describe_execution(executionArn=execution_arn)
    except ClientError as err:
        if err.response.get("Error", {}).get("Code") in ("ExecutionDoesNotExist", "InvalidArn"):
            raise NotFound("execution", execution_arn) from None
        raise
    try:
        started_by = json.loads(described.get("input") or "{}").get("requested_by")
    except (ValueError, AttributeError):
        started_by = None
    if caller.role != access.ADMIN and started_by != caller.sub:
        raise NotFound("execution", execution_arn)
    result: dict[str, Any] = {
        "execution_arn": execution_arn,
        "status": described["status"],
        "started_at": described["startDate"].isoformat(),
    }
    if described.get("stopDate"):
        result["stopped_at"] = described["stopDate"].isoformat()
    if described["status"] != "SUCCEEDED" and described.get("error"):
        result["error"] = described["error"]  # the error name only; its cause may hold internals
    if caller.role == access.ADMIN and described.get("output"):
        try:
            result["output"] = json.loads(described["output"])
        except ValueError:
            result["output"] = None
    return result


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST, clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    idempotency.remember_invocation(context)
    return app().resolve(event, context)
