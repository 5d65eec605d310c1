"""Session Lambda on moto, driven by API Gateway REST proxy events shaped as AWS sends them."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from embedded.events import DEFAULT_API, authorizer_context, lambda_context, rest_proxy_event
from lambdas.api import rest
from lambdas.shared import env, keys, waits
from lambdas.shared.records import Agent, AgentStatus, HandoffStatus, SessionStatus
from lambdas.shared.serialize import marshal_item
from lambdas.shared.store import DynamoSessionStore
from lambdas.usecases import customer_leaves
from lambdas.usecases.assign_agent import begin_handoff

ORIGIN = "http://localhost:3000"
Invoke = Callable[..., dict[str, Any]]


CONTEXT = lambda_context("SessionApi", aws_request_id="lambda-request-1")


def rest_event(
    method: str,
    resource: str,
    path: str,
    *,
    sub: str | None = "alice",
    role: str | None = "customer",
    headers: dict[str, str] | None = None,
    body: str | None = None,
    request_id: str = "req-1234",
    **kw: Any,
) -> dict[str, Any]:
    """A REST proxy event from a browser at ORIGIN, after the TOKEN authorizer let ``sub`` in as ``role``."""
    context = {key: value for key, value in (("sub", sub), ("role", role)) if value is not None}
    all_headers = {
        "Accept": "application/json",
        "Authorization": "Bearer x.y.z",
        "Host": DEFAULT_API.domain,
        "Origin": ORIGIN,
        "X-Forwarded-Proto": "https",
        **({"Content-Type": "application/json"} if body is not None else {}),
        **(headers or {}),
    }
    authorizer = authorizer_context(sub, **context) if context else None
    return rest_proxy_event(
        method, resource, path, headers=all_headers, body=body, authorizer=authorizer, request_id=request_id, **kw
    )


@pytest.fixture
def api(table_name: str, clock: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Invoke]:
    """Invoke the handler; the store runs on the moto table with the fake clock."""
    monkeypatch.setenv("TABLE_NAME", table_name)
    monkeypatch.setenv("CORS_ALLOWED_ORIGINS", f"{ORIGIN},https://app.example.com")
    monkeypatch.delenv("STATE_MACHINE_ARNS", raising=False)
    env.reset()
    fixed_store = DynamoSessionStore(table_name, client=boto3.client("dynamodb"), clock=clock)
    monkeypatch.setattr(rest, "store", lambda: fixed_store)

    def invoke(method: str, resource: str, path: str, **kw: Any) -> dict[str, Any]:
        response = rest.handler(rest_event(method, resource, path, **kw), CONTEXT)
        response["json"] = json.loads(response["body"]) if response.get("body") else None
        return response

    yield invoke
    env.reset()


@pytest.fixture
def db(api: Invoke) -> DynamoSessionStore:
    return rest.store()


def _create(api: Invoke, customer: str = "alice", **kw: Any) -> str:
    response = api("POST", "/sessions", "/sessions", sub=customer, body=json.dumps({"customer_id": customer}), **kw)
    assert response["statusCode"] == 201, response["body"]
    return str(response["json"]["session_id"])


def _session_routes(sid: str) -> list[tuple[str, str, str, dict[str, Any]]]:
    return [
        ("GET", "/sessions/{id}", f"/sessions/{sid}", {}),
        ("GET", "/sessions/{id}/turns", f"/sessions/{sid}/turns", {}),
        ("DELETE", "/sessions/{id}", f"/sessions/{sid}", {}),
    ]


# ---------------------------------------------------------------- POST /sessions


def test_create_session_answers_201_with_the_new_session(api: Invoke) -> None:
    body = {"customer_id": "alice", "metadata": {"source": "web", "language": "en-US"}}
    response = api("POST", "/sessions", "/sessions", body=json.dumps(body))
    assert response["statusCode"] == 201
    session = response["json"]
    assert session["customer_id"] == "alice"
    assert session["status"] == "active"
    assert session["metadata"] == {"source": "web", "language": "en-US"}
    uuid.UUID(session["session_id"])
    assert not {"PK", "SK", "ttl"} & set(session)
    assert response["multiValueHeaders"]["Access-Control-Allow-Origin"] == [ORIGIN]


@pytest.mark.parametrize(
    "body",
    [
        None,
        "",
        "not json",
        "[]",
        json.dumps({}),
        json.dumps({"customer_id": "bad id!"}),
        json.dumps({"customer_id": "x" * 65}),
        json.dumps({"customer_id": "alice\n"}),
        json.dumps({"customer_id": "alice", "extra": 1}),
        json.dumps({"customer_id": "alice", "metadata": {"source": "fax"}}),
        json.dumps({"customer_id": "alice", "metadata": {"language": "english"}}),
        json.dumps({"customer_id": "alice", "metadata": {"colour": "red"}}),
        json.dumps({"customer_id": "alice", "metadata": "web"}),
        json.dumps({"customer_id": "alice", "pad": "x" * 9000}),
    ],
)
def test_fails_to_create_with_an_invalid_body(api: Invoke, body: str | None) -> None:
    response = api("POST", "/sessions", "/sessions", body=body)
    assert response["statusCode"] == 400
    assert response["json"]["error"]["code"] == "BAD_REQUEST_BODY"  # as API Gateway's own validator
    assert response["json"]["error"]["request_id"] == "req-1234"


def test_fails_to_create_a_session_for_another_customer(api: Invoke) -> None:
    response = api("POST", "/sessions", "/sessions", body=json.dumps({"customer_id": "bob"}))
    assert response["statusCode"] == 403


def test_admin_creates_a_session_for_any_customer(api: Invoke) -> None:
    response = api("POST", "/sessions", "/sessions", sub="ops", role="admin", body=json.dumps({"customer_id": "bob"}))
    assert response["statusCode"] == 201
    assert response["json"]["customer_id"] == "bob"


@pytest.mark.parametrize(("sub", "role"), [("carol", "agent"), (None, None), ("alice", None), (None, "admin")])
def test_fails_without_an_allowed_identity(api: Invoke, sub: str | None, role: str | None) -> None:
    response = api("POST", "/sessions", "/sessions", sub=sub, role=role, body=json.dumps({"customer_id": "alice"}))
    assert response["statusCode"] == 403
    assert response["json"]["error"]["code"] == "Forbidden"


# ---------------------------------------------------------------- GET /sessions/{id}


def test_get_own_session(api: Invoke) -> None:
    sid = _create(api)
    response = api("GET", "/sessions/{id}", f"/sessions/{sid}", path_parameters={"id": sid})
    assert response["statusCode"] == 200
    assert response["json"]["session_id"] == sid


def test_get_missing_session_answers_404(api: Invoke) -> None:
    sid = str(uuid.uuid4())
    response = api("GET", "/sessions/{id}", f"/sessions/{sid}", path_parameters={"id": sid})
    assert response["statusCode"] == 404
    assert response["json"]["error"]["code"] == "NotFound"


@pytest.mark.parametrize(
    "bad",
    ["nope", "123", "70C61BA9-27A6-4E38-B569-F58620DBB9B5", "bd2c32d0-a952-4759-a191-826ebb5a7bfd0"],
    ids=["word", "digits", "uppercase-uuid", "uuid-with-extra-char"],
)
def test_fails_on_a_session_id_that_is_not_a_uuid(api: Invoke, bad: str) -> None:
    response = api("GET", "/sessions/{id}", f"/sessions/{bad}", path_parameters={"id": bad})
    assert response["statusCode"] == 400


def test_agent_reads_only_sessions_handed_off_to_them(api: Invoke, db: DynamoSessionStore) -> None:
    # Given a session handed off to agent carol
    sid = _create(api)
    path = f"/sessions/{sid}"
    assert api("GET", "/sessions/{id}", path, sub="carol", role="agent")["statusCode"] == 404
    db.handoffs.put_handoff(sid, reason="billing", agent_id="carol", status="assigned")
    # When carol and dave read it / Then only carol sees it, turns included
    assert api("GET", "/sessions/{id}", path, sub="carol", role="agent")["statusCode"] == 200
    assert api("GET", "/sessions/{id}/turns", f"{path}/turns", sub="carol", role="agent")["statusCode"] == 200
    assert api("GET", "/sessions/{id}", path, sub="dave", role="agent")["statusCode"] == 404
    # And an agent may never delete it
    assert api("DELETE", "/sessions/{id}", path, sub="carol", role="agent")["statusCode"] == 403


def test_an_agent_whose_handoff_ended_is_told_so_and_a_stranger_is_not(api: Invoke, db: DynamoSessionStore) -> None:
    # Given a session carol served until her handoff was completed
    sid = _create(api)
    path = f"/sessions/{sid}"
    handoff = db.handoffs.put_handoff(sid, reason="billing", agent_id="carol", status="assigned")
    db.handoffs.update_handoff(sid, handoff.handoff_id, status="completed")
    # When carol and dave read it / Then carol gets 403 (her access ended), dave 404 (never his)
    for route, resource in (("/sessions/{id}", path), ("/sessions/{id}/turns", f"{path}/turns")):
        assert api("GET", route, resource, sub="carol", role="agent")["statusCode"] == 403
        assert api("GET", route, resource, sub="dave", role="agent")["statusCode"] == 404


def test_an_archived_session_answers_with_its_archive_until_its_ttl_then_404(
    api: Invoke, db: DynamoSessionStore
) -> None:
    # Given a session the cleanup archived: its turns are gone, its META says where they went
    sid = _create(api)
    db.turns.add_turn(sid, "user", "Is volume 3 out?")
    db.sessions.update_status(sid, "disconnected")
    meta_before = db.table.get(keys.session_key(sid))
    assert meta_before is not None
    db.sessions.delete_session_items(sid)
    db.sessions.update_status(sid, "archived", archive_key=f"sessions/{sid}.jsonl")
    path = f"/sessions/{sid}"
    # When its customer reads it / Then a clear answer, not a 404: archived, and the archive's key
    response = api("GET", "/sessions/{id}", path)
    assert response["statusCode"] == 200
    assert (response["json"]["status"], response["json"]["archive_key"]) == ("archived", f"sessions/{sid}.jsonl")
    turns = api("GET", "/sessions/{id}/turns", f"{path}/turns")
    assert (turns["statusCode"], turns["json"]["turns"]) == (200, [])
    # And archiving did not extend the META's life: it still expires at the session's own TTL
    meta = db.table.get(keys.session_key(sid))
    assert meta is not None
    assert meta["ttl"] == meta_before["ttl"]
    # When TTL removes the META / Then the session is unknown (404), as one that never existed
    db.table.client.delete_item(TableName=db.table.table_name, Key=marshal_item(keys.session_key(sid)))
    assert api("GET", "/sessions/{id}", path)["statusCode"] == 404


# ---------------------------------------------------------------- ownership across all routes


@pytest.mark.parametrize("route_index", range(3))
def test_customer_never_reaches_another_customers_session(api: Invoke, route_index: int) -> None:
    # Given bob's session
    sid = _create(api, "bob")
    method, resource, path, kw = _session_routes(sid)[route_index]
    # When alice addresses it / Then it does not exist for her, and nothing changed
    response = api(method, resource, path, sub="alice", **kw)
    assert response["statusCode"] == 404
    assert "bob" not in response["body"]
    own = api("GET", "/sessions/{id}", f"/sessions/{sid}", sub="bob")
    assert own["json"]["status"] == "active"


def test_customer_never_lists_another_customer(api: Invoke) -> None:
    _create(api, "bob")
    response = api("GET", "/customers/{id}/sessions", "/customers/bob/sessions", sub="alice")
    assert response["statusCode"] == 404
    assert "session_id" not in response["body"]


def test_admin_reaches_every_session(api: Invoke) -> None:
    sid = _create(api, "bob")
    for method, resource, path, kw in _session_routes(sid):
        assert api(method, resource, path, sub="ops", role="admin", **kw)["statusCode"] in (200, 202)
    listing = api("GET", "/customers/{id}/sessions", "/customers/bob/sessions", sub="ops", role="admin")
    assert [s["session_id"] for s in listing["json"]["sessions"]] == [sid]


# ---------------------------------------------------------------- turns and pagination


def test_turns_page_newest_first_in_chronological_order(api: Invoke, db: DynamoSessionStore) -> None:
    # Given 25 turns
    sid = _create(api)
    for n in range(1, 26):
        db.turns.add_turn(sid, "user", f"message {n}")
    # When the client pages with limit 10
    pages: list[list[int]] = []
    cursor = None
    while True:
        query = {"limit": "10", **({"cursor": cursor} if cursor else {})}
        response = api("GET", "/sessions/{id}/turns", f"/sessions/{sid}/turns", query=query)
        assert response["statusCode"] == 200
        pages.append([t["turn_number"] for t in response["json"]["turns"]])
        cursor = response["json"]["next_cursor"]
        if cursor is None:
            break
    # Then the newest come first, each page in chronological order, nothing lost or repeated
    assert pages == [list(range(16, 26)), list(range(6, 16)), list(range(1, 6))]
    first = api("GET", "/sessions/{id}/turns", f"/sessions/{sid}/turns")
    assert [t["content"] for t in first["json"]["turns"]][-1] == "message 25"
    assert len(first["json"]["turns"]) == 20  # the default limit


@pytest.mark.parametrize(
    "query",
    [{"limit": "0"}, {"limit": "101"}, {"limit": "ten"}, {"limit": "1.5"}, {"cursor": "garbage"}, {"other": "1"}],
)
def test_fails_on_bad_turn_queries(api: Invoke, query: dict[str, str]) -> None:
    sid = _create(api)
    response = api("GET", "/sessions/{id}/turns", f"/sessions/{sid}/turns", query=query)
    assert response["statusCode"] == 400


def test_fails_on_a_cursor_of_another_session(api: Invoke, db: DynamoSessionStore) -> None:
    # Given a cursor minted for alice's other session
    first, second = _create(api), _create(api)
    for n in range(3):
        db.turns.add_turn(first, "user", f"m{n}")
    cursor = api("GET", "/sessions/{id}/turns", f"/sessions/{first}/turns", query={"limit": "1"})["json"]["next_cursor"]
    # When it is used on the second / Then it is refused
    response = api("GET", "/sessions/{id}/turns", f"/sessions/{second}/turns", query={"cursor": cursor})
    assert response["statusCode"] == 400


def test_customer_listing_pages_newest_first(api: Invoke, clock: Any) -> None:
    created = []
    for _ in range(5):
        created.append(_create(api))
        clock.advance(10)
    seen: list[str] = []
    cursor = None
    while True:
        query = {"limit": "2", **({"cursor": cursor} if cursor else {})}
        response = api("GET", "/customers/{id}/sessions", "/customers/alice/sessions", query=query)
        assert response["statusCode"] == 200
        assert len(response["json"]["sessions"]) <= 2
        seen += [s["session_id"] for s in response["json"]["sessions"]]
        cursor = response["json"]["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(created))
    assert (
        api("GET", "/customers/{id}/sessions", "/customers/alice/sessions", query={"limit": "51"})["statusCode"] == 400
    )


# ---------------------------------------------------------------- sessions by status


def _by_status(api: Invoke, role: str = "admin", **query: str) -> dict[str, Any]:
    return api("GET", "/admin/sessions", "/admin/sessions", sub=f"{role}-1", role=role, query=query or None)


def test_admin_lists_a_status_newest_first_over_several_pages(api: Invoke, clock: Any) -> None:
    # Given five active sessions created ten seconds apart
    created = []
    for n in range(5):
        created.append(_create(api, f"cust-{n}", role="admin"))
        clock.advance(10)
    # When an admin lists the active ones two at a time
    seen: list[str] = []
    pages = 0
    cursor = None
    while True:
        response = _by_status(api, status="active", limit="2", **({"cursor": cursor} if cursor else {}))
        assert response["statusCode"] == 200, response["body"]
        pages += 1
        seen += [s["session_id"] for s in response["json"]["sessions"]]
        cursor = response["json"]["next_cursor"]
        if cursor is None:
            break
    # Then three pages hold them newest first, each with what the listing projects
    assert (pages, seen) == (3, list(reversed(created)))
    first = _by_status(api, status="active", limit="1")["json"]
    assert first["status"] == "active"
    assert set(first["sessions"][0]) == {"session_id", "customer_id", "status", "created_at", "status_since"}


def test_a_deleted_session_moves_from_the_active_listing_to_the_deleted_one(api: Invoke) -> None:
    kept, deleted = _create(api), _create(api)
    assert api("DELETE", "/sessions/{id}", f"/sessions/{deleted}")["statusCode"] == 202
    assert [s["session_id"] for s in _by_status(api, status="active")["json"]["sessions"]] == [kept]
    listed = _by_status(api, status="deleted")["json"]["sessions"]
    assert [(s["session_id"], s["status"]) for s in listed] == [(deleted, "deleted")]


def test_an_agent_lists_the_sessions_in_handoff(api: Invoke, db: DynamoSessionStore) -> None:
    sid = _create(api)
    _create(api)
    db.sessions.update_status(sid, "handoff")
    response = _by_status(api, "agent", status="handoff")
    assert response["statusCode"] == 200, response["body"]
    assert [s["session_id"] for s in response["json"]["sessions"]] == [sid]


@pytest.mark.parametrize("status", ["active", "disconnected", "archived", "deleted"])
def test_an_agent_listing_any_other_status_is_403_and_told_why(api: Invoke, status: str) -> None:
    _create(api)
    response = _by_status(api, "agent", status=status)
    assert response["statusCode"] == 403
    assert response["json"]["error"]["message"] == "agents may list only sessions in status handoff"


@pytest.mark.parametrize("status", ["handoff", "active"])
def test_a_customer_lists_no_status_at_all(api: Invoke, status: str) -> None:
    _create(api)
    response = _by_status(api, "customer", status=status)
    assert (response["statusCode"], response["json"]["error"]["code"]) == (403, "Forbidden")


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({}, "query.status is required"),
        ({"status": "paused"}, "query.status must be one of active, handoff, disconnected, archived, deleted"),
        ({"status": "active", "limit": "0"}, "query.limit must be >= 1"),
        ({"status": "active", "limit": "101"}, "query.limit must be <= 100"),
        ({"status": "active", "limit": "ten"}, "query.limit must be an integer"),
        ({"status": "active", "cursor": "garbage"}, "invalid cursor: the cursor is malformed"),
        ({"status": "active", "other": "1"}, "query has unknown properties: other"),
    ],
)
def test_fails_on_bad_status_queries_naming_the_parameter(api: Invoke, query: dict[str, str], message: str) -> None:
    response = _by_status(api, **query)
    assert (response["statusCode"], response["json"]["error"]["code"]) == (400, "BAD_REQUEST_PARAMETERS")
    assert response["json"]["error"]["message"].startswith(message)


def test_fails_on_a_cursor_of_another_status(api: Invoke, db: DynamoSessionStore) -> None:
    for _ in range(2):
        db.sessions.update_status(_create(api), "handoff")
        _create(api)
    cursor = _by_status(api, status="handoff", limit="1")["json"]["next_cursor"]
    response = _by_status(api, status="active", cursor=cursor)
    assert response["statusCode"] == 400
    assert "cursor" in response["json"]["error"]["message"]


# ---------------------------------------------------------------- DELETE


def test_delete_is_a_soft_delete_then_conflicts(api: Invoke) -> None:
    sid = _create(api)
    response = api("DELETE", "/sessions/{id}", f"/sessions/{sid}")
    assert response["statusCode"] == 202
    assert response["json"] == {"session_id": sid, "status": "deleted"}
    assert api("GET", "/sessions/{id}", f"/sessions/{sid}")["json"]["status"] == "deleted"
    again = api("DELETE", "/sessions/{id}", f"/sessions/{sid}")
    assert again["statusCode"] == 409
    assert again["json"]["error"]["code"] == "InvalidTransition"


def test_deleting_a_deleted_session_says_deleted_in_plain_words(api: Invoke) -> None:
    sid = _create(api)
    api("DELETE", "/sessions/{id}", f"/sessions/{sid}")
    message = api("DELETE", "/sessions/{id}", f"/sessions/{sid}")["json"]["error"]["message"]
    assert "'deleted' to 'deleted'" in message
    assert "SessionStatus" not in message
    assert "<" not in message


# ---------------------------------------------------------------- executions


@pytest.fixture
def executions(api: Invoke, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Two moto state machines, only the first exposed; an execution of each started by alice."""
    client = boto3.client("stepfunctions")
    definition = json.dumps({"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}})
    role = "arn:aws:iam::123456789012:role/sfn"
    exposed = client.create_state_machine(name="Handoff", definition=definition, roleArn=role)["stateMachineArn"]
    hidden = client.create_state_machine(name="Other", definition=definition, roleArn=role)["stateMachineArn"]
    payload = json.dumps({"session_id": "s", "requested_by": "alice", "role": "customer"})
    monkeypatch.setenv("STATE_MACHINE_ARNS", exposed)
    env.reset()
    return {
        "mine": client.start_execution(stateMachineArn=exposed, name="k1", input=payload)["executionArn"],
        "hidden": client.start_execution(stateMachineArn=hidden, name="k1", input=payload)["executionArn"],
        "missing": exposed.replace(":stateMachine:", ":execution:") + ":nothing",
    }


def _describe(api: Invoke, arn: str, **kw: Any) -> dict[str, Any]:
    return api("GET", "/executions/{id}", f"/executions/{arn}", path_parameters={"id": arn}, **kw)


def test_starter_polls_their_execution(api: Invoke, executions: dict[str, str]) -> None:
    response = _describe(api, executions["mine"])
    assert response["statusCode"] == 200
    assert response["json"]["execution_arn"] == executions["mine"]
    assert response["json"]["status"] in ("RUNNING", "SUCCEEDED")
    assert "input" not in response["json"]


@pytest.mark.parametrize(("which", "sub"), [("mine", "bob"), ("hidden", "alice"), ("missing", "alice")])
def test_foreign_unexposed_or_missing_execution_answers_404(
    api: Invoke, executions: dict[str, str], which: str, sub: str
) -> None:
    assert _describe(api, executions[which], sub=sub)["statusCode"] == 404


def test_admin_polls_any_exposed_execution(api: Invoke, executions: dict[str, str]) -> None:
    assert _describe(api, executions["mine"], sub="ops", role="admin")["statusCode"] == 200
    assert _describe(api, executions["hidden"], sub="ops", role="admin")["statusCode"] == 404


def test_fails_on_an_execution_id_that_is_not_an_arn(api: Invoke) -> None:
    assert _describe(api, "not-an-arn")["statusCode"] == 400


class _Described:
    """A Step Functions client whose DescribeExecution answers ``answer`` (or raises ``error``)."""

    def __init__(self, answer: dict[str, Any] | None = None, error: str | None = None) -> None:
        self.answer, self.error = answer, error

    def describe_execution(self, executionArn: str) -> dict[str, Any]:
        if self.error:
            raise ClientError({"Error": {"Code": self.error, "Message": "refused"}}, "DescribeExecution")
        return {"executionArn": executionArn, **(self.answer or {})}


_FAILED = {
    "status": "FAILED",
    "startDate": datetime(2026, 11, 28, 9, 0, tzinfo=UTC),
    "stopDate": datetime(2026, 11, 28, 9, 5, tzinfo=UTC),
    "input": json.dumps({"session_id": "s", "requested_by": "alice"}),
    "output": json.dumps({"restored": False}),
    "error": "HandoffFailed",
    "cause": "arn:aws:lambda:us-east-1:123456789012:function:internal exploded",
}


@pytest.mark.parametrize(("sub", "role"), [("alice", "customer"), ("ops", "admin")])
def test_a_stopped_execution_shows_when_and_its_error_name_and_only_an_admin_its_output(
    api: Invoke, executions: dict[str, str], monkeypatch: pytest.MonkeyPatch, sub: str, role: str
) -> None:
    monkeypatch.setattr(rest, "sfn", lambda: _Described(_FAILED))
    body = _describe(api, executions["mine"], sub=sub, role=role)["json"]
    expected = {
        "execution_arn": executions["mine"],
        "status": "FAILED",
        "started_at": "2026-11-28T09:00:00+00:00",
        "stopped_at": "2026-11-28T09:05:00+00:00",
        "error": "HandoffFailed",
    }
    assert body == (expected | {"output": {"restored": False}} if role == "admin" else expected)


def test_a_succeeded_execution_names_no_error(
    api: Invoke, executions: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rest, "sfn", lambda: _Described(_FAILED | {"status": "SUCCEEDED"}))
    body = _describe(api, executions["mine"])["json"]
    assert body["status"] == "SUCCEEDED"
    assert "error" not in body


@pytest.mark.parametrize("code", ["ExecutionDoesNotExist", "InvalidArn"])
def test_an_execution_step_functions_cannot_find_or_parse_answers_404(
    api: Invoke, executions: dict[str, str], monkeypatch: pytest.MonkeyPatch, code: str
) -> None:
    monkeypatch.setattr(rest, "sfn", lambda: _Described(error=code))
    assert _describe(api, executions["mine"], sub="ops", role="admin")["statusCode"] == 404


def test_an_execution_step_functions_refuses_otherwise_is_not_called_missing(
    api: Invoke, executions: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rest, "sfn", lambda: _Described(error="AccessDeniedException"))
    assert _describe(api, executions["mine"], sub="ops", role="admin")["statusCode"] == 500


# ---------------------------------------------------------------- error map


def test_unexpected_error_answers_500_with_request_id_only(api: Invoke, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a store that fails with internals in its message
    def boom(*_: Any, **__: Any) -> None:
        raise RuntimeError("arn:aws:dynamodb:us-east-1:123456789012:table/secret-table exploded")

    monkeypatch.setattr(rest.store().sessions, "get_session", boom)
    sid = str(uuid.uuid4())
    # When / Then the caller sees 500, the request id, and nothing of the cause
    response = api("GET", "/sessions/{id}", f"/sessions/{sid}", request_id="req-boom")
    assert response["statusCode"] == 500
    assert response["json"] == {
        "error": {"code": "InternalError", "message": "internal error; quote the request id", "request_id": "req-boom"}
    }


def test_unknown_route_answers_404(api: Invoke) -> None:
    assert api("GET", "/nothing", "/nothing")["statusCode"] == 404
    assert api("PUT", "/sessions", "/sessions")["statusCode"] == 404


# ---------------------------------------------------------------- generated bad input

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12,
)
_bodies = st.one_of(
    st.text(max_size=200),
    _json_values.map(json.dumps),
    st.fixed_dictionaries(
        {"customer_id": st.text(max_size=70)},
        optional={"metadata": _json_values, "x": _json_values},
    ).map(json.dumps),
)
_segments = st.text(
    alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="/?#"), min_size=1, max_size=40
)
_queries = st.dictionaries(st.sampled_from(["limit", "cursor", "x"]), st.text(max_size=60), max_size=3)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=_bodies)
def test_generated_bodies_never_cause_a_5xx(api: Invoke, body: str) -> None:
    response = api("POST", "/sessions", "/sessions", body=body)
    assert response["statusCode"] in (201, 400, 403)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    segment=_segments,
    query=_queries,
    route=st.sampled_from(
        [
            ("GET", "/sessions/{id}", "/sessions/{}"),
            ("GET", "/sessions/{id}/turns", "/sessions/{}/turns"),
            ("DELETE", "/sessions/{id}", "/sessions/{}"),
            ("GET", "/customers/{id}/sessions", "/customers/{}/sessions"),
            ("GET", "/executions/{id}", "/executions/{}"),
            ("GET", "/admin/sessions", "/admin/sessions"),
            ("GET", "/{proxy+}", "/{}"),
        ]
    ),
    role=st.sampled_from(["customer", "agent", "admin", "root"]),
)
def test_generated_paths_and_queries_never_cause_a_5xx(
    api: Invoke, segment: str, query: dict[str, str], route: tuple[str, str, str], role: str
) -> None:
    method, resource, template = route
    response = api(method, resource, template.format(segment), query=query or None, role=role)
    assert response["statusCode"] < 500, response["body"]


