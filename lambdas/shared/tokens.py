"""The one JWT implementation of the app: HS256 only, standard library only.

Both API authorizers (REST TOKEN, WebSocket REQUEST) and ``tools.mint_token`` use it, so a token
minted for one is valid for the other and every check lives in one place.

Usage::

    secret = signing_secret(settings.jwt_secret_id, max_age=300)   # Secrets Manager, cached
    claims = verify(token, secret, issuer=settings.issuer, audience=settings.audience)
    claims.sub, claims.role                                        # "alice", "customer"

``verify`` accepts a token only when: it has exactly three base64url parts, each in its one
canonical spelling (no padding, unused low bits zero); the header is a JSON object whose
``alg`` is ``HS256`` (``none`` and every other algorithm are refused, so a token cannot choose
a weaker check) and whose ``typ``, when present, is ``JWT``; the signature matches
(compared in constant time); ``exp`` is in the future and ``nbf`` (when present) in the past,
both within ``leeway`` seconds; ``iss`` equals ``issuer``; ``aud`` equals ``audience`` or is a
list holding it; ``sub`` matches :data:`SUBJECT_PATTERN` as a whole string; ``role`` is one of :data:`ROLES`.
Every refusal raises :class:`TokenError` with a machine-readable ``reason``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from lambdas.shared.env import once
from lambdas.shared.settings import resource, settings

ALGORITHM: Final = "HS256"
ROLES: Final = ("customer", "agent", "admin")
#: A subject is a customer/agent/admin id; it doubles as ``customer_id`` for customers, so it
#: follows the API's customer id rule and can be embedded in keys and templates unescaped.
SUBJECT_PATTERN: Final = re.compile(r"[A-Za-z0-9-]{1,64}")
MAX_TOKEN_LENGTH: Final = 4096
DEFAULT_LEEWAY_SECONDS: Final = 30
MIN_SECRET_BYTES: Final = 32  # RFC 7518 3.2: an HS256 key must be at least as long as the hash
MAX_TTL_SECONDS: Final = 24 * 3600

_B64URL: Final = re.compile(r"[A-Za-z0-9_-]*")
#: The latest instant a time claim may name (9999-12-31T23:59:59Z); beyond it a claim is refused.
MAX_EPOCH_SECONDS: Final = 253_402_300_799


class TokenError(Exception):
    """A token was refused. ``reason`` is one of the codes below; the message says why.

    Codes: ``missing``, ``malformed``, ``algorithm``, ``signature``, ``expired``,
    ``not_yet_valid``, ``lifetime``, ``issuer``, ``audience``, ``claims``, ``role``.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Claims:
    """The verified claims of a token: the ones every caller needs, plus all of them raw."""

    sub: str
    role: str
    issuer: str
    audience: str
    expires_at: int
    issued_at: int | None = None
    not_before: int | None = None
    raw: Mapping[str, Any] = field(default_factory=dict)


#: What an address must look like to be passed on as the caller's ``email`` (no spaces, one @).
_EMAIL: Final = re.compile(r"[^@\s]{1,64}@[^@\s]{1,190}\.[^@\s]{2,63}")


def verified_email(claims: Claims) -> str | None:
    """The token's ``email`` when it looks like an address and the issuer did not mark it unverified.

    The authorizers pass it on as the caller's address (where notices are mailed); a token without
    one, or with ``email_verified`` false, gives None.
    """
    email, verified = claims.raw.get("email"), claims.raw.get("email_verified", True)
    if not isinstance(email, str) or verified in (False, "false") or not _EMAIL.fullmatch(email):
        return None
    return email


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64decode(part: str) -> bytes:
    """The bytes of a segment written in the one canonical base64url form, else TokenError.

    Canonical: URL-safe alphabet, no padding, and the unused low bits of the last character zero,
    so each segment (and each signature) has exactly one accepted spelling.
    """
    if not _B64URL.fullmatch(part) or len(part) % 4 == 1:
        raise TokenError("malformed", "token segments must be base64url without padding")
    try:
        raw = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    except (binascii.Error, ValueError):
        raise TokenError("malformed", "token segments must be base64url without padding") from None
    if _b64encode(raw) != part:
        raise TokenError("malformed", "token segments must be canonical base64url (unused bits zero)")
    return raw


