"""Hostile input is a 4xx (the authorizers refuse: 401 or a Deny), never a 5xx and never a wrongful Allow.

Property tests over what an attacker controls: nesting depth, huge and non-finite numbers, lone
surrogates (what invalid UTF-8 becomes in a Lambda event) and control characters, in every Lambda
route's body, path and query (cursors included), and in the tokens both authorizers read.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import jsonschema
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from jwt.algorithms import RSAAlgorithm

from embedded.events import DEFAULT_API, authorizer_context, lambda_context, rest_proxy_event, ws_authorizer_event
from lambdas.api import access, admin_agents, rest
from lambdas.api import agent as agent_api
from lambdas.api import authorizer as rest_authorizer
from lambdas.api.validation import REGISTER_AGENT, gateway_schema
from lambdas.shared import cursor, env
from lambdas.shared.errors import InvalidCursor
from lambdas.shared.store import DynamoSessionStore
from lambdas.ws import authorizer as ws_authorizer
from tests.support.identity import TokenIssuer

ISSUER = TokenIssuer()
ISS, AUD = ISSUER.issuer, ISSUER.client_id
CONFIG, KEYS = ISSUER.settings(), ISSUER.key_set()
SESSION = "0b7c5f2e-1d3a-4c8b-9e6f-2a1b3c4d5e6f"
CONTEXT = lambda_context("HostileInput")
HYPOTHESIS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)

# ---------------------------------------------------------------- what an attacker sends


def _nested(depth: int, opener: str) -> str:
    """Arrays or objects nested ``depth`` deep (Python's parser gives up near 1,000)."""
    return '{"a":' * depth + "1" + "}" * depth if opener == "{" else "[" * depth + "]" * depth


NUMBERS = st.sampled_from(["1e400", "-1e400", "1e-400", "NaN", "Infinity", "-Infinity", "9" * 5000, "-0", "1E+999"])
NESTING = st.builds(_nested, st.integers(min_value=900, max_value=5000), st.sampled_from(["[", "{"]))
UNICODE = st.text(
    alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=()), min_size=0, max_size=40
)
LONE_SURROGATES = st.sampled_from(["\udcff", "\ud800", "a\udfffb", "\udc80\udc81"])
NASTY_TEXT = st.one_of(UNICODE, LONE_SURROGATES, st.sampled_from(["alice\n", "\x00", "%00", "../..", "\u202e"]))
HOSTILE_JSON = st.one_of(
    NESTING,
    NUMBERS,
    NUMBERS.map(lambda n: f'{{"text": {n}}}'),
    NUMBERS.map(lambda n: f'{{"customer_id": "alice", "metadata": {{"n": {n}}}}}'),
    NESTING.map(lambda nested: f'{{"text": "hi", "x": {nested}}}'),
    NESTING.map(lambda nested: f'{{"customer_id": "alice", "metadata": {{"a": {nested}}}}}'),
    NASTY_TEXT.map(lambda t: json.dumps({"text": t, "resolution": t, "outcome": t}, ensure_ascii=False)),
    NASTY_TEXT.map(lambda t: json.dumps({"agent_id": t, "display_name": t, "skills": [t]}, ensure_ascii=False)),
    NUMBERS.map(lambda n: f'{{"agent_id": "a-1", "display_name": "A", "skills": ["b"], "is_manager": {n}}}'),
    NESTING.map(lambda nested: f'{{"agent_id": "a-1", "display_name": "A", "skills": {nested}}}'),
    NASTY_TEXT,
)


def _cursor_of(payload: str) -> str:
    return base64.urlsafe_b64encode(payload.encode("utf-8", "surrogatepass")).decode().rstrip("=")


HOSTILE_CURSOR = st.one_of(
    HOSTILE_JSON.map(_cursor_of),
    st.just(_cursor_of("[" * 1500)),
    NASTY_TEXT,
    st.binary(max_size=64).map(lambda raw: base64.urlsafe_b64encode(raw).decode().rstrip("=")),
)


def _a_page_size(text: str) -> bool:
    """Whether ``text`` is a page size some listing accepts (an integer 1..100): not hostile."""
    return re.fullmatch(r"-?[0-9]{1,9}", text) is not None and 1 <= int(text) <= 100