# ---------------------------------------------------------------- Idempotency-Key


def _create_with_key(api: Invoke, key: str, *, customer: str = "alice", metadata: Any = None) -> dict[str, Any]:
    body: dict[str, Any] = {"customer_id": customer, **({"metadata": metadata} if metadata else {})}
    return api("POST", "/sessions", "/sessions", sub=customer, headers={"Idempotency-Key": key}, body=json.dumps(body))


def test_a_retried_create_with_its_idempotency_key_returns_the_same_session(
    api: Invoke, db: DynamoSessionStore
) -> None:
    # Given a create that reached the server, whose answer the client never saw
    first = _create_with_key(api, "create-1")
    # When the client retries with the same key and body
    again = _create_with_key(api, "create-1")
    # Then it gets the same 201 and session, and the customer has exactly one session
    assert (first["statusCode"], again["statusCode"]) == (201, 201)
    assert again["json"] == first["json"]
    assert len(db.sessions.list_customer_sessions("alice", limit=10).items) == 1


def test_the_same_key_with_another_body_is_409_and_creates_nothing(api: Invoke, db: DynamoSessionStore) -> None:
    assert _create_with_key(api, "create-1")["statusCode"] == 201
    other = _create_with_key(api, "create-1", metadata={"source": "mobile"})
    assert other["statusCode"] == 409
    assert other["json"]["error"]["code"] == "KeyReused"
    assert "Idempotency-Key was used for another POST /sessions request" in other["json"]["error"]["message"]
    assert len(db.sessions.list_customer_sessions("alice", limit=10).items) == 1


