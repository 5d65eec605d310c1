"""REST TOKEN authorizer: policies per role, every refusal, generated tokens, the handler with its variables."""

from __future__ import annotations

import base64
import fnmatch
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from embedded.events import lambda_context, token_authorizer_event
from lambdas.api import access, authorizer
from lambdas.shared import env
from tests.support.identity import TokenIssuer

ISSUER = TokenIssuer()
IMPOSTOR = TokenIssuer(key_name="impostor")
OTHER_POOL = TokenIssuer(issuer="https://cognito-idp.us-east-1.amazonaws.com/us-east-1_OtherPool")
PREFIX = "arn:aws:execute-api:us-east-1:123456789012:abc123/dev"
METHOD_ARN = f"{PREFIX}/GET/sessions/123"
KEYS = ISSUER.key_set()


def _token(*, role: str = "customer", sub: str = "alice", issuer: TokenIssuer = ISSUER, **options: Any) -> str:
    options.setdefault("groups", [role])
    return issuer.token(sub, **options)


def _authorize(header: str | None) -> dict[str, Any]:
    return authorizer.authorize(token_authorizer_event(header, METHOD_ARN), ISSUER.settings(), KEYS)


def _allowed(response: dict[str, Any], method: str, path: str) -> bool:
    """IAM's evaluation of the policy for one request: explicit deny wins, `*` spans `/`."""
    arn = f"{PREFIX}/{method}/{path.lstrip('/')}"
    allow = deny = False
    for statement in response["policyDocument"]["Statement"]:
        resources = statement["Resource"]
        if any(fnmatch.fnmatchcase(arn, pattern) for pattern in resources):
            allow |= statement["Effect"] == "Allow"
            deny |= statement["Effect"] == "Deny"
    return allow and not deny


def _concrete(route: access.Route) -> str:
    return route.path.replace("{id}", "0b7c").replace("{session_id}", "0b7c")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


# ---------------------------------------------------------------- allow


@pytest.mark.parametrize("role", [access.CUSTOMER, access.AGENT, access.ADMIN])
def test_valid_token_gets_exactly_its_roles_routes(role: str) -> None:
    # Given a valid token of the role
    response = _authorize(f"Bearer {_token(role=role, sub='u-1')}")
    # Then the principal and context carry sub and role
    assert response["principalId"] == "u-1"
    assert response["context"] == {"sub": "u-1", "role": role}
    # And every route of the table is allowed exactly when the role is listed for it
    for route in access.ROUTES:
        if route.public:
            continue
        assert _allowed(response, route.method, _concrete(route)) == (role in route.roles), (role, route)


def test_policy_is_limited_to_this_api_and_stage() -> None:
    response = _authorize(f"Bearer {_token(role='admin')}")
    for resource in response["policyDocument"]["Statement"][0]["Resource"]:
        assert resource.startswith(f"{PREFIX}/")
    assert not any(r.endswith("/*/*") for r in response["policyDocument"]["Statement"][0]["Resource"])


def test_customer_policy_allows_no_admin_or_agent_route() -> None:
    response = _authorize(f"Bearer {_token()}")
    assert _allowed(response, "GET", "/sessions/0b7c")
    assert not _allowed(response, "POST", "/admin/cleanup")
    assert not _allowed(response, "POST", "/handoffs/0b7c/accept")
    assert not _allowed(response, "PUT", "/sessions/0b7c")


# ---------------------------------------------------------------- refused tokens


NOW = int(time.time())


@pytest.mark.parametrize(
    "header",
    [
        pytest.param(None, id="missing"),
        pytest.param("", id="empty"),
        pytest.param("Bearer", id="bearer-without-token"),
        pytest.param(f"Basic {_token()}", id="other-scheme"),
        pytest.param("Bearer not-a-jwt", id="malformed"),
        pytest.param("Bearer a.b.c", id="malformed-segments"),
        pytest.param(f"Bearer {_token(now=NOW - 7200, ttl=60)}", id="expired"),
        pytest.param(f"Bearer {_token(now=NOW + 3600)}", id="not-yet-valid"),
        pytest.param(f"Bearer {_token(aud='other-client')}", id="wrong-audience"),
        pytest.param(f"Bearer {_token(issuer=OTHER_POOL)}", id="another-pool"),
        pytest.param(f"Bearer {_token(issuer=IMPOSTOR)}", id="another-key"),
        pytest.param(f"Bearer {_token(token_use='refresh')}", id="wrong-token-use"),
        pytest.param(f"Bearer {_token(groups=['agent', 'admin'])}", id="two-roles"),
        pytest.param(
            f"Bearer {ISSUER.hs256_with_public_key(ISSUER.claims('alice', groups=['admin']))}",
            id="hs256-with-the-public-key",
        ),
    ],
)
def test_refused_tokens_are_unauthorized_so_the_client_signs_in_again(header: str | None) -> None:
    # API Gateway answers 401 only when the function fails with exactly "Unauthorized"
    with pytest.raises(authorizer.Unauthorized) as refused:
        _authorize(header)
    assert str(refused.value) == "Unauthorized"


def test_tampered_payload_is_unauthorized() -> None:
    head, payload, sig = _token().split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["cognito:groups"] = ["admin"]
    with pytest.raises(authorizer.Unauthorized):
        _authorize(f"Bearer {head}.{_b64(json.dumps(claims).encode())}.{sig}")