def _json_object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise TokenError("malformed", f"the token {what} is not JSON") from None
    if not isinstance(value, dict):
        raise TokenError("malformed", f"the token {what} must be a JSON object")
    return value


def _key(secret: str | bytes) -> bytes:
    key = secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)
    if len(key) < MIN_SECRET_BYTES:
        # A configuration error, not a bad token: fail loudly so it is fixed, never "deny".
        raise ValueError(f"the HS256 secret must be at least {MIN_SECRET_BYTES} bytes (given {len(key)})")
    return key


def _sign(signing_input: bytes, key: bytes) -> bytes:
    return hmac.new(key, signing_input, hashlib.sha256).digest()


def _numeric(claims: Mapping[str, Any], name: str, *, required: bool) -> int | None:
    value = claims.get(name)
    if value is None:
        if required:
            raise TokenError("claims", f"the {name} claim is required")
        return None
    # NaN, infinities (``1e400`` parses as inf) and numbers past year 9999 are refused here, so
    # int() never overflows and no comparison below meets a non-finite value.
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or (isinstance(value, float) and not math.isfinite(value))
        or not 0 <= value <= MAX_EPOCH_SECONDS
    ):
        raise TokenError("claims", f"the {name} claim must be a number of seconds since the epoch")
    return int(value)


def verify(
    token: str | None,
    secret: str | bytes,
    *,
    issuer: str,
    audience: str,
    now: float | None = None,
    leeway: int = DEFAULT_LEEWAY_SECONDS,
) -> Claims:
    """The claims of ``token`` if it passes every check in the module docstring, else TokenError."""
    key = _key(secret)
    if not token:
        raise TokenError("missing", "no token was given")
    if not isinstance(token, str) or len(token) > MAX_TOKEN_LENGTH:
        raise TokenError("malformed", f"a token is a string of at most {MAX_TOKEN_LENGTH} characters")
    parts = token.split(".")
    if len(parts) != 3:
        raise TokenError("malformed", "a token has three dot-separated segments")
    header_b64, payload_b64, signature_b64 = parts
    header = _json_object(_b64decode(header_b64), "header")
    if header.get("alg") != ALGORITHM:
        raise TokenError("algorithm", f"only {ALGORITHM} tokens are accepted")
    if "typ" in header and header["typ"] != "JWT":
        raise TokenError("malformed", "the token type must be JWT")
    if "crit" in header:
        raise TokenError("malformed", "critical header extensions are not supported")
    signature = _b64decode(signature_b64)
    expected = _sign(f"{header_b64}.{payload_b64}".encode("ascii"), key)
    if not hmac.compare_digest(signature, expected):
        raise TokenError("signature", "the token signature does not match")
    # Only a correctly signed payload is parsed further.
    claims = _json_object(_b64decode(payload_b64), "payload")

    current = time.time() if now is None else now
    expires_at = _numeric(claims, "exp", required=True)
    not_before = _numeric(claims, "nbf", required=False)
    issued_at = _numeric(claims, "iat", required=False)
    if expires_at is None or current >= expires_at + leeway:
        raise TokenError("expired", "the token has expired")
    if not_before is not None and current + leeway < not_before:
        raise TokenError("not_yet_valid", "the token is not valid yet")
    # The lifetime cap that mint() applies holds for every token, whoever signed it: a token that
    # is still valid for longer than MAX_TTL_SECONDS (or was issued for longer) is refused.
    if expires_at - current > MAX_TTL_SECONDS + leeway:
        raise TokenError("lifetime", f"a token may be valid for at most {MAX_TTL_SECONDS} seconds")
    if issued_at is not None and expires_at - issued_at > MAX_TTL_SECONDS:
        raise TokenError("lifetime", f"a token may be issued for at most {MAX_TTL_SECONDS} seconds")
    if claims.get("iss") != issuer:
        raise TokenError("issuer", "the token was issued by another issuer")
    aud = claims.get("aud")
    if not (aud == audience or (isinstance(aud, list) and audience in aud and all(isinstance(a, str) for a in aud))):
        raise TokenError("audience", "the token is meant for another audience")
    sub = claims.get("sub")
    if not isinstance(sub, str) or not SUBJECT_PATTERN.fullmatch(sub):
        raise TokenError("claims", "the sub claim must match ^[A-Za-z0-9-]{1,64}$")
    role = claims.get("role")
    if role not in ROLES:
        raise TokenError("role", f"the role claim must be one of {', '.join(ROLES)}")
    return Claims(
        sub=sub,
        role=str(role),
        issuer=issuer,
        audience=audience,
        expires_at=expires_at,
        issued_at=issued_at,
        not_before=not_before,
        raw=claims,
    )


