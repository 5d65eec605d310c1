"""Bearer tokens of the stage's identity provider: asymmetric JWTs checked against the issuer's JWKS.

Both API authorizers (REST TOKEN, WebSocket REQUEST) verify with this module, so a token accepted
by one is accepted by the other and every rule lives in one place. The cryptography is PyJWT's
(with ``cryptography``, both in the Powertools layer's ``[all]`` extra); this module decides what
PyJWT may accept and turns the claims into the app's caller: subject, role, verified e-mail.

Usage::

    issuer = issuer_settings()                       # ISSUER_* variables, once per container
    claims = verify(token, issuer, key_set())        # TokenError, or JwksUnavailable
    claims.sub, claims.role                          # "7d0c...", "customer"

``verify`` accepts a token only when: it is a compact JWS of at most :data:`MAX_TOKEN_LENGTH`
characters; its header names a ``kid`` of the issuer's key set and an ``alg`` the issuer allows
(asymmetric only: ``none`` and every HS* are refused before any key is used, so a public key can
never serve as an HMAC secret), which is also the algorithm of that key; the signature verifies;
``exp`` is in the future and ``nbf``/``iat`` (when present) are not, within ``leeway`` seconds,
and the token is not valid for longer than :data:`MAX_LIFETIME_SECONDS`; ``iss`` is the issuer;
``token_use`` (when the issuer sets it, as Cognito does) is an allowed one; the audience is one of
the issuer's clients (``aud`` for ID tokens and other OIDC tokens, ``client_id`` for Cognito access
tokens); ``sub`` matches :data:`SUBJECT_PATTERN` as a whole string; the role claim names exactly
one of :data:`ROLES` (or none, where the issuer has a default role). Each refusal raises
:class:`TokenError` with a machine-readable ``reason``.

Time is read from ``time.time()`` (or ``now``), never from PyJWT's own clock, so the one clock a
test or the embedded stage controls decides expiry for tokens and everything else alike.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import jwt
from jwt.exceptions import InvalidTokenError, PyJWKError
from jwt.utils import base64url_decode, base64url_encode

from contracts.access import ROLES as ROLES
from contracts.environment import ISSUER_VARIABLES as ISSUER_VARIABLES

# From env, not settings: the authorizers need neither the stage settings nor the store (nor boto3).
from lambdas.shared.env import MissingSetting, once, optional_resource, resource

#: A subject is a customer/agent/admin id; it doubles as ``customer_id`` for customers, so it
#: follows the API's customer id rule and can be embedded in keys and templates unescaped
#: (a Cognito ``sub`` is a UUID and fits).
SUBJECT_PATTERN: Final = re.compile(r"[A-Za-z0-9-]{1,64}")
#: Signature algorithms an issuer may be configured with: asymmetric ones only.
ASYMMETRIC_ALGORITHMS: Final = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512"}
)
#: API Gateway takes headers up to 10 KiB; a Cognito ID token with many groups stays far below.
MAX_TOKEN_LENGTH: Final = 8192
DEFAULT_LEEWAY_SECONDS: Final = 30
#: The longest a token may be valid; Cognito's ID and access tokens last at most a day.
MAX_LIFETIME_SECONDS: Final = 24 * 3600
#: The latest instant a time claim may name (9999-12-31T23:59:59Z); beyond it a claim is refused.
MAX_EPOCH_SECONDS: Final = 253_402_300_799
_COMPACT_JWS: Final = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")


class TokenError(Exception):
    """A token was refused. ``reason`` is one of the codes below; the message says why.

    Codes: ``missing``, ``malformed``, ``algorithm``, ``key``, ``signature``, ``expired``,
    ``not_yet_valid``, ``lifetime``, ``issuer``, ``token_use``, ``audience``, ``claims``, ``role``.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class JwksUnavailable(RuntimeError):
    """The issuer's key set could not be fetched or read: the caller denies and logs it."""


@dataclass(frozen=True)
class Issuer:
    """Who issues the tokens the APIs accept, and how their claims map to a caller.

    ``token_uses`` empty: the issuer sets no ``token_use`` (a generic OIDC provider) and ``aud``
    is checked. ``default_role`` is the role of a token whose role claim names none of
    :data:`ROLES` (Cognito users who signed themselves up are in no group); None refuses it.
    """

    issuer: str
    jwks_url: str
    audiences: tuple[str, ...]
    algorithms: tuple[str, ...] = ("RS256",)
    token_uses: tuple[str, ...] = ()
    role_claim: str = "cognito:groups"
    default_role: str | None = None
    leeway: int = DEFAULT_LEEWAY_SECONDS

    def __post_init__(self) -> None:
        weak = sorted(set(self.algorithms) - ASYMMETRIC_ALGORITHMS)
        if not self.algorithms or weak:
            raise ValueError(f"an issuer's algorithms must be asymmetric ones (given {list(self.algorithms)})")
        if not self.audiences:
            raise ValueError("an issuer needs at least one audience (client id)")
        if self.default_role not in (None, "customer"):
            raise ValueError(f"only customer may be a default role (given {self.default_role!r})")