def test_keys_are_each_callers_own_and_a_new_key_is_a_new_session(api: Invoke, db: DynamoSessionStore) -> None:
    alice = _create_with_key(api, "k")
    bob = _create_with_key(api, "k", customer="bob")
    again = _create_with_key(api, "k-2")
    assert len({alice["json"]["session_id"], bob["json"]["session_id"], again["json"]["session_id"]}) == 3
    assert len(db.sessions.list_customer_sessions("alice", limit=10).items) == 2


def test_an_empty_idempotency_key_is_no_key(api: Invoke, db: DynamoSessionStore) -> None:
    assert _create_with_key(api, "")["statusCode"] == 201
    assert _create_with_key(api, "")["statusCode"] == 201
    assert len(db.sessions.list_customer_sessions("alice", limit=10).items) == 2


@pytest.mark.parametrize("key", [" ", "a" * 81, "a b", "ключ", "a\n"])
def test_a_malformed_idempotency_key_is_a_400_naming_the_header(api: Invoke, db: DynamoSessionStore, key: str) -> None:
    response = _create_with_key(api, key)
    assert response["statusCode"] == 400
    assert response["json"]["error"] == {
        "code": "BAD_REQUEST_PARAMETERS",
        "message": "header.Idempotency-Key must be 1-80 letters, digits, - or _",
        "request_id": response["json"]["error"]["request_id"],
    }
    assert db.sessions.list_customer_sessions("alice", limit=10).items == []


