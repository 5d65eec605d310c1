"""500 generated requests through the deployed stage's REST API: never a 5xx, never a wrongful Allow.

The stage is the synthesized dev stage on embedded AWS with its Cognito pool on moto. Callers are
real users of the pool (two customers, an agent, an admin) plus tokens no one may use (one edited
to claim admin, one of another pool, none at all). Each request picks a caller, a route of the
access table served by a Lambda, path parameters from the callers' own and each other's ids and
hostile text, and a body from valid and hostile ones. Every request passes the real path: the
TOKEN authorizer's policy, the gateway's models, the handler.

What must hold: no 5xx; a caller the authorizers refuse, or whose role the route does not list,
gets 401/403 and nothing runs; a customer never gets a 2xx on another customer's session or
listing; an agent never gets a 2xx on a session no handoff of theirs serves. The workflow routes
(direct StartExecution) are left out: they start real executions, which the story covers.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from embedded import EmbeddedStage, embedded_stage
from embedded.services.cognito import Directory, claims_of
from embedded.synth import StageAssembly
from lambdas.api import access
from tests.support.identity import refusal

pytestmark = pytest.mark.slow

#: Routes whose integration is a Lambda (the review links and the StartExecution routes are not).
ROUTES = [
    route
    for route in access.ROUTES
    if not route.public and route.path not in ("/sessions/{id}/handoff", "/admin/cleanup", "/admin/export")
]
HOSTILE_TEXT = st.sampled_from(["", "x" * 300, "../..", "%00", "alice\n", "\u202e", "0" * 36, "{}", "null"])


@dataclass
class World:
    """The stage and who is on it."""

    stage: EmbeddedStage
    tokens: dict[str, str | None]
    subjects: dict[str, str]
    sessions: dict[str, str]  # customer name -> session id
    role: dict[str, str | None]  # caller -> the role its token carries (None: refused)


@pytest.fixture(scope="module")
def world(synthesized: StageAssembly) -> Iterator[World]:
    with embedded_stage(synthesized.assembly_dir) as stage:
        directory = Directory.of(stage)
        tokens: dict[str, str | None] = {}
        for who, role in (("alice", "customer"), ("bob", "customer"), ("agent", "agent"), ("root", "admin")):
            directory.ensure_user(f"{who}@example.com", role=role)
            tokens[who] = directory.sign_in(f"{who}@example.com").id_token
        subjects = {who: str(claims_of(token)["sub"]) for who, token in tokens.items() if token}
        admin = {"Authorization": f"Bearer {tokens['root']}"}
        registered = stage.rest.request(
            "POST",
            "/admin/agents",
            headers=admin,
            body={"agent_id": subjects["agent"], "display_name": "Agent", "skills": ["general"]},
        )
        assert registered.status == 201, registered.body
        sessions = {}
        for who in ("alice", "bob"):
            created = stage.rest.request(
                "POST",
                "/sessions",
                headers={"Authorization": f"Bearer {tokens[who]}"},
                body={"customer_id": subjects[who]},
            )
            assert created.status == 201, created.body
            sessions[who] = created.json()["session_id"]
        # Tokens nobody may use: alice's edited to claim admin, and no token at all
        alice = str(tokens["alice"])
        head, _, signature = alice.split(".")
        claims = {**claims_of(alice), "cognito:groups": ["admin"]}
        edited = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
        tokens["forged"] = f"{head}.{edited}.{signature}"
        tokens["nobody"] = None
        role: dict[str, str | None] = {"alice": "customer", "bob": "customer", "agent": "agent", "root": "admin"}
        role.update({"forged": None, "nobody": None})
        yield World(stage, tokens, subjects, sessions, role)


def _parameters(world: World) -> st.SearchStrategy[str]:
    ids = [*world.sessions.values(), *world.subjects.values(), "5d0c2f4e-1a3b-4c5d-8e9f-0a1b2c3d4e5f"]
    return st.one_of(st.sampled_from(ids), HOSTILE_TEXT)


BODIES = st.one_of(
    st.none(),
    st.sampled_from(
        [
            {"customer_id": "PLACEHOLDER"},
            {"text": "hello"},
            {"status": "available"},
            {"resolution": "done", "outcome": "resume"},
            {"agent_id": "PLACEHOLDER", "display_name": "X", "skills": ["general"]},
            {"display_name": "Renamed"},
        ]
    ),
    st.dictionaries(st.sampled_from(["text", "customer_id", "status", "x"]), HOSTILE_TEXT, max_size=3),
    HOSTILE_TEXT,
)


@dataclass(frozen=True)
class Request:
    caller: str
    route: access.Route
    params: dict[str, str]
    body: Any


@st.composite
def requests(draw: st.DrawFn, world: World) -> Request:
    caller = draw(st.sampled_from(sorted(world.tokens)))
    route = draw(st.sampled_from(ROUTES))
    names = [part.strip("{}") for part in route.path.split("/") if part.startswith("{")]
    params = {name: draw(_parameters(world)) for name in names}
    body = draw(BODIES)
    if isinstance(body, dict) and "PLACEHOLDER" in body.values():
        target = draw(st.sampled_from(sorted(world.subjects)))
        body = {k: (world.subjects[target] if v == "PLACEHOLDER" else v) for k, v in body.items()}
    return Request(caller, route, params, body)


def _owner(world: World, request: Request) -> str | None:
    """Whose data the request names: the customer of a session id or customer id it addresses."""
    for value in request.params.values():
        for who, session in world.sessions.items():
            if value == session:
                return who
        for who, subject in world.subjects.items():
            if value == subject and request.route.path.startswith("/customers/"):
                return who
    if request.route.path == "/sessions" and isinstance(request.body, dict):
        for who, subject in world.subjects.items():
            if request.body.get("customer_id") == subject:
                return who
    return None


def test_500_generated_requests_never_5xx_and_never_wrongly_allowed(world: World) -> None:
    seen: dict[int, int] = {}

    @settings(max_examples=500, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(request=requests(world))
    def check(request: Request) -> None:
        path = request.route.path
        for name, value in request.params.items():
            path = path.replace("{" + name + "}", value)
        token = world.tokens[request.caller]
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        response = world.stage.rest.request(request.route.method, path, headers=headers, body=request.body)
        seen[response.status] = seen.get(response.status, 0) + 1
        role = world.role[request.caller]
        context = (
            f"{request.caller} {request.route.method} {path} {request.body!r}: {response.status} {response.body[:200]}"
        )
        assert response.status < 500, context
        if role is None:
            assert response.status in (401, 403), context
            return
        if role not in request.route.roles:
            assert response.status == 403, context
            return
        owner = _owner(world, request)
        if role == "customer" and owner is not None and owner != request.caller:
            assert not 200 <= response.status < 300, context
        if role == "agent" and path.startswith("/sessions/"):
            assert not 200 <= response.status < 300, context  # the agent serves no handoff here

    check()
    assert sum(seen.values()) >= 500
    # The generated mix reached handlers, not only the gateway's refusals
    assert any(200 <= status < 300 for status in seen), seen
    assert any(400 <= status < 500 and status not in (401, 403) for status in seen), seen
    assert world.stage.rest.invalid_requests == []
    assert [(c.handler, repr(c.error)) for c in world.stage.calls.calls if c.error is not None and not refusal(c)] == []
