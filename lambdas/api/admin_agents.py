"""The agent registry's admin routes: who may take handoffs, with which skills.

An agent exists only once an admin registered it here; its id is the subject (``sub``) of the
person's user in the identity provider, the id the authorizer puts in the agent's own requests.

* ``POST /admin/agents`` ``{"agent_id", "display_name", "skills", "is_manager"?}``: 201 with the
  agent, ``offline`` (it takes handoffs once it sets ``POST /agents/me/presence`` available);
  409 ``AgentExists`` when the id is registered already, retired ones included. With an
  ``Idempotency-Key`` a retry answers the first 201 again.
* ``GET /admin/agents?limit=&cursor=&status=``: registered agents by id, paginated like every
  listing (``next_cursor``); with ``status`` a page holds the matching agents of its rows.
* ``GET /admin/agents/{agent_id}``: one agent, 404 when not registered.
* ``PATCH /admin/agents/{agent_id}`` ``{"display_name"?, "skills"?, "is_manager"?}``: 200; an
  available agent is re-indexed under its new skills at once. 409 ``AgentRetired`` for a retired one.
* ``POST /admin/agents/{agent_id}/retire``: 200 with the agent, now ``retired`` and out of the
  AvailableAgentsIndex; its later presence changes and accepts answer 409 ``AgentRetired``.
  Refused with 409 ``AgentBusy`` (naming the session) while the agent holds a reserved or
  assigned handoff, and 409 ``AgentRetired`` when it is retired already.

Admins only (:mod:`lambdas.api.access`; the authorizer's policy and this handler both check).
Errors: :func:`lambdas.api.responses.register_error_handlers` (400 ``BAD_REQUEST_BODY`` /
``BAD_REQUEST_PARAMETERS`` naming the field, 403, 404, 409).

Environment: TABLE_NAME (the sessions table, read/write) and the stage settings of
:mod:`lambdas.shared.settings`.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from lambdas.api import access, validation
from lambdas.api.responses import Forbidden, json_response, register_error_handlers
from lambdas.shared import env, idempotency
from lambdas.shared.errors import AgentNotFound
from lambdas.shared.logs import masked_formatter
from lambdas.shared.records import Agent
from lambdas.shared.settings import store as store
from lambdas.shared.store import preload
from lambdas.shared.tracing import tracer

preload("agents")  # used by its invocations: loaded at init, not by the first one
logger = Logger(logger_formatter=masked_formatter())


def public_agent(agent: Agent) -> dict[str, Any]:
    """What the registry answers about an agent (no revision, no internal attributes)."""
    return {
        "agent_id": agent.agent_id,
        "display_name": agent.name,
        "skills": list(agent.skills),
        "is_manager": agent.is_manager,
        "status": str(agent.status),
        "current_session_id": agent.current_session_id,
        "available_since": agent.available_since,
        "updated_at": agent.updated_at,
        "retired_at": agent.retired_at,
    }


def _admin(resolver: APIGatewayRestResolver, method: str, path: str) -> str:
    """The caller's ``sub``; only a role the access table allows on this route passes."""
    context = resolver.current_event.request_context.authorizer.get_context() or {}
    sub, role = context.get("sub"), context.get("role")
    if not isinstance(sub, str) or not sub or role not in access.route(method, path).roles:
        raise Forbidden()
    return sub


def _agent_id(value: str) -> str:
    return validation.parse_path(value, validation.AGENT_ID, "agent_id")


def _existing(agent_id: str) -> Agent:
    agent = store().agents.get_agent(agent_id)
    if agent is None:
        raise AgentNotFound(agent_id)
    return agent


@env.once
def app() -> APIGatewayRestResolver:
    """The resolver, built once per container."""
    resolver = APIGatewayRestResolver()

    @resolver.post("/admin/agents")
    @tracer.capture_method(capture_response=False)
    def register_route() -> Response:
        admin = _admin(resolver, "POST", "/admin/agents")
        body = validation.parse_body(resolver.current_event.body, validation.REGISTER_AGENT)

        def register() -> dict[str, Any]:
            agent = store().agents.register_agent(
                str(body["agent_id"]),
                name=str(body["display_name"]),
                skills=tuple(body["skills"]),
                is_manager=bool(body.get("is_manager", False)),
            )
            logger.info("agent registered", extra={"agent_id": agent.agent_id, "by": admin})
            return public_agent(agent)

        # A retry with the Idempotency-Key gets the registration it made, not 409 AgentExists.
        key = resolver.current_event.headers.get("Idempotency-Key")
        return json_response(201, idempotency.replay(admin, "POST /admin/agents", key, body, register))

    @resolver.get("/admin/agents")
    @tracer.capture_method(capture_response=False)
    def list_route() -> Response:
        _admin(resolver, "GET", "/admin/agents")
        query = validation.parse_query(resolver.current_event.query_string_parameters, validation.AGENTS_QUERY)
        page = store().agents.list_agents(limit=query["limit"], cursor=query.get("cursor"), status=query.get("status"))
        return json_response(
            200, {"agents": [public_agent(agent) for agent in page.items], "next_cursor": page.next_cursor}
        )

    @resolver.get("/admin/agents/<agent_id>")
    @tracer.capture_method(capture_response=False)
    def get_route(agent_id: str) -> Response:
        _admin(resolver, "GET", "/admin/agents/{agent_id}")
        return json_response(200, public_agent(_existing(_agent_id(agent_id))))

    @resolver.patch("/admin/agents/<agent_id>")
    @tracer.capture_method(capture_response=False)
    def update_route(agent_id: str) -> Response:
        admin = _admin(resolver, "PATCH", "/admin/agents/{agent_id}")
        aid = _agent_id(agent_id)
        body = validation.parse_body(resolver.current_event.body, validation.UPDATE_AGENT)
        agent = store().agents.update_agent(
            aid,
            name=None if "display_name" not in body else str(body["display_name"]),
            skills=None if "skills" not in body else tuple(body["skills"]),
            is_manager=None if "is_manager" not in body else bool(body["is_manager"]),
        )
        logger.info("agent updated", extra={"agent_id": aid, "fields": sorted(body), "by": admin})
        return json_response(200, public_agent(agent))

    @resolver.post("/admin/agents/<agent_id>/retire")
    @tracer.capture_method(capture_response=False)
    def retire_route(agent_id: str) -> Response:
        admin = _admin(resolver, "POST", "/admin/agents/{agent_id}/retire")
        agent = store().agents.retire_agent(_agent_id(agent_id))
        logger.info("agent retired", extra={"agent_id": agent.agent_id, "by": admin})
        return json_response(200, public_agent(agent))

    register_error_handlers(resolver, logger)
    return resolver


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST, clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    idempotency.remember_invocation(context)
    return app().resolve(event, context)
