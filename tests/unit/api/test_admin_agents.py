"""The agent registry: admin routes (lambdas.api.admin_agents) and the agent routes that depend on
it, driven with API Gateway events on moto; the store's registry operations underneath."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from embedded.events import Api, authorizer_context, lambda_context, rest_proxy_event
from embedded.services.dynamodb import atomic_requests, create_sessions_table
from lambdas.api import admin_agents
from lambdas.api import agent as agent_api
from lambdas.shared import env as lambda_env
from lambdas.shared.errors import AgentBusy, AgentExists, AgentRetired, AgentUnavailable, InvalidCursor
from lambdas.shared.records import AgentStatus
from lambdas.shared.schema import AVAILABLE_AGENTS
from lambdas.shared.store import DynamoSessionStore

TABLE = "agent-registry"
API = Api(stage="prod")
CONTEXT = lambda_context("agent-registry")
#: Agent ids are identity-provider subjects: a Cognito ``sub`` is a UUID.
AIKO = "5f0c3a52-7c1e-4d0b-9a55-0d6f1b7e2c11"
BEN = "8b1d2e33-0a4f-4c6e-b2d7-3e9a5c6f7d80"


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> Iterator[DynamoSessionStore]:
    with mock_aws(), atomic_requests():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_sessions_table(client, TABLE)
        monkeypatch.setenv("TABLE_NAME", TABLE)
        lambda_env.reset()
        yield DynamoSessionStore(TABLE, client=client)
        lambda_env.reset()


def admin(
    method: str,
    resource: str,
    path: str,
    body: Any = None,
    *,
    query: dict[str, str] | None = None,
    role: str = "admin",
    sub: str = "root",
    headers: dict[str, str] | None = None,
) -> tuple[int, Any]:
    """An admin route as API Gateway sends it (after the authorizer)."""
    params = {"agent_id": path.split("/")[3]} if "{agent_id}" in resource else None
    event = rest_proxy_event(
        method,
        resource,
        path,
        api=API,
        path_parameters=params,
        query=query,
        headers={"Content-Type": "application/json", **(headers or {})},
        body=None if body is None else body if isinstance(body, str) else json.dumps(body),
        authorizer=authorizer_context(sub, role=role, sub=sub),
        request_id="req-registry",
    )
    response = admin_agents.handler(event, CONTEXT)
    return int(response["statusCode"]), json.loads(response["body"])


def register(agent_id: str = AIKO, skills: tuple[str, ...] = ("billing",), **extra: Any) -> tuple[int, Any]:
    body = {"agent_id": agent_id, "display_name": extra.pop("display_name", "Aiko"), "skills": list(skills), **extra}
    return admin("POST", "/admin/agents", "/admin/agents", body)


def presence(status: str, *, sub: str = AIKO, body: Any = None) -> tuple[int, Any]:
    event = rest_proxy_event(
        "POST",
        "/agents/me/presence",
        "/agents/me/presence",
        api=API,
        headers={"Content-Type": "application/json"},
        body=json.dumps(body if body is not None else {"status": status}),
        authorizer=authorizer_context(sub, role="agent", sub=sub),
    )
    response = agent_api.handler(event, CONTEXT)
    return int(response["statusCode"]), json.loads(response["body"])


def index_rows(store: DynamoSessionStore, skill: str) -> list[str]:
    resp = store.table.client.query(
        TableName=TABLE,
        IndexName=AVAILABLE_AGENTS.name,
        KeyConditionExpression="#s = :s",
        ExpressionAttributeNames={"#s": AVAILABLE_AGENTS.partition_key},
        ExpressionAttributeValues={":s": {"S": skill}},
    )
    return [item["agent_id"]["S"] for item in resp["Items"]]


# ------------------------------------------------------------------ register


def test_register_creates_an_offline_agent_outside_the_available_index(store: DynamoSessionStore) -> None:
    status, body = register(skills=("billing", "manga"), is_manager=True)

    assert status == 201
    assert body == {
        "agent_id": AIKO,
        "display_name": "Aiko",
        "skills": ["billing", "manga"],
        "is_manager": True,
        "status": "offline",
        "current_session_id": None,
        "available_since": None,
        "updated_at": body["updated_at"],
        "retired_at": None,
    }
    agent = store.agents.get_agent(AIKO)
    assert agent is not None
    assert agent.is_manager
    assert agent.ttl is None
    assert index_rows(store, "billing") == []  # only the agent's own presence makes it available


def test_register_twice_is_409_and_changes_nothing(store: DynamoSessionStore) -> None:
    assert register()[0] == 201
    before = store.agents.get_agent(AIKO)

    status, body = register(skills=("manga",), display_name="Someone else")

    assert status == 409
    assert body["error"]["code"] == "AgentExists"
    assert AIKO in body["error"]["message"]
    assert store.agents.get_agent(AIKO) == before


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"display_name": "A", "skills": ["billing"]}, "body.agent_id is required"),
        ({"agent_id": "has space", "display_name": "A", "skills": ["billing"]}, "body.agent_id must match"),
        ({"agent_id": "a" * 65, "display_name": "A", "skills": ["billing"]}, "body.agent_id must have at most 64"),
        ({"agent_id": AIKO, "display_name": "", "skills": ["billing"]}, "body.display_name must be 1 to 100"),
        ({"agent_id": AIKO, "display_name": "A\n", "skills": ["billing"]}, "body.display_name must be 1 to 100"),
        ({"agent_id": AIKO, "display_name": "A", "skills": []}, "body.skills must have at least 1 items"),
        ({"agent_id": AIKO, "display_name": "A", "skills": ["bill ing"]}, "body.skills[0] must match"),
        ({"agent_id": AIKO, "display_name": "A", "skills": ["x", "x"]}, "body.skills must not repeat an item"),
        ({"agent_id": AIKO, "display_name": "A", "skills": "billing"}, "body.skills must be of type array"),
        ({"agent_id": AIKO, "display_name": "A", "skills": ["b"] * 41}, "body.skills must have at most 40 items"),
        ({"agent_id": AIKO, "display_name": "A", "skills": ["b"], "is_manager": "yes"}, "body.is_manager must be"),
        (
            {"agent_id": AIKO, "display_name": "A", "skills": ["b"], "status": "available"},
            "body has unknown properties: status",
        ),
        ("not json", "the body is not valid JSON"),
    ],
)
def test_fails_to_register_with_a_bad_body_naming_the_field(store: DynamoSessionStore, body: Any, field: str) -> None:
    status, answer = admin("POST", "/admin/agents", "/admin/agents", body)

    assert status == 400
    assert answer["error"]["code"] == "BAD_REQUEST_BODY"
    assert answer["error"]["message"].startswith(field), answer
    assert answer["error"]["request_id"] == "req-registry"
    assert store.agents.get_agent(AIKO) is None


@pytest.mark.parametrize("role", ["agent", "customer"])
def test_only_admins_reach_the_registry(store: DynamoSessionStore, role: str) -> None:
    for method, resource, path, body in (
        ("POST", "/admin/agents", "/admin/agents", {"agent_id": AIKO, "display_name": "A", "skills": ["b"]}),
        ("GET", "/admin/agents", "/admin/agents", None),
        ("GET", "/admin/agents/{agent_id}", f"/admin/agents/{AIKO}", None),
        ("PATCH", "/admin/agents/{agent_id}", f"/admin/agents/{AIKO}", {"skills": ["b"]}),
        ("POST", "/admin/agents/{agent_id}/retire", f"/admin/agents/{AIKO}/retire", None),
    ):
        status, answer = admin(method, resource, path, body, role=role, sub=AIKO)
        assert (status, answer["error"]["code"]) == (403, "Forbidden"), (method, path)
    assert store.agents.get_agent(AIKO) is None


# ------------------------------------------------------------------ read and list


def test_read_one_agent_and_404_for_an_unknown_one(store: DynamoSessionStore) -> None:
    register()

    assert admin("GET", "/admin/agents/{agent_id}", f"/admin/agents/{AIKO}")[1]["display_name"] == "Aiko"
    status, body = admin("GET", "/admin/agents/{agent_id}", f"/admin/agents/{BEN}")
    assert (status, body["error"]["code"]) == (404, "NotFound")
    status, body = admin("GET", "/admin/agents/{agent_id}", "/admin/agents/bad_id")
    assert (status, body["error"]["code"]) == (400, "BAD_REQUEST_PARAMETERS")
    assert body["error"]["message"].startswith("path.agent_id must match")


def test_listing_pages_through_every_agent_and_filters_by_status(store: DynamoSessionStore) -> None:
    # Given five agents, two of them available
    ids = sorted(str(uuid.uuid4()) for _ in range(5))
    for agent_id in ids:
        assert register(agent_id)[0] == 201
    for agent_id in ids[:2]:
        assert presence("available", sub=agent_id)[0] == 200

    # When an admin pages through them two at a time
    seen: list[str] = []
    cursor: str | None = None
    for _ in range(5):
        query = {"limit": "2", **({"cursor": cursor} if cursor else {})}
        status, page = admin("GET", "/admin/agents", "/admin/agents", query=query)
        assert status == 200
        seen += [agent["agent_id"] for agent in page["agents"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break

    # Then every agent comes exactly once, in id order, with its live status
    assert seen == ids
    status, available = admin("GET", "/admin/agents", "/admin/agents", query={"status": "available"})
    assert [a["agent_id"] for a in available["agents"]] == ids[:2]
    assert {a["status"] for a in available["agents"]} == {"available"}


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"limit": "0"}, "query.limit must be >= 1"),
        ({"limit": "many"}, "query.limit must be an integer"),
        ({"status": "asleep"}, "query.status must be one of"),
        ({"order": "desc"}, "query has unknown properties: order"),
    ],
)
def test_fails_to_list_with_bad_query_parameters(
    store: DynamoSessionStore, query: dict[str, str], message: str
) -> None:
    status, body = admin("GET", "/admin/agents", "/admin/agents", query=query)
    assert (status, body["error"]["code"]) == (400, "BAD_REQUEST_PARAMETERS")
    assert body["error"]["message"].startswith(message)


def test_a_cursor_of_another_listing_is_refused(store: DynamoSessionStore) -> None:
    # Given a real cursor of a session's turns
    session_id = store.sessions.create_session("alice").session_id
    for text in ("one", "two"):
        store.turns.add_turn(session_id, "user", text)
    turns_cursor = store.turns.list_turns(session_id, limit=1).next_cursor
    assert turns_cursor is not None

    # When it is used on the agent listing, it is refused as a parameter error
    status, body = admin("GET", "/admin/agents", "/admin/agents", query={"cursor": turns_cursor})

    assert (status, body["error"]["code"]) == (400, "BAD_REQUEST_PARAMETERS")
    assert body["error"]["message"].startswith("invalid cursor: it was issued for another listing")
    with pytest.raises(InvalidCursor):
        store.agents.list_agents(cursor="bm90LWEtY3Vyc29y")


# ------------------------------------------------------------------ update


def test_update_moves_an_available_agents_index_rows_to_its_new_skills(store: DynamoSessionStore) -> None:
    register(skills=("billing",))
    presence("available")
    assert index_rows(store, "billing") == [AIKO]

    status, body = admin(
        "PATCH", "/admin/agents/{agent_id}", f"/admin/agents/{AIKO}", {"skills": ["manga"], "display_name": "Aiko S."}
    )

    assert status == 200
    assert (body["skills"], body["display_name"], body["status"]) == (["manga"], "Aiko S.", "available")
    assert index_rows(store, "billing") == []
    assert index_rows(store, "manga") == [AIKO]


def test_fails_to_update_with_an_empty_body(store: DynamoSessionStore) -> None:
    register()
    status, body = admin("PATCH", "/admin/agents/{agent_id}", f"/admin/agents/{AIKO}", {})
    assert (status, body["error"]["code"]) == (400, "BAD_REQUEST_BODY")
    assert body["error"]["message"] == "body must have at least 1 properties"


# ------------------------------------------------------------------ retire


def test_retire_takes_the_agent_out_of_the_index_and_later_presence_is_403(
    store: DynamoSessionStore,
) -> None:
    # Given an available agent
    register(skills=("billing",))
    presence("available")

    # When an admin retires it
    status, body = admin("POST", "/admin/agents/{agent_id}/retire", f"/admin/agents/{AIKO}/retire")

    # Then it is retired and no longer offered any handoff
    assert status == 200
    assert body["status"] == "retired"
    assert body["retired_at"] is not None
    assert index_rows(store, "billing") == []
    assert store.agents.find_available_agent("billing") is None
    # And its own presence change is refused, saying why: the routes are closed to a retired agent
    status, answer = presence("available")
    assert status == 403
    assert "retired" in answer["error"]["message"]
    assert index_rows(store, "billing") == []
    # And so are a second retirement, an update and a new registration under the same id
    assert admin("POST", "/admin/agents/{agent_id}/retire", f"/admin/agents/{AIKO}/retire")[0] == 409
    assert admin("PATCH", "/admin/agents/{agent_id}", f"/admin/agents/{AIKO}", {"skills": ["x"]})[0] == 409
    assert register()[0] == 409


def test_retire_is_refused_while_the_agent_holds_a_handoff(store: DynamoSessionStore) -> None:
    # Given an agent reserved for a session (the workflow's reservation)
    register(skills=("billing",))
    presence("available")
    session_id = store.sessions.create_session("alice").session_id
    store.agents.reserve_agent(AIKO, session_id)

    status, body = admin("POST", "/admin/agents/{agent_id}/retire", f"/admin/agents/{AIKO}/retire")

    assert (status, body["error"]["code"]) == (409, "AgentBusy")
    assert session_id in body["error"]["message"]
    assert "close" in body["error"]["message"]
    agent = store.agents.get_agent(AIKO)
    assert agent is not None
    assert agent.status == AgentStatus.BUSY


def test_retire_loses_to_a_reservation_that_lands_after_the_read(
    store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an available agent, reserved by the workflow between the retire's read and its write
    register(skills=("billing",))
    presence("available")
    session_id = store.sessions.create_session("alice").session_id
    read = store.agents.get_agent

    def read_then_reserve(agent_id: str) -> Any:
        current = read(agent_id)
        monkeypatch.setattr(store.agents, "get_agent", read)
        store.agents.reserve_agent(agent_id, session_id)
        return current

    monkeypatch.setattr(store.agents, "get_agent", read_then_reserve)

    # Then the retirement fails instead of retiring an agent in the middle of a handoff
    with pytest.raises(AgentUnavailable):
        store.agents.retire_agent(AIKO)
    agent = read(AIKO)
    assert agent is not None
    assert agent.status == AgentStatus.BUSY
    assert agent.current_session_id == session_id


# ------------------------------------------------------------------ the agent's own routes


def test_an_unregistered_caller_gets_404_from_presence_and_accept(store: DynamoSessionStore) -> None:
    status, body = presence("available", sub=BEN)
    assert (status, body["error"]["code"]) == (404, "NotFound")
    assert "not registered" in body["error"]["message"]
    assert "/admin/agents" in body["error"]["message"]
    assert store.agents.get_agent(BEN) is None


def test_presence_changes_only_the_callers_own_agent(store: DynamoSessionStore) -> None:
    # Given two registered agents, both offline
    register(AIKO)
    register(BEN, display_name="Ben")

    # When Aiko goes available, and tries to name Ben in the body
    assert presence("available", sub=AIKO)[0] == 200
    status, body = presence("", sub=AIKO, body={"status": "away", "agent_id": BEN})

    # Then only Aiko moved; naming another agent is refused by the schema
    assert (status, body["error"]["code"]) == (400, "BAD_REQUEST_BODY")
    assert "agent_id" in body["error"]["message"]
    assert index_rows(store, "billing") == [AIKO]
    ben = store.agents.get_agent(BEN)
    assert ben is not None
    assert ben.status == AgentStatus.OFFLINE


# ------------------------------------------------------------------ store


def test_store_register_refuses_a_taken_id_and_retire_a_busy_agent(store: DynamoSessionStore) -> None:
    store.agents.register_agent(AIKO, name="Aiko", skills=("billing",))
    with pytest.raises(AgentExists):
        store.agents.register_agent(AIKO, name="Aiko", skills=("billing",))
    store.agents.set_presence(AIKO, "available")
    store.agents.reserve_agent(AIKO, str(uuid.uuid4()))
    with pytest.raises(AgentBusy):
        store.agents.retire_agent(AIKO)
    store.agents.release_agent(AIKO)
    retired = store.agents.retire_agent(AIKO)
    assert retired.status == AgentStatus.RETIRED
    with pytest.raises(AgentRetired):
        store.agents.set_presence(AIKO, "available")
    with pytest.raises(AgentUnavailable):
        store.agents.reserve_agent(AIKO, str(uuid.uuid4()))


@pytest.mark.usefixtures("store")
def test_a_retried_registration_with_its_idempotency_key_answers_the_first_201() -> None:
    body = {"agent_id": "a-key", "display_name": "Keyed", "skills": ["billing"]}
    key = {"Idempotency-Key": "reg-1"}
    first = admin("POST", "/admin/agents", "/admin/agents", body, headers=key)
    again = admin("POST", "/admin/agents", "/admin/agents", body, headers=key)
    plain = admin("POST", "/admin/agents", "/admin/agents", body)
    assert (first[0], again[0], plain[0]) == (201, 201, 409)
    assert again[1] == first[1]