@pytest.mark.parametrize("number", [10**40, "1e200"], ids=["41 digits", "1e200"])
def test_a_customers_own_cursor_forged_with_a_huge_position_is_a_400(api: Invoke, clock: Any, number: Any) -> None:
    # Given a real cursor of alice's own listing
    for _ in range(3):
        _create(api)
        clock.advance(10)
    page = api("GET", "/customers/{id}/sessions", "/customers/alice/sessions", query={"limit": "1"})["json"]
    data = json.loads(base64.urlsafe_b64decode(page["next_cursor"] + "=" * (-len(page["next_cursor"]) % 4)))
    # When its numeric position is swapped for one DynamoDB cannot hold
    (name,) = [k for k, v in data["k"].items() if isinstance(v, int)]
    raw = json.dumps(data).replace(json.dumps(data["k"][name]), str(number), 1)
    forged = base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")
    response = api("GET", "/customers/{id}/sessions", "/customers/alice/sessions", query={"cursor": forged})
    # Then it is a bad cursor, not a 500 from the number's marshalling
    assert response["statusCode"] == 400, response
    assert "cursor" in response["json"]["error"]["message"], response


def test_deleting_a_session_during_its_handoff_ends_the_handoff_and_releases_the_agent(
    api: Invoke, db: DynamoSessionStore
) -> None:
    # Given alice's session, handed to agent-1 (reserved by the workflow)
    sid = _create(api)
    db.agents.put_agent(Agent(agent_id="agent-1", skills=("billing",), status=AgentStatus.AVAILABLE))
    db.agents.reserve_agent("agent-1", sid)
    begin_handoff(
        db,
        sid,
        handoff_id="h-1",
        agent_id="agent-1",
        reason="billing",
        priority="normal",
        execution_arn=None,
        system_text="handed over",
    )
    # When alice deletes the session
    response = api("DELETE", "/sessions/{id}", f"/sessions/{sid}")
    # Then the session is deleted, the handoff completed and the agent free, in one write
    assert (response["statusCode"], response["json"]) == (202, {"session_id": sid, "status": "deleted"})
    session, handoff, agent = (
        db.sessions.get_session(sid),
        db.handoffs.get_handoff(sid, "h-1"),
        db.agents.get_agent("agent-1"),
    )
    assert session is not None
    assert session.status == SessionStatus.DELETED
    assert handoff is not None
    assert handoff.status == HandoffStatus.COMPLETED
    assert agent is not None
    assert agent.status == AgentStatus.AVAILABLE
    # And the agent's access to the deleted conversation ended with the handoff
    turns = api("GET", "/sessions/{id}/turns", f"/sessions/{sid}/turns", sub="agent-1", role="agent")
    assert turns["statusCode"] in (403, 404)