@dataclass(frozen=True)
class Claims:
    """The verified claims of a token: the ones every caller needs, plus all of them raw."""

    sub: str
    role: str
    issuer: str
    audience: str
    expires_at: int
    token_use: str | None = None
    raw: Mapping[str, Any] = field(default_factory=dict)


#: What an address must look like to be passed on as the caller's ``email`` (no spaces, one @).
_EMAIL: Final = re.compile(r"[^@\s]{1,64}@[^@\s]{1,190}\.[^@\s]{2,63}")


def verified_email(claims: Claims) -> str | None:
    """The token's ``email`` when it looks like an address and the issuer marked it verified.

    The authorizers pass it on as the caller's address (where notices are mailed), so it is taken
    from an ID token only: an access token says what its bearer may call, not who they are, and
    an issuer may put a claim named ``email`` into it that nobody verified for this purpose. A
    token whose ``token_use`` is set (Cognito) must be ``id``; a generic OIDC issuer sets none and
    its accepted tokens are ID tokens already (their ``aud`` is the client id). A token without an
    address, or whose ``email_verified`` is not true, gives None.
    """
    if claims.token_use is not None and claims.token_use != "id":  # noqa: S105 - a token kind, not a password
        return None
    email, verified = claims.raw.get("email"), claims.raw.get("email_verified")
    if not isinstance(email, str) or verified not in (True, "true") or not _EMAIL.fullmatch(email):
        return None
    return email


# ------------------------------------------------------------------ the issuer's key set

#: ``(url, timeout seconds) -> body``: how a key set is fetched. The default is urllib's HTTPS
#: client; the embedded stage swaps in its own transport to reach moto's Cognito.
Fetch = Callable[[str, float], bytes]


def http_get(url: str, timeout: float) -> bytes:
    """The body of an HTTPS GET (no other scheme: a key set never comes over plain HTTP)."""
    if not url.startswith("https://"):
        raise JwksUnavailable(f"the key set URL must be https (given {url!r})")
    request = urllib.request.Request(url, headers={"Accept": "application/json"})  # noqa: S310 - https only
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
        body: bytes = response.read(1_000_000)
        return body


