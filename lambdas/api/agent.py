"""Agent routes of the REST API: accept a waiting handoff, message the customer, close the handoff.

* ``POST /handoffs/{session_id}/accept``: the calling agent (its id from the authorizer context,
  never from the body) takes the session's waiting handoff. The agent is reserved with the
  store's conditional write, WaitForAgent's task token is taken from the handoff record (exactly
  one caller gets it) and completed with ``{"available": true, "agent_id"}``. 200, or 409 when
  nothing waits, the agent is not available, or the request expired meanwhile (the reservation
  is released again). 500 when Step Functions cannot be told (throttled, 5xx, timed out after the
  client's retries): the reservation is released and the token stored again, so the handoff
  still waits and the same accept may be sent again.
  An agent without the skill the handoff asks for (its reason) gets 409 naming the skill, and
  the handoff stays queued.
* ``POST /handoffs/{session_id}/messages`` ``{"text"}``: only the agent the current handoff is
  assigned to (access ends with the handoff). Counts the agent's activity on the handoff (a
  conditional write: a reassignment for idleness that got there first makes it 403 and nothing is
  stored), stores an ``agent`` turn, posts it to the customer's WebSocket connection
  (``lambdas.shared.connections.post_to_connection``) and completes the workflow's waiting token
  (MonitorHandoff's for the first reply, WatchAgent's after it), which restarts the idle limit.
  201 ``{"turn_number", "delivered"}``, also
  when Step Functions cannot be told (the turn is stored and pushed; the token is stored again
  for the next reply or the close to complete).
* ``POST /handoffs/{session_id}/close`` ``{"resolution", "outcome": "resume"|"end"}``: the agent
  of the handoff or an admin. The handoff is completed, its agent released and the session back
  to ``active`` (the assistant answers) or ended, in one conditional transaction; the customer
  is told once by the customer notifier (the ``handoff_closed`` frame, or e-mail, or the
  transcript). 200, 409 when it is closed already (nothing changes).
  A released agent becomes available again, unless it chose ``away`` meanwhile. Step Functions
  failing to take MonitorHandoff's completion does not fail the close (the workflow then ends at
  the reply wait's timeout, finding the handoff closed).
* ``POST /agents/me/presence`` ``{"status": "available"|"away"}``: the calling agent's presence,
  in the AvailableAgentsIndex at once; a busy agent's choice applies when it is released. Only
  the caller's own (``me`` is the token's ``sub``; the body names no agent).
* ``GET /agents/me/inbox`` ``?limit&cursor``: the calling agent's inbox page (its own, the
  waiting and, for a manager, the managers inbox; see :mod:`lambdas.api.inbox`).

An agent the registry does not know (``lambdas.api.admin_agents``) gets 404 ``NotFound`` on accept
and presence; a retired one gets 403 on every route here, whatever its token still says.

Errors answer ``{"error": {"code", "message", "request_id"}}`` (400, 403, 404, 409, 500), mapped
by :func:`lambdas.api.responses.register_error_handlers` like every REST route.

Environment (the REST stack deploys this function):
    TABLE_NAME: the sessions table (required; read/write), and the stage settings of
        :mod:`lambdas.shared.settings`.
Permissions: the table (read/write), ``states:SendTaskSuccess`` on the handoff state machine
(``OrchestrationStack.handoff.grant_task_response``), ``execute-api:ManageConnections`` on the
WebSocket API.
"""

from __future__ import annotations

import json
from typing import Any, Final

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import BotoCoreError, ClientError

from lambdas.api import inbox, validation
from lambdas.api.responses import Forbidden, json_response, register_error_handlers
from lambdas.api.validation import ValidationError
from lambdas.shared import aws, env, idempotency, keys
from lambdas.shared.connections import DeliveryError, management_endpoint, post_to_connection
from lambdas.shared.errors import (
    AgentNotFound,
    AgentNotRegistered,
    AgentRetired,
    AgentUnavailable,
    Conflict,
    NotFound,
    NotTheAssignedAgent,
)
from lambdas.shared.logs import masked_formatter
from lambdas.shared.records import AgentStatus, Handoff, HandoffStatus, Role, Session, SessionStatus
from lambdas.shared.settings import store as store
from lambdas.shared.store import WAITING_FOR_AGENT, WAITING_FOR_REPLY, HandoffClosed, preload
from lambdas.shared.text import hidden_character
from lambdas.shared.tracing import tracer
from lambdas.usecases.close_handoff import close_handoff
from lambdas.ws import frames

preload("agents")  # used by its invocations: loaded at init, not by the first one
logger = Logger(logger_formatter=masked_formatter())

AGENT_ROLE: Final = "agent"
ADMIN_ROLE: Final = "admin"
MAX_TEXT: Final = 4000
_EXPIRED_TOKEN_CODES: Final = frozenset({"TaskTimedOut", "TaskDoesNotExist", "InvalidToken"})


