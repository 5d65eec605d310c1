"""A token issuer for tests: its own key pair, its JWKS, and tokens shaped like Cognito's.

Unit tests of the verifier and the authorizers use it where the embedded stage would use moto's
Cognito: a test can sign anything (an expired token, another issuer, a wrong key, HS256 signed
with the public key as secret), which a real identity provider would never hand out.

Usage::

    issuer = TokenIssuer()
    token = issuer.token("alice", groups=["customer"], email="alice@example.com")
    claims = verify(token, issuer.settings(), issuer.key_set())
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from embedded.runtime import Invocation
from lambdas.api.authorizer import Unauthorized
from lambdas.shared import env, tokens
from lambdas.shared.tokens import Issuer, KeySet

ISSUER_URL = "https://cognito-idp.us-east-1.amazonaws.com/us-east-1_TestPool"
CLIENT_ID = "test-client-1"


@functools.cache
def rsa_key(name: str = "default") -> rsa.RSAPrivateKey:
    """One 2048-bit RSA key per name for the whole test run (generating one takes a while)."""
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@functools.cache
def ec_key(name: str = "default") -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


class TokenIssuer:
    """Signs tokens with a private key and publishes the public half as a JWKS."""

    def __init__(
        self,
        issuer: str = ISSUER_URL,
        client_id: str = CLIENT_ID,
        *,
        kid: str = "test-key-1",
        key_name: str = "default",
        alg: str = "RS256",
    ) -> None:
        self.issuer, self.client_id, self.kid, self.alg = issuer, client_id, kid, alg
        self.private_key: Any = ec_key(key_name) if alg.startswith("ES") else rsa_key(key_name)
        self.fetches = 0

    @property
    def jwks_url(self) -> str:
        return f"{self.issuer}/.well-known/jwks.json"

    def jwk(self) -> dict[str, Any]:
        """The public key as a JWK, as Cognito publishes it."""
        algorithm = jwt.algorithms.ECAlgorithm if self.alg.startswith("ES") else jwt.algorithms.RSAAlgorithm
        public = json.loads(algorithm.to_jwk(self.private_key.public_key()))
        return {**public, "kid": self.kid, "alg": self.alg, "use": "sig"}

    def jwks(self) -> dict[str, Any]:
        return {"keys": [self.jwk()]}

    def public_pem(self) -> bytes:
        return bytes(
            self.private_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )

    def fetch(self, url: str, timeout: float) -> bytes:
        """A key set transport that answers this issuer's JWKS URL (and nothing else)."""
        self.fetches += 1
        if url != self.jwks_url:
            raise OSError(f"no route to {url}")
        return json.dumps(self.jwks()).encode()

    def key_set(self, **options: Any) -> KeySet:
        return KeySet(self.jwks_url, fetch=self.fetch, **options)

    def settings(self, **overrides: Any) -> Issuer:
        """The verifier's view of this issuer, as the stage configures a Cognito pool."""
        values: dict[str, Any] = {
            "issuer": self.issuer,
            "jwks_url": self.jwks_url,
            "audiences": (self.client_id,),
            "algorithms": (self.alg,),
            "token_uses": ("id", "access"),
            "role_claim": "cognito:groups",
            "default_role": "customer",
        }
        values.update(overrides)
        return Issuer(**values)

    def variables(self) -> dict[str, str]:
        """The ``ISSUER_*`` variables the stage sets on both authorizers for a Cognito pool like this issuer."""
        return {
            "ISSUER_URL": self.issuer,
            "ISSUER_JWKS_URL": self.jwks_url,
            "ISSUER_AUDIENCES": self.client_id,
            "ISSUER_ALGORITHMS": self.alg,
            "ISSUER_ACCEPTED_USES": "id,access",
            "ISSUER_ROLE_CLAIM": "cognito:groups",
            "ISSUER_DEFAULT_ROLE": "customer",
        }

    @contextmanager
    def serving(self, monkeypatch: pytest.MonkeyPatch) -> Iterator[TokenIssuer]:
        """An authorizer's environment for this issuer, whose key set this issuer serves, inside the block."""
        for name, value in self.variables().items():
            monkeypatch.setenv(name, value)
        env.reset()
        restore = tokens.use_transport(self.fetch)
        try:
            yield self
        finally:
            restore()
            env.reset()

    def claims(
        self,
        sub: str,
        *,
        groups: Sequence[str] | None = ("customer",),
        token_use: str = "id",  # noqa: S107 - a token kind
        email: str | None = None,
        now: float | None = None,
        ttl: int = 3600,
        **extra: Any,
    ) -> dict[str, Any]:
        """The claims Cognito puts in an ID (``aud``) or access (``client_id``) token."""
        issued = int(time.time() if now is None else now)
        claims: dict[str, Any] = {
            "sub": sub,
            "iss": self.issuer,
            "token_use": token_use,
            "iat": issued,
            "auth_time": issued,
            "exp": issued + ttl,
            "jti": f"jti-{sub}-{issued}",
        }
        claims["aud" if token_use == "id" else "client_id"] = self.client_id
        if groups is not None:
            claims["cognito:groups"] = list(groups)
        if email is not None:
            claims.update({"email": email, "email_verified": True})
        claims.update(extra)
        return claims

    def sign(self, claims: dict[str, Any], *, headers: dict[str, Any] | None = None) -> str:
        return jwt.encode(claims, self.private_key, algorithm=self.alg, headers={"kid": self.kid, **(headers or {})})

    def token(self, sub: str, **options: Any) -> str:
        return self.sign(self.claims(sub, **options))

    def hs256_with_public_key(self, claims: dict[str, Any]) -> str:
        """The key-confusion attack: HS256 whose HMAC secret is the issuer's public key (PEM)."""
        return _hmac_token(claims, self.public_pem(), self.kid)


def _hmac_token(claims: dict[str, Any], secret: bytes, kid: str) -> str:
    """PyJWT refuses a PEM as an HMAC key, so the attack token is assembled by hand."""
    import base64
    import hashlib
    import hmac

    def part(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    head = part(json.dumps({"alg": "HS256", "typ": "JWT", "kid": kid}).encode())
    body = part(json.dumps(claims).encode())
    signature = hmac.new(secret, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{part(signature)}"


def refusal(call: Invocation) -> bool:
    """The REST authorizer refusing a token: the failure API Gateway answers 401, not a fault."""
    return call.handler == "lambdas.api.authorizer.handler" and isinstance(call.error, Unauthorized)
