"""lambdas.ws.authorizer: the $connect authorizer allows a customer token and denies every other."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from embedded.events import ws_authorizer_event
from lambdas.ws import authorizer
from tests.support.identity import TokenIssuer
from tests.unit.ws.chat import CTX, ISSUER, OTHER_POOL


@pytest.fixture
def jwt_secret(ddb_client: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The ISSUER_* variables of a Cognito stage; the test issuer serves the key set."""
    with ISSUER.serving(monkeypatch):
        yield


def _token(role: str = "customer", *, issuer: TokenIssuer = ISSUER, **options: Any) -> str:
    return issuer.token("alice", groups=[role], **options)


@pytest.mark.usefixtures("jwt_secret")
def test_authorizer_allows_a_customer_token_from_the_query_string() -> None:
    event = ws_authorizer_event(query={"token": _token()})
    response = authorizer.handler(event, CTX)
    assert response["principalId"] == "alice"
    assert response["context"] == {"customer_id": "alice", "role": "customer"}
    assert response["policyDocument"]["Statement"] == [
        {"Action": "execute-api:Invoke", "Effect": "Allow", "Resource": event["methodArn"]}
    ]


@pytest.mark.usefixtures("jwt_secret")
@pytest.mark.parametrize(
    "token",
    [
        None,
        "not-a-jwt",
        "eyJhbGciOiJub25lIn0.eyJzdWIiOiJhbGljZSJ9.",
        "HS256_PUBLIC_KEY",
        "OTHER_POOL",
        "EXPIRED",
        "OTHER_AUDIENCE",
        "AGENT",
    ],
)
def test_authorizer_denies_every_refused_token(token: str | None) -> None:
    special = {
        "OTHER_POOL": lambda: _token(issuer=OTHER_POOL),
        "EXPIRED": lambda: _token(now=1_000, ttl=60),
        "OTHER_AUDIENCE": lambda: _token(aud="other"),
        "AGENT": lambda: _token(role="agent"),
        "HS256_PUBLIC_KEY": lambda: ISSUER.hs256_with_public_key(ISSUER.claims("alice")),
    }
    value = special[token]() if token in special else token
    response = authorizer.handler(ws_authorizer_event(query={"token": value} if value else None), CTX)
    assert response["policyDocument"]["Statement"][0]["Effect"] == "Deny"
    assert "context" not in response