def mint(
    *,
    sub: str,
    role: str,
    secret: str | bytes,
    issuer: str,
    audience: str,
    ttl_seconds: int = 3600,
    now: float | None = None,
    extra: Mapping[str, Any] | None = None,
) -> str:
    """A signed HS256 token for ``sub`` with ``role``, valid from now for ``ttl_seconds``.

    Validates what ``verify`` would refuse, so a minted token always verifies (until it expires).
    """
    if not isinstance(sub, str) or not SUBJECT_PATTERN.fullmatch(sub):
        raise ValueError(f"sub must match ^[A-Za-z0-9-]{{1,64}}$ (given {sub!r})")
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)} (given {role!r})")
    if isinstance(ttl_seconds, bool) or not isinstance(ttl_seconds, int) or not 1 <= ttl_seconds <= MAX_TTL_SECONDS:
        raise ValueError(f"ttl_seconds must be 1..{MAX_TTL_SECONDS} (given {ttl_seconds!r})")
    key = _key(secret)
    issued = int(time.time() if now is None else now)
    payload: dict[str, Any] = dict(extra or {})
    payload.update(
        {"sub": sub, "role": role, "iss": issuer, "aud": audience, "iat": issued, "nbf": issued},
    )
    payload["exp"] = issued + ttl_seconds
    header = {"alg": ALGORITHM, "typ": "JWT"}
    segments = [
        _b64encode(json.dumps(header, separators=(",", ":")).encode()),
        _b64encode(json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()),
    ]
    signing_input = ".".join(segments).encode("ascii")
    return ".".join([*segments, _b64encode(_sign(signing_input, key))])


def bearer(header_value: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` value; None when absent or another scheme."""
    if not header_value:
        return None
    scheme, _, token = header_value.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    token = token.strip()
    return token or None


@dataclass(frozen=True)
class VerifierSettings:
    """How an authorizer verifies tokens: the signing secret, who issues them, for whom, how long
    the secret is cached (both the REST and the WebSocket authorizer read exactly these)."""

    secret_arn: str
    issuer: str
    audience: str
    secret_cache_seconds: int


@once
def verifier_settings() -> VerifierSettings:
    """``JWT_SECRET_ARN`` (required) and the stage's ``JWT_ISSUER``, ``JWT_AUDIENCE`` (required here)
    and ``SECRET_CACHE_SECONDS``, read once per container."""
    config = settings()
    return VerifierSettings(
        secret_arn=resource("JWT_SECRET_ARN"),
        issuer=config.need("jwt_issuer"),
        audience=config.need("jwt_audience"),
        secret_cache_seconds=config.secret_cache_seconds,
    )


def signing_secret(secret_id: str, *, max_age: int = 300, provider: Any | None = None) -> str:
    """The signing secret's value from Secrets Manager, cached per container for ``max_age`` s.

    Uses Powertools' ``SecretsProvider`` (its cache honours ``max_age``), so a rotated secret is
    picked up within ``max_age`` seconds without a cold start. ``provider`` lets tests pass one
    bound to a moto client; it defaults to a module-wide provider created on first use.
    """
    chosen = provider if provider is not None else _default_provider()
    value = chosen.get(secret_id, max_age=max_age)
    if isinstance(value, bytes):
        value = value.decode("utf-8")
    if not isinstance(value, str) or not value:
        raise ValueError(f"secret {secret_id!r} holds no string value")
    return value


@once
def _default_provider() -> Any:
    """One Secrets Manager provider per container; ``env.reset()`` forgets it and its cache."""
    from aws_lambda_powertools.utilities.parameters import SecretsProvider

    return SecretsProvider()