NOT_THE_AGENT: Final = "only the agent of this handoff may do that"


def sfn() -> Any:
    return aws.client("stepfunctions")


def _agent_id(resolver: APIGatewayRestResolver) -> str:
    """The caller's id from the authorizer context; only the agent role passes, and not once retired."""
    context = resolver.current_event.request_context.authorizer.get_context() or {}
    sub, role = context.get("sub"), context.get("role")
    if role != AGENT_ROLE or not isinstance(sub, str) or not sub:
        raise Forbidden(NOT_THE_AGENT)
    _refuse_retired(sub)
    return sub


def _refuse_retired(agent_id: str) -> None:
    """403 for a retired agent: its token stays valid until it expires, its access ends at once.

    A retired agent would otherwise still read the waiting inbox (customers' session ids and
    reasons) with the token it signed in with before the retirement.
    """
    agent = store().agents.get_agent(agent_id)
    if agent is not None and agent.status == AgentStatus.RETIRED:
        raise Forbidden(f"agent {agent_id} is retired: the agent routes are closed to it")


def _staff(resolver: APIGatewayRestResolver) -> tuple[str, str]:
    """The caller's id and role from the authorizer context; an agent or an admin."""
    context = resolver.current_event.request_context.authorizer.get_context() or {}
    sub, role = context.get("sub"), context.get("role")
    if role not in (AGENT_ROLE, ADMIN_ROLE) or not isinstance(sub, str) or not sub:
        raise Forbidden("only the agent of this handoff or an admin may close it")
    if role == AGENT_ROLE:
        _refuse_retired(sub)
    return sub, str(role)


def _session_id(value: str) -> str:
    return validation.parse_path(value, validation.SESSION_ID, "session_id")


def _text(body: str | None) -> str:
    try:
        data = json.loads(body or "")
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser's stack
        raise ValidationError('the body must be JSON: {"text": "..."}') from None
    if not isinstance(data, dict) or set(data) != {"text"}:
        raise ValidationError('the body must be exactly {"text": "..."}')
    text = data["text"]
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_TEXT:
        raise ValidationError(f"text must be a non-empty string of at most {MAX_TEXT} characters")
    problem = hidden_character(text)
    if problem is not None:
        raise ValidationError(f"text {problem}")
    return text


def _complete(token: str, output: dict[str, Any]) -> bool:
    """SendTaskSuccess; False when the waiting task is gone (timed out, execution ended)."""
    try:
        sfn().send_task_success(taskToken=token, output=json.dumps(output))
    except ClientError as err:
        if err.response.get("Error", {}).get("Code") in _EXPIRED_TOKEN_CODES:
            return False
        raise
    return True


def _give_back(session_id: str, handoff: Handoff, token: str) -> None:
    """Store a claimed WaitForAgent token again after SendTaskSuccess failed (throttled, 5xx, timed out).

    Claiming removes the token, so without this the handoff would wait with no token on record:
    every later accept answers 409 and the workflow only moves at its wait's timeout. Stored only
    while the handoff still has the status it had (an escalation that claimed meanwhile wins).
    """
    try:
        restored = store().handoffs.await_callback(
            session_id, handoff.handoff_id, WAITING_FOR_AGENT, token, while_status=handoff.status
        )
    except Exception:
        logger.exception("the handoff's wait token could not be stored again", extra={"session_id": session_id})
        return
    logger.info("handoff waits for an agent again", extra={"session_id": session_id, "restored": restored})