#: Random text may spell a valid page size ("1"), which a listing rightly answers with 200.
HOSTILE_LIMIT = st.one_of(NUMBERS, NASTY_TEXT.filter(lambda text: not _a_page_size(text)))
HOSTILE_QUERY = st.fixed_dictionaries(
    {},
    optional={"limit": HOSTILE_LIMIT, "cursor": HOSTILE_CURSOR, "x": NASTY_TEXT},
)
HOSTILE_ID = st.one_of(NASTY_TEXT, st.just(SESSION + "\n"), st.just(SESSION.upper()), NUMBERS)

# ---------------------------------------------------------------- the routes


@pytest.fixture
def invoke(table_name: str, ddb_client: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., int]]:
    """Call the Lambda route ``method resource`` as API Gateway would; the status code."""
    monkeypatch.setenv("TABLE_NAME", table_name)
    monkeypatch.setenv("CORS_ALLOWED_ORIGINS", "http://localhost:3000")
    monkeypatch.delenv("STATE_MACHINE_ARNS", raising=False)
    env.reset()
    fixed = DynamoSessionStore(table_name, client=boto3.client("dynamodb"))
    monkeypatch.setattr(rest, "store", lambda: fixed)
    monkeypatch.setattr(agent_api, "store", lambda: fixed)
    monkeypatch.setattr(admin_agents, "store", lambda: fixed)
    fixed.sessions.create_session("alice")

    def call(
        module: Any,
        method: str,
        resource: str,
        params: dict[str, str],
        *,
        role: str,
        body: str | None = None,
        **kw: Any,
    ) -> int:
        path = resource
        for name, value in params.items():
            path = path.replace("{" + name + "}", value)
        event = rest_proxy_event(
            method,
            resource,
            path,
            path_parameters=params or None,
            headers={"Content-Type": "application/json", "Origin": "http://localhost:3000"},
            body=body,
            authorizer=authorizer_context("alice", sub="alice", role=role),
            **kw,
        )
        response = module.handler(event, CONTEXT)
        return int(response["statusCode"])

    yield call
    env.reset()


REST_ROUTES = [
    ("POST", "/sessions", {}, "customer"),
    ("GET", "/sessions/{id}", {"id": SESSION}, "customer"),
    ("DELETE", "/sessions/{id}", {"id": SESSION}, "customer"),
    ("GET", "/sessions/{id}/turns", {"id": SESSION}, "customer"),
    ("GET", "/customers/{id}/sessions", {"id": "alice"}, "customer"),
    ("GET", "/executions/{id}", {"id": "x"}, "admin"),
]
AGENT_ROUTES = [
    ("POST", "/handoffs/{session_id}/accept", {"session_id": SESSION}, "agent"),
    ("POST", "/handoffs/{session_id}/messages", {"session_id": SESSION}, "agent"),
    ("POST", "/handoffs/{session_id}/close", {"session_id": SESSION}, "agent"),
    ("POST", "/agents/me/presence", {}, "agent"),
]
REGISTRY_ROUTES = [
    ("POST", "/admin/agents", {}, "admin"),
    ("GET", "/admin/agents", {}, "admin"),
    ("GET", "/admin/agents/{agent_id}", {"agent_id": "alice"}, "admin"),
    ("PATCH", "/admin/agents/{agent_id}", {"agent_id": "alice"}, "admin"),
    ("POST", "/admin/agents/{agent_id}/retire", {"agent_id": "alice"}, "admin"),
]
ROUTES = (
    [(rest, *r) for r in REST_ROUTES]
    + [(agent_api, *r) for r in AGENT_ROUTES]
    + [(admin_agents, *r) for r in REGISTRY_ROUTES]
)