def test_deleting_a_session_whose_handoff_waits_fails_the_handoff_and_clears_the_inbox(
    api: Invoke, db: DynamoSessionStore
) -> None:
    # Given alice's session, its handoff queued for any agent
    sid = _create(api)
    db.handoffs.queue_handoff(
        sid, handoff_id="h-1", reason="billing", priority="normal", execution_arn=None, task_token="no-such-token"
    )
    # When alice deletes the session / Then nobody is offered a customer who is gone
    assert api("DELETE", "/sessions/{id}", f"/sessions/{sid}")["statusCode"] == 202
    session, handoff = db.sessions.get_session(sid), db.handoffs.get_handoff(sid, "h-1")
    assert session is not None
    assert session.status == SessionStatus.DELETED
    assert handoff is not None
    assert handoff.status == HandoffStatus.FAILED
    assert db.table.get(keys.agent_inbox_key(keys.WAITING_INBOX, "h-1")) is None


# ---------------------------------------------------------------- POST /sessions/{id}/rewind


def _chatted(db: DynamoSessionStore, customer: str = "alice") -> str:
    """A session with two exchanges: the customer's questions are turns 1 and 3."""
    sid = db.sessions.create_session(customer).session_id
    for role, text in (("user", "Is volume 3 out?"), ("assistant", "Yes."), ("user", "And 4?"), ("assistant", "No.")):
        db.turns.add_turn(sid, role, text)
    return sid