def accept(session_id: str, agent_id: str) -> dict[str, Any]:
    """Give the session's waiting handoff to ``agent_id``; raises Conflict/NotFound otherwise."""
    handoff = store().handoffs.current_handoff(session_id)
    if handoff is None:
        raise NotFound("handoff for session", session_id)
    escalated = handoff.status == HandoffStatus.ESCALATED
    if handoff.status not in (HandoffStatus.QUEUED, HandoffStatus.ESCALATED) or store().handoffs.waiting_for(
        session_id, handoff.handoff_id
    ) != (WAITING_FOR_AGENT):
        raise Conflict(f"no handoff of session {session_id!r} is waiting for an agent")
    agent = store().agents.get_agent(agent_id)
    if agent is None:
        raise AgentNotRegistered(agent_id)
    if agent.status == AgentStatus.RETIRED:
        raise AgentRetired(agent_id)
    if escalated and not inbox.reads_managers_inbox(agent):
        # No agent took it in time: it waits for a manager now, as the managers were paged.
        raise Conflict(
            "this handoff was escalated and waits for a manager (the stage's manager skill or the "
            "registry's manager flag), which you are not"
        )
    if not escalated and handoff.reason not in agent.skills:
        # The reason is the skill the workflow matches agents on; the handoff stays queued.
        raise Conflict(
            f"this handoff needs the skill {handoff.reason!r}, which you do not have; "
            "it stays queued for an agent who has it"
        )
    try:
        store().agents.reserve_agent(agent_id, session_id)
    except AgentNotFound:
        raise AgentNotRegistered(agent_id) from None
    except AgentUnavailable:
        raise Conflict("you are not available (busy or offline); finish or release your current session") from None
    token: str | None = None
    try:
        token = store().handoffs.claim_callback(session_id, handoff.handoff_id, WAITING_FOR_AGENT)
        completed = token is not None and _complete(
            token, {"available": True, "agent_id": agent_id, "source": "accepted"}
        )
    except Exception:
        store().agents.release_agent(agent_id, session_id=session_id)  # never leave the agent reserved for nothing
        if token is not None:
            _give_back(session_id, handoff, token)
        raise
    if not completed:
        store().agents.release_agent(agent_id, session_id=session_id)
        raise Conflict(f"the handoff of session {session_id!r} was taken or expired meanwhile")
    # no other console offers it any more
    store().inbox.remove_inbox_item(keys.MANAGERS_INBOX if escalated else keys.WAITING_INBOX, handoff)
    logger.info("handoff accepted", extra={"session_id": session_id, "agent_id": agent_id})
    return {"session_id": session_id, "handoff_id": handoff.handoff_id, "agent_id": agent_id, "status": "accepted"}


def _serving(session_id: str, agent_id: str) -> Handoff:
    """The session's current handoff if ``agent_id`` serves it; 403 otherwise."""
    handoff = store().handoffs.current_handoff(session_id)
    if handoff is None or handoff.agent_id != agent_id or handoff.status != HandoffStatus.ASSIGNED:
        raise Forbidden(NOT_THE_AGENT)
    return handoff


def _push(session: Session, frame: dict[str, Any]) -> bool:
    """Post ``frame`` to the session's live WebSocket connection; False when it has none."""
    if not session.connection_id:
        return False
    connection = store().connections.get_connection(session.connection_id)
    if connection is None:
        return False
    try:
        return post_to_connection(
            management_endpoint(connection.domain_name, connection.stage), connection.connection_id, frame
        )
    except DeliveryError as err:
        logger.warning("frame not pushed", extra={"code": err.code, "type": frame.get("type")})
        return False


def send_message(session_id: str, agent_id: str, text: str) -> dict[str, Any]:
    """Count the agent's activity, store its turn, push it to the customer, tell the workflow's wait."""
    handoff = _serving(session_id, agent_id)
    session = store().sessions.get_session(session_id)
    if session is None or session.status != SessionStatus.HANDOFF:
        raise Conflict(f"session {session_id!r} is not handed over to an agent")
    try:
        # Counted before the turn is stored: a reassignment of the idle agent that won the race
        # refuses the message whole (nothing stored), and one that lost it keeps the agent.
        version = store().handoffs.record_activity(session_id, handoff.handoff_id, agent_id)
    except HandoffClosed:
        raise Forbidden(NOT_THE_AGENT) from None
    turn = store().turns.add_turn(session_id, Role.AGENT, text)
    # The same frame the chat sends for every stored reply, with the agent as its author.
    frame = frames.message_frame(role=str(Role.AGENT), session_id=session_id, turn_number=turn.turn_number, text=text)
    delivered = _push(session, frame)
    if handoff.first_reply_at is None:  # the handoff metrics' time to first reply; later replies skip the write
        store().handoffs.mark_first_reply(session_id, handoff.handoff_id, agent_id)
    token = store().handoffs.claim_callback(session_id, handoff.handoff_id, WAITING_FOR_REPLY)
    if token is not None:
        try:
            _complete(token, {"agent_id": agent_id, "turn_number": turn.turn_number, "version": version})
        except (ClientError, BotoCoreError):
            # The turn is stored and pushed: failing the request now would make the console send
            # it again (a second turn). The token goes back, so the next reply or the close tells
            # the workflow; until then the handoff's idle timer runs as if the agent had not replied.
            logger.exception("MonitorHandoff not told of the reply", extra={"session_id": session_id})
            try:
                store().handoffs.await_callback(
                    session_id, handoff.handoff_id, WAITING_FOR_REPLY, token, while_status=HandoffStatus.ASSIGNED
                )
            except (ClientError, BotoCoreError):
                # Still a stored, delivered reply: the idle timer ends the wait if nothing else does.
                logger.exception("MonitorHandoff's token not stored again", extra={"session_id": session_id})
    return {"session_id": session_id, "turn_number": turn.turn_number, "delivered": delivered}


_OUTCOMES: Final = {"resume": SessionStatus.ACTIVE, "end": SessionStatus.DISCONNECTED}