def _route_id(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _client_error(status: int) -> bool:
    return 400 <= status < 500


@pytest.mark.parametrize(("module", "method", "resource", "params", "role"), ROUTES, ids=_route_id)
@HYPOTHESIS
@given(body=HOSTILE_JSON)
def test_a_hostile_body_is_a_4xx(
    invoke: Callable[..., int], module: Any, method: str, resource: str, params: dict[str, str], role: str, body: str
) -> None:
    status = invoke(module, method, resource, params, role=role, body=body)
    if (method, resource) == ("POST", "/admin/agents") and _registrable(body):
        assert status == 201  # the strategies can build a valid registration
        return
    # A GET or DELETE ignores a body; so does retiring (the unregistered "alice" is a 404 anyway)
    assert _client_error(status) if method in ("POST", "PATCH") else status < 500


def _registrable(body: str) -> bool:
    """Whether ``body`` is a valid registration by the gateway model's rules, read with ECMA-262
    regexes as API Gateway does (``$`` only at the very end: ``\\Z`` for Python's ``re``)."""
    try:
        document = json.loads(body)
        return bool(jsonschema.Draft4Validator(_ecma(gateway_schema(REGISTER_AGENT))).is_valid(document))
    except (ValueError, RecursionError):
        # Too deep to parse, or to print: jsonschema writes the offending value into its error
        # message, and the repr of an array nested a few hundred deep exceeds the stack where
        # the call stack is already deep (mutmut's trampolines). The model nests two levels, so
        # such a body is no registration.
        return False


def _ecma(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: (v[:-1] + "\\Z" if k == "pattern" else _ecma(v)) for k, v in schema.items()}
    return schema


@pytest.mark.parametrize(("module", "method", "resource", "params", "role"), ROUTES, ids=_route_id)
@HYPOTHESIS
@given(value=HOSTILE_ID)
def test_a_hostile_path_parameter_is_a_4xx(
    invoke: Callable[..., int], module: Any, method: str, resource: str, params: dict[str, str], role: str, value: str
) -> None:
    hostile = dict.fromkeys(params, value)
    if not hostile:
        return  # POST /sessions has no path parameter
    path = resource
    for name in params:
        path = path.replace("{" + name + "}", value)
    # API Gateway routes "/admin/agents/" to the listing itself: no request with an empty id exists.
    assume(not any(r.method == method and r.path == path.rstrip("/") for r in access.ROUTES))
    body = '{"text": "hi", "resolution": "done", "outcome": "resume"}' if module is agent_api else None
    assert _client_error(invoke(module, method, resource, hostile, role=role, body=body))


def test_a_path_parameter_ending_in_a_newline_is_a_400_not_the_listing(invoke: Callable[..., int]) -> None:
    # "$" of the resolver's route regexes matches before a final newline: "/admin/agents/\n" would
    # be routed to the listing of agents, though API Gateway chose the item route
    status = invoke(admin_agents, "GET", "/admin/agents/{agent_id}", {"agent_id": "\n"}, role="admin")
    assert status == 400


@pytest.mark.parametrize(
    ("resource", "params"),
    [("/sessions/{id}/turns", {"id": SESSION}), ("/customers/{id}/sessions", {"id": "alice"})],
)
@HYPOTHESIS
@given(query=HOSTILE_QUERY)
def test_a_hostile_query_or_cursor_is_a_4xx_or_the_plain_listing(
    invoke: Callable[..., int], resource: str, params: dict[str, str], query: dict[str, str]
) -> None:
    status = invoke(rest, "GET", resource, params, role="customer", query=query)
    assert _client_error(status) or (status == 200 and set(query) <= {"x"})


@HYPOTHESIS
@given(query=HOSTILE_QUERY)
def test_a_hostile_query_or_cursor_of_the_agent_listing_is_a_4xx_or_the_plain_listing(
    invoke: Callable[..., int], query: dict[str, str]
) -> None:
    status = invoke(admin_agents, "GET", "/admin/agents", {}, role="admin", query=query)
    assert _client_error(status) or (status == 200 and not query)


def test_a_cursor_of_brackets_nested_1500_deep_is_an_invalid_cursor() -> None:
    with pytest.raises(InvalidCursor):
        cursor.decode(_cursor_of("[" * 1500), "turns:s", {"PK": str})


@HYPOTHESIS
@given(token=HOSTILE_CURSOR)
def test_cursor_decode_raises_only_invalid_cursor(token: str) -> None:
    with pytest.raises(InvalidCursor):
        cursor.decode(token, "turns:s", {"PK": str, "SK": str})


# ---------------------------------------------------------------- the authorizers


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


_HEADER = json.dumps({"alg": "RS256", "kid": ISSUER.kid}).encode()


def _signed(payload: bytes, header: bytes = _HEADER) -> str:
    """A token correctly signed with the issuer's key over raw (possibly hostile) bytes."""
    head, body = _b64(header), _b64(payload)
    sig = RSAAlgorithm(RSAAlgorithm.SHA256).sign(f"{head}.{body}".encode(), ISSUER.private_key)
    return f"{head}.{body}.{_b64(sig)}"


def _claims_with(name: str, raw: str) -> bytes:
    claims = {"sub": "alice", "cognito:groups": ["customer"], "iss": ISS, "aud": AUD, "token_use": "id", "exp": 0}
    text = json.dumps(claims).replace('"exp": 0', '"exp": 4102444800') if name != "exp" else json.dumps(claims)
    return text.replace(f'"{name}": ' + json.dumps(claims.get(name, 0)), f'"{name}": {raw}').encode(
        "utf-8", "surrogatepass"
    )


def _hs256_with_public_key(payload: bytes) -> str:
    """The key-confusion attack over raw bytes: HS256 whose HMAC secret is the issuer's public key."""
    head = _b64(json.dumps({"alg": "HS256", "kid": ISSUER.kid}).encode())
    body = _b64(payload)
    return f"{head}.{body}.{_b64(hmac.new(ISSUER.public_pem(), f'{head}.{body}'.encode(), hashlib.sha256).digest())}"


HOSTILE_PAYLOAD = st.one_of(
    st.tuples(
        st.sampled_from(["exp", "nbf", "iat", "sub", "aud", "cognito:groups", "token_use"]), st.one_of(NUMBERS, NESTING)
    ).map(lambda pair: _claims_with(*pair)),
    NESTING.map(str.encode),
    st.binary(max_size=80),  # invalid UTF-8 among them
    NASTY_TEXT.map(
        lambda sub: json.dumps({"sub": sub, "token_use": "id", "iss": ISS, "aud": AUD, "exp": 4102444800}).encode()
    ),
)
HOSTILE_TOKEN = st.one_of(
    HOSTILE_PAYLOAD.map(_signed),
    HOSTILE_PAYLOAD.map(lambda header: _signed(b'{"sub":"alice"}', header)),
    HOSTILE_PAYLOAD.map(_hs256_with_public_key),
    NASTY_TEXT,
    st.text(alphabet="ABCDEFabcdef0123456789-_.=+/", max_size=200),
)


def _allows(response: dict[str, Any]) -> bool:
    return any(s["Effect"] == "Allow" for s in response["policyDocument"]["Statement"])


def _rest_refuses(event: dict[str, Any]) -> bool:
    """The REST authorizer fails with Unauthorized (API Gateway's 401) or answers no Allow."""
    try:
        response = rest_authorizer.authorize(event, CONFIG, KEYS)
    except rest_authorizer.Unauthorized:
        return True
    return not _allows(response)


@HYPOTHESIS
@given(token=HOSTILE_TOKEN)
def test_the_rest_authorizer_denies_every_hostile_token(token: str) -> None:
    event = {"type": "TOKEN", "methodArn": DEFAULT_API.method_arn("GET", "/sessions"), "authorizationToken": token}
    assert _rest_refuses(event)
    event["authorizationToken"] = f"Bearer {token}"
    assert _rest_refuses(event)


@HYPOTHESIS
@given(token=HOSTILE_TOKEN)
def test_the_websocket_authorizer_denies_every_hostile_token(token: str) -> None:
    assert not _allows(ws_authorizer.authorize(ws_authorizer_event(query={"token": token}), CONFIG, KEYS))


@pytest.mark.parametrize("exp", ["1e400", "-1e400", "NaN", "Infinity", "1" + "0" * 400])
def test_both_authorizers_deny_a_signed_token_whose_exp_is_huge_or_not_finite(exp: str) -> None:
    token = _signed(_claims_with("exp", exp))
    rest_event = {"type": "TOKEN", "methodArn": DEFAULT_API.method_arn("GET", "/sessions"), "authorizationToken": ""}
    rest_event["authorizationToken"] = f"Bearer {token}"
    assert _rest_refuses(rest_event)
    assert not _allows(ws_authorizer.authorize(ws_authorizer_event(query={"token": token}), CONFIG, KEYS))


def test_a_valid_token_is_still_allowed_by_both() -> None:
    token = ISSUER.token("alice")
    rest_event = {"type": "TOKEN", "methodArn": DEFAULT_API.method_arn("GET", "/sessions"), "authorizationToken": ""}
    rest_event["authorizationToken"] = f"Bearer {token}"
    assert _allows(rest_authorizer.authorize(rest_event, CONFIG, KEYS))
    assert _allows(ws_authorizer.authorize(ws_authorizer_event(query={"token": token}), CONFIG, KEYS))