def _rewind(api: Invoke, sid: str, body: Any, sub: str = "alice", **kw: Any) -> dict[str, Any]:
    path = f"/sessions/{sid}/rewind"
    return api("POST", "/sessions/{id}/rewind", path, sub=sub, body=json.dumps(body), **kw)


def test_a_rewind_with_new_text_takes_back_the_later_turns_and_answers_again(
    api: Invoke, db: DynamoSessionStore
) -> None:
    sid = _chatted(db)
    response = _rewind(api, sid, {"turn_number": 1, "text": "  Is volume 5 out?  "})
    assert response["statusCode"] == 200, response["body"]
    assert response["json"] == {
        "session_id": sid,
        "turn_number": 1,
        "removed_turns": [2, 3, 4],
        "removed_summaries": [],
        "reply": {"turn_number": 2, "text": "You said: Is volume 5 out?", "blocked": False},
    }
    assert [t.content for t in db.turns.list_turns(sid).items] == ["Is volume 5 out?", "You said: Is volume 5 out?"]


def test_a_rewind_retried_with_its_idempotency_key_answers_the_same_and_changes_nothing(
    api: Invoke, db: DynamoSessionStore
) -> None:
    sid = _chatted(db)
    first = _rewind(api, sid, {"turn_number": 3}, headers={"Idempotency-Key": "rw-1"})
    db.turns.add_turn(sid, "user", "Thanks")
    again = _rewind(api, sid, {"turn_number": 3}, headers={"Idempotency-Key": "rw-1"})
    assert again["statusCode"] == first["statusCode"] == 200
    assert again["json"] == first["json"]
    assert [t.turn_number for t in db.turns.list_turns(sid).items] == [1, 2, 3, 4, 5]