def close(session_id: str, caller: str, role: str, body: dict[str, Any]) -> dict[str, Any]:
    """Close the session's handoff: completed, agent released, session active again or ended.

    The agent of the handoff or an admin. One conditional transaction (the ``close_handoff`` use
    case); a second close is 409 and changes nothing. The workflow's waiting token (MonitorHandoff's
    or WatchAgent's) is completed so that the execution finishes now.
    """
    handoff = store().handoffs.current_handoff(session_id)
    if handoff is None:
        raise NotFound("handoff for session", session_id)
    if role != ADMIN_ROLE and handoff.agent_id != caller:
        raise Forbidden(NOT_THE_AGENT)
    outcome = str(body["outcome"])
    try:
        closed = close_handoff(
            store(),
            session_id,
            handoff.handoff_id,
            closed_by=caller,
            resolution=str(body["resolution"]),
            outcome=_OUTCOMES[outcome],
            assigned_to=None if role == ADMIN_ROLE else caller,
        )
    except NotTheAssignedAgent:
        raise Forbidden(NOT_THE_AGENT) from None  # reassigned since the read above
    token = store().handoffs.claim_callback(session_id, handoff.handoff_id, WAITING_FOR_REPLY)
    if token is not None:
        try:
            _complete(token, {"agent_id": handoff.agent_id, "closed": True, "outcome": outcome})
        except (ClientError, BotoCoreError):
            # The close is committed (a second close is 409): a 500 would report a failure that
            # did not happen. The workflow finishes at its wait's idle timeout instead, where
            # ReassignAgent (or ReplaceIdleAgent) finds the handoff closed.
            logger.exception("MonitorHandoff not told of the close", extra={"session_id": session_id})
    # The customer is told by the customer notifier, from the router's "completed" event: over the
    # WebSocket when connected, else by e-mail or in the conversation (once, whichever it is).
    logger.info("handoff closed", extra={"session_id": session_id, "outcome": outcome, "by": role})
    return {
        "session_id": session_id,
        "handoff_id": handoff.handoff_id,
        "status": str(closed.handoff.status),
        "session_status": str(closed.session_status),
        "released_agent_id": closed.released_agent_id,
    }


@env.once
def app() -> APIGatewayRestResolver:
    """The resolver, built once per container."""
    resolver = APIGatewayRestResolver()

    @resolver.post("/handoffs/<session_id>/accept")
    @tracer.capture_method(capture_response=False)
    def accept_route(session_id: str) -> Response:
        agent_id = _agent_id(resolver)
        return json_response(200, accept(_session_id(session_id), agent_id))

    @resolver.post("/handoffs/<session_id>/close")
    @tracer.capture_method(capture_response=False)
    def close_route(session_id: str) -> Response:
        caller, role = _staff(resolver)
        sid = _session_id(session_id)
        body = validation.parse_body(resolver.current_event.body, validation.CLOSE_HANDOFF)
        return json_response(200, close(sid, caller, role, body))

    @resolver.post("/agents/me/presence")
    @tracer.capture_method(capture_response=False)
    def presence_route() -> Response:
        agent_id = _agent_id(resolver)
        body = validation.parse_body(resolver.current_event.body, validation.PRESENCE_REQUEST)
        try:
            agent = store().agents.set_presence(agent_id, str(body["status"]))
        except AgentNotFound:
            raise AgentNotRegistered(agent_id) from None
        after = str(body["status"]) if agent.status == AgentStatus.BUSY else str(agent.status)
        return json_response(200, {"agent_id": agent_id, "status": str(agent.status), "after_release": after})

    @resolver.get("/agents/me/inbox")
    @tracer.capture_method(capture_response=False)
    def inbox_route() -> Response:
        agent_id = _agent_id(resolver)
        query = validation.parse_query(resolver.current_event.query_string_parameters, inbox.INBOX_QUERY)
        agent = store().agents.get_agent(agent_id)
        if agent is None:
            raise Forbidden(NOT_THE_AGENT)
        return json_response(200, inbox.read_inbox(agent, limit=query["limit"], cursor=query.get("cursor")))

    @resolver.post("/handoffs/<session_id>/messages")
    @tracer.capture_method(capture_response=False)
    def message_route(session_id: str) -> Response:
        agent_id = _agent_id(resolver)
        sid = _session_id(session_id)
        text = _text(resolver.current_event.body)
        # A console that retries with its Idempotency-Key gets the turn it stored, not a second one.
        key = resolver.current_event.headers.get("Idempotency-Key")
        answer = idempotency.replay(
            agent_id, f"POST /handoffs/{sid}/messages", key, {"text": text}, lambda: send_message(sid, agent_id, text)
        )
        return json_response(201, answer)

    register_error_handlers(resolver, logger)
    return resolver


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST, clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    idempotency.remember_invocation(context)
    return app().resolve(event, context)
