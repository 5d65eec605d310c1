"""Generated tokens against both authorizers: an Allow exactly when every rule holds, with exactly the token's role.

Each example starts from a valid token of the stage's issuer and applies a random set of changes,
each one either harmless or one that must be refused, then signs it with a random key and
algorithm (the issuer's key, an impostor's key with the issuer's kid, HS256 with the issuer's
public key as the secret, ``none``). The oracle says whether the token is good and which role it
carries; the REST authorizer must allow exactly the routes of that role (or deny everything) and
the WebSocket authorizer must admit exactly the good customer tokens.
"""

from __future__ import annotations

import base64
import fnmatch
import json
import time
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from embedded.events import DEFAULT_API, token_authorizer_event, ws_authorizer_event
from lambdas.api import access
from lambdas.api import authorizer as rest_authorizer
from lambdas.ws import authorizer as ws_authorizer
from tests.support.identity import TokenIssuer

ISSUER = TokenIssuer()
IMPOSTOR = TokenIssuer(key_name="impostor")
SETTINGS, KEYS = ISSUER.settings(), ISSUER.key_set()
PREFIX = DEFAULT_API.method_arn("GET", "/sessions").rsplit("/", 2)[0]
EXAMPLES = settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@dataclass(frozen=True)
class Change:
    """One change to a valid token's claims; ``bad`` when the token must then be refused."""

    name: str
    claims: dict[str, Any]
    bad: bool
    drop: tuple[str, ...] = ()


def changes(now: int) -> dict[str, list[Change]]:
    """Changes by the claim they touch, relative to the token's issue time ``now``.

    A token gets at most one change per claim, so no change undoes another and the oracle stays exact.
    """
    return {
        "exp": [
            Change("expired", {"exp": now - 3600}, bad=True),
            Change("valid for two days", {"exp": now + 2 * 86400}, bad=True),
            Change("no exp", {}, bad=True, drop=("exp",)),
            Change("exp as text", {"exp": str(now + 600)}, bad=True),
            Change("near expiry", {"exp": now + 60}, bad=False),
        ],
        "nbf": [Change("not yet valid", {"nbf": now + 3600}, bad=True)],
        "iat": [Change("issued in the future", {"iat": now + 3600}, bad=True)],
        "iss": [
            Change("another pool", {"iss": "https://cognito-idp.us-east-1.amazonaws.com/us-east-1_Other"}, bad=True)
        ],
        "aud": [Change("another client", {"aud": "another-client"}, bad=True)],
        "token_use": [Change("a refresh token", {"token_use": "refresh"}, bad=True)],
        "sub": [
            Change("no sub", {}, bad=True, drop=("sub",)),
            Change("a sub with a slash", {"sub": "alice/../bob"}, bad=True),
        ],
        "cognito:groups": [
            Change("two roles", {"cognito:groups": ["agent", "admin"]}, bad=True),
            Change("a group that is no role", {"cognito:groups": ["vip"]}, bad=False),
        ],
        "custom:tier": [Change("an extra claim", {"custom:tier": "gold"}, bad=False)],
        "email": [Change("a verified address", {"email": "alice@example.com", "email_verified": True}, bad=False)],
    }


ROLES = st.sampled_from(["customer", "agent", "admin", None])
SIGNERS = st.sampled_from(["issuer", "issuer", "issuer", "impostor", "hs256-public-key", "none", "kid-unknown"])


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@st.composite
def tokens(draw: st.DrawFn) -> tuple[str, str | None]:
    """A token and the role it must be allowed with (None: it must be refused)."""
    role = draw(ROLES)
    token_use = draw(st.sampled_from(["id", "access"]))
    now = int(time.time())  # each token is verified right after it is made
    claims = ISSUER.claims("alice-1", groups=[role] if role else None, token_use=token_use, now=now)
    by_claim = changes(now)
    touched = draw(st.lists(st.sampled_from(sorted(by_claim)), max_size=3, unique=True))
    applied = [draw(st.sampled_from(by_claim[claim])) for claim in touched]
    for change in applied:
        claims.update(change.claims)
        for name in change.drop:
            claims.pop(name, None)
    if token_use == "access" and "aud" in claims:  # an access token names its client in client_id
        claims["client_id"] = claims.pop("aud")
    signer = draw(SIGNERS)
    if signer == "issuer":
        token = ISSUER.sign(claims)
    elif signer == "impostor":
        token = IMPOSTOR.sign(claims)
    elif signer == "kid-unknown":
        token = ISSUER.sign(claims, headers={"kid": "another-key"})
    elif signer == "hs256-public-key":
        token = ISSUER.hs256_with_public_key(claims)
    else:
        token = f"{_b64(json.dumps({'alg': 'none', 'kid': ISSUER.kid}).encode())}.{_b64(json.dumps(claims).encode())}."
    good = signer == "issuer" and not any(change.bad for change in applied)
    groups = claims.get("cognito:groups") or []
    expected = next((g for g in groups if g in ("customer", "agent", "admin")), "customer") if good else None
    return token, expected


def _allowed_routes(response: dict[str, Any]) -> set[tuple[str, str]]:
    """The non-public routes the policy lets through (IAM's evaluation: explicit deny wins)."""
    allowed = set()
    for route in access.ROUTES:
        if route.public:
            continue
        arn = f"{PREFIX}/{route.method}/{route.path.lstrip('/').replace('{', '').replace('}', '')}"
        effects = {
            s["Effect"]
            for s in response["policyDocument"]["Statement"]
            if any(fnmatch.fnmatchcase(arn, pattern) for pattern in s["Resource"])
        }
        if effects == {"Allow"}:
            allowed.add((route.method, route.path))
    return allowed


@EXAMPLES
@given(case=tokens())
def test_the_rest_authorizer_allows_exactly_the_good_tokens_role(case: tuple[str, str | None]) -> None:
    token, role = case
    event = token_authorizer_event(f"Bearer {token}", DEFAULT_API.method_arn("GET", "/sessions"))
    if role is None:  # refused: API Gateway answers 401, the client signs in again
        with pytest.raises(rest_authorizer.Unauthorized):
            rest_authorizer.authorize(event, SETTINGS, KEYS)
        return
    response = rest_authorizer.authorize(event, SETTINGS, KEYS)
    assert _allowed_routes(response) == {(r.method, r.path) for r in access.routes_for(role)}
    assert (response["context"]["sub"], response["context"]["role"]) == ("alice-1", role)


@EXAMPLES
@given(case=tokens())
def test_the_websocket_authorizer_admits_exactly_the_good_customer_tokens(case: tuple[str, str | None]) -> None:
    token, role = case
    response = ws_authorizer.authorize(ws_authorizer_event(query={"token": token}), SETTINGS, KEYS)
    effect = response["policyDocument"]["Statement"][0]["Effect"]
    assert effect == ("Allow" if role == "customer" else "Deny")