class KeySet:
    """The issuer's signing keys, fetched on first use and cached for the container's life.

    A token naming a ``kid`` the cache lacks makes one refetch (keys rotate), but fetches are at
    least ``min_refresh_seconds`` apart, so tokens with made-up ids cannot turn the authorizer into
    a load generator against the issuer. The cache is also refetched when older than
    ``max_age_seconds``, so a key the issuer withdrew stops verifying. A failed fetch never leaves
    an empty key set that would "verify" nothing: it raises :class:`JwksUnavailable`.
    """

    def __init__(
        self,
        url: str,
        *,
        fetch: Fetch | None = None,
        timeout_seconds: float = 3.0,
        min_refresh_seconds: float = 30.0,
        max_age_seconds: float = 6 * 3600,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url
        self._fetch = fetch
        self._timeout = timeout_seconds
        self._min_refresh = min_refresh_seconds
        self._max_age = max_age_seconds
        self._clock = clock
        self._keys: dict[str, jwt.PyJWK] = {}
        self._fetched_at: float | None = None
        self._attempted_at: float | None = None
        self._lock = threading.Lock()
        self.fetches = 0

    def key(self, kid: str) -> jwt.PyJWK:
        """The key ``kid`` names; TokenError ``key`` when the issuer has no such key.

        JwksUnavailable when the key set cannot be had: never fetched successfully, or a refetch
        for an unknown ``kid`` failed. A failed refetch of a merely old cache keeps the keys it has.
        """
        with self._lock:
            now = self._clock()
            unknown = kid not in self._keys
            stale = self._fetched_at is None or now - self._fetched_at >= self._max_age
            due = self._attempted_at is None or now - self._attempted_at >= self._min_refresh
            if (unknown or stale) and due:
                self._attempted_at = now
                try:
                    self._refresh(now)
                except JwksUnavailable:
                    if unknown or not self._keys:
                        raise
            if not self._keys:
                raise JwksUnavailable("the key set has not been fetched yet (the last attempt failed)")
            found = self._keys.get(kid)
        if found is None:
            raise TokenError("key", "the token names a signing key the issuer does not have")
        return found

    def _refresh(self, now: float) -> None:
        self.fetches += 1
        fetch = self._fetch or _transport()
        try:
            document = json.loads(fetch(self.url, self._timeout))
        except JwksUnavailable:
            raise
        except Exception as error:  # network, TLS, HTTP status, JSON: all mean "no keys now"
            raise JwksUnavailable(f"could not fetch the key set: {type(error).__name__}") from error
        entries = document.get("keys") if isinstance(document, dict) else None
        if not isinstance(entries, list):
            raise JwksUnavailable("the key set document has no keys list")
        keys: dict[str, jwt.PyJWK] = {}
        for entry in entries:
            # Only public asymmetric signing keys: an "oct" key would make HS256 possible.
            if not isinstance(entry, dict) or entry.get("kty") not in ("RSA", "EC"):
                continue
            if entry.get("use", "sig") != "sig" or not isinstance(entry.get("kid"), str):
                continue
            if entry.get("alg") is not None and entry["alg"] not in ASYMMETRIC_ALGORITHMS:
                continue
            try:
                keys[entry["kid"]] = jwt.PyJWK(entry)
            except PyJWKError:
                continue
        if not keys:
            raise JwksUnavailable("the key set holds no usable signing key")
        self._keys, self._fetched_at = keys, now


_TRANSPORT: list[Fetch] = [http_get]


def _transport() -> Fetch:
    return _TRANSPORT[0]


def use_transport(fetch: Fetch) -> Callable[[], None]:
    """Fetch every key set through ``fetch`` from now on; returns the call that undoes it.

    For a process that serves several functions against a local identity provider (the embedded
    stage); a deployed function always uses :func:`http_get`.
    """
    previous = _TRANSPORT[0]
    _TRANSPORT[0] = fetch

    def restore() -> None:
        _TRANSPORT[0] = previous

    return restore


# ------------------------------------------------------------------ verification


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


def _canonical(segment: str) -> bool:
    """Whether ``segment`` is the one spelling of its bytes (a token has one string, for caches and logs)."""
    try:
        return base64url_encode(base64url_decode(segment)).decode("ascii") == segment
    except (ValueError, TypeError):
        return False


def _header(token: str, issuer: Issuer) -> tuple[str, str]:
    """The header's ``alg`` and ``kid``, refusing any algorithm the issuer does not allow."""
    try:
        header = jwt.get_unverified_header(token)
    except (InvalidTokenError, ValueError, RecursionError):
        raise TokenError("malformed", "the token header is not a JSON object") from None
    alg, kid = header.get("alg"), header.get("kid")
    if alg not in issuer.algorithms:
        raise TokenError("algorithm", f"only {', '.join(issuer.algorithms)} tokens are accepted")
    if "crit" in header:
        raise TokenError("malformed", "critical header extensions are not supported")
    if not isinstance(kid, str) or not kid:
        raise TokenError("malformed", "the token header names no key id (kid)")
    return str(alg), kid


def _payload(token: str, key: jwt.PyJWK, alg: str) -> dict[str, Any]:
    """The payload, once PyJWT verified the signature with ``key`` (whose algorithm must be ``alg``)."""
    if key.algorithm_name != alg:
        raise TokenError("algorithm", "the token's algorithm is not its key's")
    try:
        # Claims are checked below, on the module's clock: PyJWT checks the signature only.
        payload = jwt.decode(
            token,
            key,
            algorithms=[alg],
            options={"verify_signature": True, "verify_exp": False, "verify_nbf": False, "verify_iat": False,
                     "verify_aud": False, "verify_iss": False, "verify_sub": False, "verify_jti": False},
        )  # fmt: skip
    except jwt.InvalidSignatureError:
        raise TokenError("signature", "the token signature does not verify") from None
    except (InvalidTokenError, ValueError, RecursionError):
        raise TokenError("malformed", "the token payload is not a JSON object") from None
    return dict(payload)


def _times(claims: Mapping[str, Any], current: float, leeway: int) -> int:
    expires_at = _numeric(claims, "exp", required=True)
    not_before = _numeric(claims, "nbf", required=False)
    issued_at = _numeric(claims, "iat", required=False)
    if expires_at is None or current >= expires_at + leeway:
        raise TokenError("expired", "the token has expired")
    for name, value in (("nbf", not_before), ("iat", issued_at)):
        if value is not None and current + leeway < value:
            raise TokenError("not_yet_valid", f"the token is not valid yet ({name} is in the future)")
    if expires_at - current > MAX_LIFETIME_SECONDS + leeway or (
        issued_at is not None and expires_at - issued_at > MAX_LIFETIME_SECONDS
    ):
        raise TokenError("lifetime", f"a token may be valid for at most {MAX_LIFETIME_SECONDS} seconds")
    return expires_at


def _audience(claims: Mapping[str, Any], issuer: Issuer, token_use: str | None) -> str:
    """The client the token was issued to, when it is one of the issuer's audiences."""
    if token_use == "access":  # noqa: S105 - a token kind, not a password
        candidates = [claims.get("client_id")]
    else:
        aud = claims.get("aud")
        candidates = aud if isinstance(aud, list) else [aud]
    for candidate in candidates:
        if isinstance(candidate, str) and candidate in issuer.audiences:
            return candidate
    raise TokenError("audience", "the token is meant for another audience")


def role_of(claims: Mapping[str, Any], issuer: Issuer) -> str:
    """The one role the role claim names (a list of groups or one string), else the default role."""
    value = claims.get(issuer.role_claim)
    names = value if isinstance(value, list) else [value] if isinstance(value, str) else []
    roles = sorted({name for name in names if isinstance(name, str) and name in ROLES})
    if len(roles) > 1:
        raise TokenError("role", f"the token holds more than one role ({', '.join(roles)}); give each user one")
    if roles:
        return roles[0]
    if issuer.default_role is None:
        raise TokenError("role", f"the {issuer.role_claim} claim must name one of {', '.join(ROLES)}")
    return issuer.default_role


def verify(token: str | None, issuer: Issuer, keys: KeySet, *, now: float | None = None) -> Claims:
    """The claims of ``token`` if it passes every check in the module docstring.

    Raises TokenError for a token that must be refused, and JwksUnavailable when the key set
    cannot be had (the caller denies: without keys no token is good).
    """
    if not token:
        raise TokenError("missing", "no token was given")
    if not isinstance(token, str) or len(token) > MAX_TOKEN_LENGTH or not _COMPACT_JWS.fullmatch(token):
        raise TokenError("malformed", f"a token is a compact JWS of at most {MAX_TOKEN_LENGTH} characters")
    alg, kid = _header(token, issuer)
    if not _canonical(token.rsplit(".", 1)[1]):
        # The header and payload are signed as written; only the signature could be respelled.
        raise TokenError("malformed", "the signature must be canonical base64url (unused bits zero)")
    claims = _payload(token, keys.key(kid), alg)

    current = time.time() if now is None else now
    expires_at = _times(claims, current, issuer.leeway)
    if claims.get("iss") != issuer.issuer:
        raise TokenError("issuer", "the token was issued by another issuer")
    token_use = claims.get("token_use")
    if issuer.token_uses and token_use not in issuer.token_uses:
        raise TokenError("token_use", f"only {' or '.join(issuer.token_uses)} tokens are accepted")
    audience = _audience(claims, issuer, token_use if issuer.token_uses else None)
    sub = claims.get("sub")
    if not isinstance(sub, str) or not SUBJECT_PATTERN.fullmatch(sub):
        raise TokenError("claims", "the sub claim must match ^[A-Za-z0-9-]{1,64}$")
    return Claims(
        sub=sub,
        role=role_of(claims, issuer),
        issuer=issuer.issuer,
        audience=audience,
        expires_at=expires_at,
        token_use=str(token_use) if isinstance(token_use, str) else None,
        raw=claims,
    )


def bearer(header_value: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` value; None when absent or another scheme."""
    if not header_value:
        return None
    scheme, _, token = header_value.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    token = token.strip()
    return token or None


# ------------------------------------------------------------------ the container's issuer


def _listed(name: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in (optional_resource(name) or "").split(",") if part.strip())


@once
def issuer_settings() -> Issuer:
    """The stage's issuer from ``ISSUER_*`` (issuer, key set URL and audiences required), once per container."""
    try:
        return Issuer(
            issuer=resource("ISSUER_URL"),
            jwks_url=resource("ISSUER_JWKS_URL"),
            audiences=_listed("ISSUER_AUDIENCES"),
            algorithms=_listed("ISSUER_ALGORITHMS") or ("RS256",),
            token_uses=_listed("ISSUER_ACCEPTED_USES"),
            role_claim=optional_resource("ISSUER_ROLE_CLAIM") or "cognito:groups",
            default_role=optional_resource("ISSUER_DEFAULT_ROLE"),
        )
    except ValueError as error:
        raise MissingSetting(f"the ISSUER_* variables do not describe an issuer: {error}") from None


@once
def key_set() -> KeySet:
    """The issuer's key set, shared by every invocation of the container."""
    return KeySet(issuer_settings().jwks_url)