def test_a_rewind_during_a_handoff_is_409_and_changes_nothing(api: Invoke, db: DynamoSessionStore) -> None:
    sid = _chatted(db)
    db.sessions.update_status(sid, "handoff")
    response = _rewind(api, sid, {"turn_number": 1, "text": "changed"})
    assert response["statusCode"] == 409
    assert response["json"]["error"]["code"] == "SessionInHandoff"
    assert "support agent" in response["json"]["error"]["message"]
    assert len(db.turns.list_turns(sid).items) == 4


def test_another_customers_session_is_not_rewound(api: Invoke, db: DynamoSessionStore) -> None:
    sid = _chatted(db)
    response = _rewind(api, sid, {"turn_number": 1}, sub="mallory")
    assert response["statusCode"] == 404
    assert len(db.turns.list_turns(sid).items) == 4


@pytest.mark.parametrize("role", ["agent", "admin"])
def test_only_a_customer_rewinds(api: Invoke, db: DynamoSessionStore, role: str) -> None:
    sid = _chatted(db)
    assert _rewind(api, sid, {"turn_number": 1}, role=role)["statusCode"] == 403
    assert len(db.turns.list_turns(sid).items) == 4


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "turn_number"),
        ({"turn_number": 0}, "turn_number"),
        ({"turn_number": "1"}, "turn_number"),
        ({"turn_number": 1, "text": ""}, "text"),
        ({"turn_number": 1, "text": "bell\u0007"}, "text"),
        ({"turn_number": 1, "extra": 1}, "extra"),
        ({"turn_number": 2}, "turn 2 is not one of the customer's messages"),
    ],
)
def test_a_bad_rewind_is_400_naming_the_field_and_changes_nothing(
    api: Invoke, db: DynamoSessionStore, body: dict[str, Any], field: str
) -> None:
    sid = _chatted(db)
    response = _rewind(api, sid, body)
    assert response["statusCode"] == 400
    assert field in response["json"]["error"]["message"]
    assert len(db.turns.list_turns(sid).items) == 4


# ---------------------------------------------------------------- POST /sessions/{id}/handoff


@pytest.fixture
def handoffs(api: Invoke, monkeypatch: pytest.MonkeyPatch) -> str:
    """A moto handoff state machine the route starts; its ARN."""
    client = boto3.client("stepfunctions")
    definition = json.dumps({"StartAt": "Wait", "States": {"Wait": {"Type": "Wait", "Seconds": 3600, "End": True}}})
    machine = client.create_state_machine(
        name="Handoff", definition=definition, roleArn="arn:aws:iam::123456789012:role/sfn"
    )["stateMachineArn"]
    monkeypatch.setenv("HANDOFF_STATE_MACHINE_ARN", machine)
    env.reset()
    return str(machine)


def _started(machine: str) -> list[dict[str, Any]]:
    return list(boto3.client("stepfunctions").list_executions(stateMachineArn=machine)["executions"])


def _request_handoff(api: Invoke, sid: str, body: Any, **kw: Any) -> dict[str, Any]:
    raw = body if isinstance(body, str) else json.dumps(body)
    return api(
        "POST", "/sessions/{id}/handoff", f"/sessions/{sid}/handoff", path_parameters={"id": sid}, body=raw, **kw
    )


@pytest.mark.parametrize("bad_id", ["not-a-session", "..%2F..%2Fadmin", "1234", "x" * 300])
def test_a_malformed_session_id_is_a_400_naming_the_parameter_and_starts_nothing(
    api: Invoke, handoffs: str, bad_id: str
) -> None:
    response = _request_handoff(api, bad_id, {"reason": "billing"})
    assert response["statusCode"] == 400, response["body"]
    error = response["json"]["error"]
    assert error["code"] == "BAD_REQUEST_PARAMETERS"
    assert "path.id" in error["message"]
    assert _started(handoffs) == []


