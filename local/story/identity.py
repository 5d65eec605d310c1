"""The story's identity step: tokens the deployed stage must refuse, and one more it must accept.

Every token here is a real one from the stage's Cognito pool on moto (or made from one): a
token of another pool in the same account, an ID token whose hour has passed on the stage's
clock, a token whose payload was edited to claim the admin role, the key-confusion attack (HS256
signed with the pool's published public key as the HMAC secret), and a customer's valid token
on an agent route. Each is refused by both APIs where it could reach them: the REST authorizer's
policy (403) and the WebSocket ``$connect`` authorizer (connection refused). An agent on another
agent's handoff is refused in the second handoff's step (``story_handoff``).

A mixin of :class:`local.story.Story`, which provides the stage, the directory and the tokens.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from typing import Any

from cryptography.hazmat.primitives import serialization
from jwt.algorithms import RSAAlgorithm

from embedded.services.apigateway_websocket import ConnectionRefused
from embedded.services.cognito import Directory, claims_of
from local.story.base import Step, StoryParts, expect


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class IdentitySteps(StoryParts):
    """Refused and accepted tokens on the deployed stage (see the module docstring)."""

    def _refused(self, step: Step, label: str, token: str) -> None:
        """``token`` gets 401 with a Bearer challenge from the REST API and cannot open a chat connection."""
        path = f"/customers/{self.subject('alice')}/sessions"
        response = self.stage.rest.request("GET", path, headers={"Authorization": f"Bearer {token}"})
        step.calls.append(f"GET /customers/{{id}}/sessions with {label} -> {response.status}")
        expect(response.status == 401, f"{label} answered {response.status}: {response.body[:200]}")
        challenge = response.headers.get("WWW-Authenticate", "")
        expect(challenge.startswith("Bearer"), f"{label}: the 401 has no Bearer challenge ({response.headers})")
        expect(response.json()["error"]["code"] == "UNAUTHORIZED", f"{label}: the 401 body is {response.body[:200]}")
        try:
            self.stage.websocket.connect(query={"token": token})
        except ConnectionRefused as refused:
            step.calls.append(f"$connect with {label} -> refused ({refused})")
        else:
            raise AssertionError(f"{label} opened a chat connection")

    def _other_pool_token(self) -> str:
        """A user of a second pool in the same account (moto signs every pool with one key)."""
        cognito = self.directory.client
        pool = cognito.create_user_pool(PoolName="another-app", UsernameAttributes=["email"])["UserPool"]["Id"]
        flows = ["ALLOW_USER_PASSWORD_AUTH", "ALLOW_REFRESH_TOKEN_AUTH"]  # Cognito's defaults allow SRP only
        created = cognito.create_user_pool_client(UserPoolId=pool, ClientName="web", ExplicitAuthFlows=flows)
        client = created["UserPoolClient"]["ClientId"]
        other = Directory(cognito, pool, client, self.stage.clock)
        other.ensure_user("alice@example.com", role=None)
        return other.sign_in("alice@example.com").id_token

    def _hs256_with_the_public_key(self, claims: dict[str, Any]) -> str:
        """HS256 whose HMAC secret is the pool's public key as published (PEM), as an attacker would make it."""
        [jwk] = self.directory.jwks()["keys"]
        public = RSAAlgorithm.from_jwk(json.dumps(jwk))
        pem = public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)  # type: ignore[union-attr]
        head = _b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": jwk["kid"]}).encode())
        body = _b64(json.dumps(claims).encode())
        signature = hmac.new(pem, f"{head}.{body}".encode(), hashlib.sha256).digest()
        return f"{head}.{body}.{_b64(signature)}"

    def refused_tokens(self) -> None:
        started, step = (
            time.monotonic(),
            self.step(
                "Bad path: tokens the stage refuses (another pool, expired, tampered, HS256 with the public key)"
            ),
        )
        self.auth("alice")  # a fresh token of alice's to tamper with
        fresh = self.tokens["alice"]
        claims = claims_of(fresh)

        expired = str(self.values["early_tokens"]["alice"])
        expect(claims_of(expired)["exp"] < self.stage.clock(), "the story's first token has not expired yet")
        head, _, signature = fresh.split(".")
        tampered = f"{head}.{_b64(json.dumps({**claims, 'cognito:groups': ['admin']}).encode())}.{signature}"
        for label, token in (
            ("a token of another pool", self._other_pool_token()),
            ("an expired token", expired),
            ("a token edited to claim admin", tampered),
            ("HS256 signed with the pool's public key", self._hs256_with_the_public_key(claims)),
        ):
            self._refused(step, label, token)

        # A customer's valid token on an agent route: the role's policy has no such route
        accept = self.rest(step, "POST", f"/handoffs/{self.session_id}/accept", "alice")
        expect(accept.status == 403, f"a customer's accept answered {accept.status}: {accept.body}")
        # And the same customer's access token (client_id instead of aud) is a valid credential
        access_token = self.signed_in["alice"].access_token
        path = f"/customers/{self.subject('alice')}/sessions"
        read = self.stage.rest.request("GET", path, headers={"Authorization": f"Bearer {access_token}"})
        step.calls.append(f"GET /customers/{{id}}/sessions with alice's access token -> {read.status}")
        expect(read.status == 200, f"alice's access token answered {read.status}: {read.body[:200]}")
        step.changes.append("4 forged or stale tokens: 401 and no connection; customer on an agent route: 403")
        self.done(step, started)