def test_tampered_signature_is_unauthorized() -> None:
    head, payload, sig = _token().split(".")
    tampered = ("A" if sig[0] != "A" else "B") + sig[1:]
    with pytest.raises(authorizer.Unauthorized):
        _authorize(f"Bearer {head}.{payload}.{tampered}")


@pytest.mark.parametrize("alg", ["none", "HS256", "HS512", "ES256"])
def test_other_algorithms_are_unauthorized(alg: str) -> None:
    _, payload, sig = _token().split(".")
    head = _b64(json.dumps({"alg": alg, "typ": "JWT", "kid": ISSUER.kid}).encode())
    for token in (f"{head}.{payload}.", f"{head}.{payload}.{sig}"):
        with pytest.raises(authorizer.Unauthorized):
            _authorize(f"Bearer {token}")


def test_malformed_method_arn_is_denied_everywhere() -> None:
    response = authorizer.authorize(token_authorizer_event(f"Bearer {_token()}", "garbage"), ISSUER.settings(), KEYS)
    assert response == {
        "principalId": "anonymous",
        "policyDocument": {
            "Version": "2012-10-17",
            "Statement": [{"Action": "execute-api:Invoke", "Effect": "Deny", "Resource": ["*"]}],
        },
    }


# ---------------------------------------------------------------- generated tokens

_b64_segment = st.binary(max_size=80).map(_b64)
_json_segment = st.dictionaries(
    st.sampled_from(["alg", "typ", "sub", "cognito:groups", "iss", "aud", "exp", "nbf", "kid", "token_use"]),
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    max_size=8,
).map(lambda d: _b64(json.dumps(d).encode()))
_random_tokens = st.one_of(
    st.text(max_size=300),
    st.tuples(_json_segment | _b64_segment, _json_segment | _b64_segment, _b64_segment).map(".".join),
    st.tuples(
        st.sampled_from(
            [_b64(json.dumps({"alg": alg, "typ": "JWT", "kid": ISSUER.kid}).encode()) for alg in ("HS256", "RS256")]
        ),
        _json_segment,
        _b64_segment,
    ).map(".".join),
)


@settings(max_examples=600, deadline=None)
@given(token=_random_tokens, scheme=st.sampled_from(["Bearer ", "bearer ", "", "Basic "]))
def test_no_generated_token_is_allowed(token: str, scheme: str) -> None:
    with pytest.raises(authorizer.Unauthorized):
        _authorize(scheme + token)


# ---------------------------------------------------------------- the handler and its variables


CONTEXT = lambda_context("Authorizer", aws_request_id="lambda-request-1", memory_limit_in_mb=128)


@pytest.fixture
def issuer_variables(monkeypatch: pytest.MonkeyPatch) -> Iterator[TokenIssuer]:
    """The ISSUER_* variables of a Cognito stage, its key set served by the test issuer."""
    with TokenIssuer().serving(monkeypatch) as issuer:
        yield issuer


def test_handler_fetches_the_key_set_once_and_allows(issuer_variables: TokenIssuer) -> None:
    for _ in range(3):
        response = authorizer.handler(token_authorizer_event(f"Bearer {_token(role='agent')}", METHOD_ARN), CONTEXT)
        assert response["context"] == {"sub": "alice", "role": "agent"}
        assert response["policyDocument"]["Statement"][0]["Effect"] == "Allow"
    assert issuer_variables.fetches == 1


def test_handler_denies_and_logs_when_the_key_set_is_unreachable(
    issuer_variables: TokenIssuer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a key set URL nothing answers: every token is denied, nobody let in unchecked
    monkeypatch.setenv("ISSUER_JWKS_URL", "https://cognito-idp.example.invalid/jwks.json")
    env.reset()
    response = authorizer.handler(token_authorizer_event(f"Bearer {_token(role='admin')}", METHOD_ARN), CONTEXT)
    assert [s["Effect"] for s in response["policyDocument"]["Statement"]] == ["Deny"]
    assert "key set is unavailable" in caplog.text


def test_handler_fails_on_missing_settings(issuer_variables: TokenIssuer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ISSUER_URL", raising=False)
    env.reset()
    with pytest.raises(env.MissingSetting, match="ISSUER_URL"):
        authorizer.handler(token_authorizer_event("Bearer x", METHOD_ARN), CONTEXT)


@pytest.mark.parametrize(
    ("claims", "expected"),
    [
        ({"email": "root@example.com", "email_verified": True}, "root@example.com"),
        ({"email": "root@example.com", "email_verified": "true"}, "root@example.com"),
        ({"email": "root@example.com"}, None),
        ({"email": "root@example.com", "email_verified": False}, None),
        ({"email": "root@example.com", "email_verified": "false"}, None),
        ({"email": "not an address", "email_verified": True}, None),
        ({"email": ["root@example.com"], "email_verified": True}, None),
        ({}, None),
    ],
)
def test_only_a_verified_address_reaches_the_context(claims: dict[str, Any], expected: str | None) -> None:
    response = _authorize(f"Bearer {ISSUER.sign({**ISSUER.claims('alice'), **claims})}")
    assert response["policyDocument"]["Statement"][0]["Effect"] == "Allow"
    assert response["context"].get("email") == expected