@pytest.mark.parametrize("body", ["not json", "{}", '{"reason": "billing", "priority": "asap"}', '{"reason": "a b"}'])
def test_a_malformed_handoff_body_is_a_400_and_starts_nothing(
    api: Invoke, db: DynamoSessionStore, handoffs: str, body: str
) -> None:
    response = _request_handoff(api, _create(api), body)
    assert response["statusCode"] == 400, response["body"]
    assert response["json"]["error"]["code"] == "BAD_REQUEST_BODY"
    assert _started(handoffs) == []


def test_a_handoff_request_starts_the_workflow_as_the_caller_named_by_its_key(
    api: Invoke, db: DynamoSessionStore, handoffs: str
) -> None:
    sid = _create(api)
    response = _request_handoff(api, sid, {"reason": "billing"}, headers={"Idempotency-Key": "first-try"})
    assert response["statusCode"] == 202, response["body"]
    answer = response["json"]
    assert answer["execution_arn"].endswith(":execution:Handoff:first-try")
    assert answer["request_id"] == "req-1234"
    assert answer["started_at"]
    described = boto3.client("stepfunctions").describe_execution(executionArn=answer["execution_arn"])
    assert json.loads(described["input"]) == {
        "session_id": sid,
        "reason": "billing",
        "priority": "normal",
        "requested_by": "alice",
        "role": "customer",
    }


def test_a_retry_with_the_same_key_answers_the_first_202_and_starts_no_second_workflow(
    api: Invoke, db: DynamoSessionStore, handoffs: str
) -> None:
    # Given a handoff requested with a key
    sid = _create(api)
    body, key = {"reason": "billing", "priority": "high"}, {"Idempotency-Key": "retry-me"}
    first = _request_handoff(api, sid, body, headers=key)
    # When the client retries it (its answer lost), and then sends the key with another body
    again = _request_handoff(api, sid, body, headers=key, request_id="req-5678")
    other = _request_handoff(api, sid, {"reason": "shipping"}, headers=key)
    # Then the retry gets the first answer, the other body a 409, and there is one execution
    assert (first["statusCode"], again["statusCode"]) == (202, 202)
    assert again["json"] == first["json"]
    assert other["statusCode"] == 409
    assert len(_started(handoffs)) == 1


def test_a_retry_after_a_lost_answer_finds_the_execution_its_first_attempt_started(
    api: Invoke, db: DynamoSessionStore, handoffs: str
) -> None:
    # Given the first attempt started the execution but never recorded its answer
    sid = _create(api)
    state = {"session_id": sid, "reason": "billing", "priority": "normal", "requested_by": "alice", "role": "customer"}
    client = boto3.client("stepfunctions")
    arn = client.start_execution(stateMachineArn=handoffs, name="lost-answer", input=json.dumps(state))["executionArn"]
    # When the client retries with the key / Then it gets that execution, and no second one starts
    response = _request_handoff(api, sid, {"reason": "billing"}, headers={"Idempotency-Key": "lost-answer"})
    assert response["statusCode"] == 202, response["body"]
    assert response["json"]["execution_arn"] == arn
    assert len(_started(handoffs)) == 1
    # And a key that names another customer's handoff is a 409, not that handoff
    bob = _create(api, "bob")
    taken = _request_handoff(api, bob, {"reason": "billing"}, sub="bob", headers={"Idempotency-Key": "lost-answer"})
    assert taken["statusCode"] == 409
    assert taken["json"]["error"]["code"] == "HandoffKeyTaken"
    assert len(_started(handoffs)) == 1


class _Refusing(_Described):
    """Step Functions as it answers a retry once the first attempt's execution has closed: the
    name is taken (ExecutionAlreadyExists), and DescribeExecution shows the first input."""

    def __init__(self, first_input: dict[str, Any]) -> None:
        super().__init__({"input": json.dumps(first_input), "startDate": datetime(2026, 11, 28, 9, 0, tzinfo=UTC)})

    def start_execution(self, **_: Any) -> dict[str, Any]:
        raise ClientError({"Error": {"Code": "ExecutionAlreadyExists", "Message": "taken"}}, "StartExecution")


def test_a_retry_after_the_first_attempts_execution_closed_answers_that_execution(
    api: Invoke, handoffs: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid = _create(api)
    first = {"session_id": sid, "reason": "billing", "priority": "urgent", "requested_by": "alice", "role": "customer"}
    monkeypatch.setattr(rest, "sfn", lambda: _Refusing(first))
    body, key = {"reason": "billing", "priority": "urgent"}, {"Idempotency-Key": "closed-one"}
    response = _request_handoff(api, sid, body, headers=key)
    assert response["statusCode"] == 202, response["body"]
    assert response["json"]["execution_arn"] == handoffs.replace(":stateMachine:", ":execution:") + ":closed-one"
    assert response["json"]["started_at"] == "2026-11-28T09:00:00+00:00"
    # The same key with another priority is another request
    other = _request_handoff(api, sid, {"reason": "billing", "priority": "high"}, headers=key)
    assert other["statusCode"] == 409


def test_deleting_a_session_whose_handoff_waits_stops_the_wait_with_its_token_and_the_reason(
    api: Invoke, db: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    stopped: list[dict[str, Any]] = []

    class Stopping:
        def send_task_failure(self, **call: Any) -> None:
            stopped.append(call)

    monkeypatch.setattr(rest, "sfn", Stopping)
    sid = _create(api)
    db.handoffs.queue_handoff(
        sid, handoff_id="h-1", reason="billing", priority="normal", execution_arn=None, task_token="the-token"
    )
    assert api("DELETE", "/sessions/{id}", f"/sessions/{sid}")["statusCode"] == 202
    assert stopped == [
        {
            "taskToken": "the-token",
            "error": waits.CUSTOMER_LEFT_ERROR,
            "cause": f"handoff h-1: {customer_leaves.SESSION_DELETED}",
        }
    ]
