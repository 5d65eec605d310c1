"""The token verifier: every check of `verify`, the role mapping, the issuer's key set and its cache."""

from __future__ import annotations

import base64
import io
import json
import urllib.request
from pathlib import Path
from typing import Any

import jwt
import pytest

from lambdas.shared import env, tokens
from lambdas.shared.tokens import (
    Claims,
    Issuer,
    JwksUnavailable,
    KeySet,
    TokenError,
    bearer,
    http_get,
    issuer_settings,
    verified_email,
    verify,
)
from tests.support.identity import TokenIssuer

NOW = 1_767_225_600
ISSUER = TokenIssuer()


def _verify(token: str | None, issuer: TokenIssuer = ISSUER, **overrides: Any) -> Claims:
    return verify(token, issuer.settings(**overrides), issuer.key_set(), now=NOW + 1)


def _reason(token: str | None, issuer: TokenIssuer = ISSUER, **overrides: Any) -> str:
    with pytest.raises(TokenError) as caught:
        _verify(token, issuer, **overrides)
    return caught.value.reason


def _token(sub: str = "alice", **options: Any) -> str:
    return ISSUER.token(sub, now=NOW, **options)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


# ---------------------------------------------------------------- accepted tokens


def test_an_id_token_verifies_with_its_claims() -> None:
    claims = _verify(_token(groups=["agent"], email="alice@example.com"))
    assert (claims.sub, claims.role, claims.token_use) == ("alice", "agent", "id")
    assert (claims.issuer, claims.audience, claims.expires_at) == (ISSUER.issuer, ISSUER.client_id, NOW + 3600)
    assert verified_email(claims) == "alice@example.com"


def test_an_access_token_verifies_by_its_client_id_and_carries_no_address() -> None:
    claims = _verify(_token(token_use="access", groups=["admin"]))
    assert (claims.role, claims.audience, claims.token_use) == ("admin", ISSUER.client_id, "access")
    assert verified_email(claims) is None


def test_an_access_token_gives_no_notice_address_even_with_a_verified_email_claim() -> None:
    # An issuer may add an email claim to access tokens (a pre-token-generation trigger, say): it
    # says what the bearer may call, not where their notices go.
    claims = _verify(_token(token_use="access", email="alice@example.com"))
    assert claims.raw["email"] == "alice@example.com"
    assert claims.raw["email_verified"] is True
    assert verified_email(claims) is None


def test_an_es256_issuer_verifies_its_tokens() -> None:
    issuer = TokenIssuer(alg="ES256", kid="ec-1")
    assert verify(issuer.token("bob", now=NOW), issuer.settings(), issuer.key_set(), now=NOW).sub == "bob"


def test_an_oidc_issuer_without_token_use_checks_aud_and_reads_its_role_claim() -> None:
    # Given a generic OIDC provider: no token_use, the role in a "roles" string claim, aud a list
    claims = ISSUER.claims("carol", now=NOW, groups=None, roles="agent", aud=["other", ISSUER.client_id])
    del claims["token_use"]
    token = ISSUER.sign(claims)
    verified = _verify(token, token_uses=(), role_claim="roles")
    assert (verified.role, verified.token_use, verified.audience) == ("agent", None, ISSUER.client_id)


@pytest.mark.parametrize(
    ("groups", "default", "role"),
    [
        (None, "customer", "customer"),  # a user who signed up is in no group
        ([], "customer", "customer"),
        (["vip", "customer"], None, "customer"),  # groups that are not roles do not count
        (["admin"], "customer", "admin"),
    ],
)
def test_the_role_comes_from_the_groups_or_the_default(
    groups: list[str] | None, default: str | None, role: str
) -> None:
    assert _verify(_token(groups=groups), default_role=default).role == role


def test_fails_on_no_role_without_a_default_and_on_two_roles() -> None:
    assert _reason(_token(groups=None), default_role=None) == "role"
    assert _reason(_token(groups=["vip"]), default_role=None) == "role"
    assert _reason(_token(groups=["agent", "admin"])) == "role"


def test_an_unverified_or_odd_address_is_not_passed_on() -> None:
    unverified = ISSUER.sign(ISSUER.claims("a", now=NOW, email="a@example.com", email_verified=False))
    odd = ISSUER.sign(ISSUER.claims("a", now=NOW, email="not an address"))
    missing_flag = ISSUER.sign({**ISSUER.claims("a", now=NOW), "email": "a@example.com"})
    for token in (unverified, odd, missing_flag):
        assert verified_email(_verify(token)) is None


# ---------------------------------------------------------------- refused tokens


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        (None, "missing"),
        ("", "missing"),
        ("abc", "malformed"),
        ("a.b", "malformed"),
        ("a.b.c.d", "malformed"),
        ("a.b.", "malformed"),
        ("x" * 9000, "malformed"),
        (f"{_b64(b'[1]')}.{_b64(b'{}')}.{_b64(b'sig')}", "malformed"),
        (f"{_b64(b'not json')}.{_b64(b'{}')}.{_b64(b'sig')}", "malformed"),
    ],
)
def test_fails_on_missing_or_malformed(token: str | None, reason: str) -> None:
    assert _reason(token) == reason


def test_fails_on_expired_and_accepts_within_leeway() -> None:
    token = ISSUER.token("alice", now=NOW - 3600, ttl=3600)  # exp == NOW
    assert verify(token, ISSUER.settings(), ISSUER.key_set(), now=NOW + 29).sub == "alice"
    with pytest.raises(TokenError, match="expired"):
        verify(token, ISSUER.settings(), ISSUER.key_set(), now=NOW + 30)


@pytest.mark.parametrize("claim", ["nbf", "iat"])
def test_fails_when_not_yet_valid(claim: str) -> None:
    token = ISSUER.sign({**ISSUER.claims("alice", now=NOW), claim: NOW + 600})
    assert _reason(token) == "not_yet_valid"


def test_fails_on_a_lifetime_longer_than_a_day() -> None:
    assert _reason(_token(ttl=2 * 86400)) == "lifetime"
    stretched = ISSUER.sign({**ISSUER.claims("alice", now=NOW), "iat": NOW - 86400, "exp": NOW + 600})
    assert _reason(stretched) == "lifetime"


@pytest.mark.parametrize(
    ("claims", "reason"),
    [
        ({"iss": "https://cognito-idp.us-east-1.amazonaws.com/us-east-1_Other"}, "issuer"),
        ({"iss": None}, "issuer"),
        ({"aud": "another-client"}, "audience"),
        ({"aud": ["another-client"]}, "audience"),
        ({"token_use": "refresh"}, "token_use"),
        ({"token_use": None}, "token_use"),
        ({"sub": "alice bob"}, "claims"),
        ({"sub": "alice\n"}, "claims"),
        ({"sub": "a" * 65}, "claims"),
        ({"sub": None}, "claims"),
        ({"exp": None}, "claims"),
        ({"exp": "soon"}, "claims"),
        ({"exp": True}, "claims"),
    ],
)
def test_fails_on_wrong_claims(claims: dict[str, Any], reason: str) -> None:
    payload = {**ISSUER.claims("alice", now=NOW), **claims}
    assert _reason(ISSUER.sign({k: v for k, v in payload.items() if v is not None})) == reason


def test_an_access_token_needs_our_client_id() -> None:
    payload = ISSUER.claims("alice", now=NOW, token_use="access")
    assert _reason(ISSUER.sign({**payload, "client_id": "another-client"})) == "audience"
    # An access token's aud, were it set, does not stand in for its client_id
    del payload["client_id"]
    assert _reason(ISSUER.sign({**payload, "aud": ISSUER.client_id})) == "audience"


def test_fails_on_a_token_of_another_issuer_signed_with_the_same_kid() -> None:
    # Given an impostor with its own key who copies our kid and our claims
    impostor = TokenIssuer(key_name="impostor")
    token = impostor.sign(ISSUER.claims("alice", now=NOW, groups=["admin"]))
    # Then the signature does not verify with our key
    assert _reason(token) == "signature"


def test_fails_on_an_unknown_kid_and_on_a_missing_one() -> None:
    assert _reason(ISSUER.sign(ISSUER.claims("alice", now=NOW), headers={"kid": "other"})) == "key"
    no_kid = jwt.encode(ISSUER.claims("alice", now=NOW), ISSUER.private_key, algorithm="RS256")
    assert _reason(no_kid) == "malformed"


def test_fails_on_tampered_payload_and_signature() -> None:
    head, body, sig = _token().split(".")
    claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    claims["cognito:groups"] = ["admin"]
    assert _reason(f"{head}.{_b64(json.dumps(claims).encode())}.{sig}") == "signature"
    tampered = ("A" if sig[0] != "A" else "B") + sig[1:]
    assert _reason(f"{head}.{body}.{tampered}") == "signature"


def test_fails_on_hs256_signed_with_the_public_key_as_secret() -> None:
    # The key-confusion attack: a verifier that let the token choose HMAC would accept this
    token = ISSUER.hs256_with_public_key(ISSUER.claims("mallory", now=NOW, groups=["admin"]))
    assert _reason(token) == "algorithm"


@pytest.mark.parametrize("alg", ["none", "HS256", "HS512", "ES256", "RS512", None])
def test_fails_on_any_algorithm_the_issuer_does_not_use(alg: str | None) -> None:
    _, body, sig = _token().split(".")
    head = _b64(json.dumps({"alg": alg, "kid": ISSUER.kid, "typ": "JWT"}).encode())
    assert _reason(f"{head}.{body}.{sig}") == "algorithm"
    assert _reason(f"{head}.{body}.") == "malformed"


def test_fails_when_the_algorithm_is_not_the_keys() -> None:
    # Given an issuer configured for RS256 and RS512 whose key is published for RS256 only
    token = jwt.encode(
        ISSUER.claims("alice", now=NOW), ISSUER.private_key, algorithm="RS512", headers={"kid": ISSUER.kid}
    )
    assert _reason(token, algorithms=("RS256", "RS512")) == "algorithm"


def test_fails_on_critical_header_extensions() -> None:
    token = ISSUER.sign(ISSUER.claims("alice", now=NOW), headers={"crit": ["exp"], "exp": 1})
    assert _reason(token) == "malformed"


_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def test_fails_on_a_signature_whose_unused_low_bits_are_set() -> None:
    # A 256-byte signature leaves two bits of its last character unused: one token, one spelling
    head, body, sig = _token().split(".")
    flipped = sig[:-1] + _ALPHABET[_ALPHABET.index(sig[-1]) ^ 1]
    assert base64.urlsafe_b64decode(flipped + "==") == base64.urlsafe_b64decode(sig + "==")
    assert _verify(f"{head}.{body}.{sig}").sub == "alice"
    assert _reason(f"{head}.{body}.{flipped}") == "malformed"
    assert _reason(f"{head}.{body}.{sig}=") == "malformed"


@pytest.mark.parametrize("claim", ["exp", "nbf", "iat"])
@pytest.mark.parametrize("value", ["1e400", "-1e400", "1e308", "NaN", "Infinity", "-1", "1" + "0" * 400])
def test_fails_on_huge_or_non_finite_time_claims_without_raising_anything_else(claim: str, value: str) -> None:
    # Given a correctly signed payload whose time claim is written as raw JSON (1e400 parses as inf)
    head = _b64(json.dumps({"alg": "RS256", "kid": ISSUER.kid}).encode())
    body = json.dumps({**ISSUER.claims("alice", now=NOW), claim: 0}).replace(f'"{claim}": 0', f'"{claim}": {value}')
    signing_input = f"{head}.{_b64(body.encode())}".encode()
    signature = jwt.algorithms.RSAAlgorithm(jwt.algorithms.RSAAlgorithm.SHA256).sign(signing_input, ISSUER.private_key)
    # Then it is a refused token (TokenError), never OverflowError or ValueError
    assert _reason(f"{signing_input.decode()}.{_b64(signature)}") in {"claims", "expired", "lifetime"}


@pytest.mark.parametrize(
    ("value", "token"),
    [("Bearer abc", "abc"), ("bearer  abc ", "abc"), ("Basic abc", None), ("Bearer", None), ("", None), (None, None)],
)
def test_bearer_extracts_the_token(value: str | None, token: str | None) -> None:
    assert bearer(value) == token


# ---------------------------------------------------------------- the issuer's settings


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"algorithms": ("HS256",)}, "asymmetric"),
        ({"algorithms": ("RS256", "none")}, "asymmetric"),
        ({"algorithms": ()}, "asymmetric"),
        ({"audiences": ()}, "audience"),
        ({"default_role": "admin"}, "default role"),
    ],
)
def test_fails_to_describe_an_issuer_that_would_accept_too_much(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ISSUER.settings(**overrides)


def test_issuer_settings_come_from_the_token_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {**ISSUER.variables(), "ISSUER_AUDIENCES": "web, mobile", "ISSUER_DEFAULT_ROLE": ""}.items():
        monkeypatch.setenv(name, value)
    env.reset()
    issuer = issuer_settings()
    assert issuer == Issuer(
        issuer=ISSUER.issuer,
        jwks_url=ISSUER.jwks_url,
        audiences=("web", "mobile"),
        token_uses=("id", "access"),
        default_role=None,
    )
    monkeypatch.setenv("ISSUER_ALGORITHMS", "HS256")
    env.reset()
    with pytest.raises(env.MissingSetting, match="asymmetric"):
        issuer_settings()
    monkeypatch.delenv("ISSUER_URL")
    env.reset()
    with pytest.raises(env.MissingSetting, match="ISSUER_URL"):
        issuer_settings()
    env.reset()


# ---------------------------------------------------------------- the key set


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_key_set_is_fetched_lazily_once_then_served_from_the_cache() -> None:
    issuer, clock = TokenIssuer(), Clock()
    keys = issuer.key_set(clock=clock)
    assert issuer.fetches == 0
    for _ in range(5):
        verify(issuer.token("a", now=NOW), issuer.settings(), keys, now=NOW)
    assert issuer.fetches == 1


def test_an_unknown_kid_refetches_at_most_once_per_interval_and_finds_a_rotated_key() -> None:
    # Given a cached key set
    issuer, clock = TokenIssuer(), Clock()
    keys = issuer.key_set(clock=clock, min_refresh_seconds=30)
    verify(issuer.token("a", now=NOW), issuer.settings(), keys, now=NOW)
    # When the issuer rotates to a new key
    issuer.kid, issuer.private_key = "test-key-2", TokenIssuer(key_name="rotated").private_key
    rotated = issuer.token("a", now=NOW)
    # Then within the interval no refetch happens (made-up kids cannot drive fetches)
    clock.now += 10
    with pytest.raises(TokenError, match="signing key"):
        verify(rotated, issuer.settings(), keys, now=NOW)
    assert issuer.fetches == 1
    # And after it the new kid makes one refetch and verifies
    clock.now += 30
    assert verify(rotated, issuer.settings(), keys, now=NOW).sub == "a"
    assert issuer.fetches == 2


def test_an_old_key_set_is_refetched_and_a_withdrawn_key_stops_verifying() -> None:
    issuer, clock = TokenIssuer(), Clock()
    keys = issuer.key_set(clock=clock, max_age_seconds=3600)
    old = issuer.token("a", now=NOW)
    verify(old, issuer.settings(), keys, now=NOW)
    issuer.kid, issuer.private_key = "test-key-2", TokenIssuer(key_name="rotated").private_key
    clock.now += 3600
    with pytest.raises(TokenError, match="signing key"):
        verify(old, issuer.settings(), keys, now=NOW)
    assert issuer.fetches == 2


def test_a_failed_fetch_is_unavailable_never_an_empty_key_set() -> None:
    def broken(url: str, timeout: float) -> bytes:
        raise OSError("connection refused")

    keys = KeySet(ISSUER.jwks_url, fetch=broken)
    with pytest.raises(JwksUnavailable, match="OSError"):
        keys.key(ISSUER.kid)
    # Within the refresh interval it does not retry, and still says unavailable (not "unknown key")
    with pytest.raises(JwksUnavailable):
        keys.key(ISSUER.kid)


def test_an_old_cache_keeps_serving_when_the_issuer_is_unreachable() -> None:
    issuer, clock = TokenIssuer(), Clock()
    keys = issuer.key_set(clock=clock, max_age_seconds=60)
    token = issuer.token("a", now=NOW)
    verify(token, issuer.settings(), keys, now=NOW)
    keys._fetch = lambda url, timeout: b"<html>down</html>"
    clock.now += 120
    assert verify(token, issuer.settings(), keys, now=NOW).sub == "a"
    # But a kid it has never seen cannot be verified: unavailable, so the caller denies and logs
    clock.now += 60
    with pytest.raises(JwksUnavailable):
        keys.key("never-seen")


@pytest.mark.parametrize(
    "document",
    [
        b"not json",
        b"[]",
        b'{"keys": "x"}',
        b'{"keys": []}',
        # Only symmetric or unusable keys: an "oct" key would let HS256 in
        json.dumps({"keys": [{"kty": "oct", "kid": "k", "k": "c2VjcmV0"}]}).encode(),
        json.dumps({"keys": [{"kty": "RSA", "kid": "k", "n": "AQAB", "e": "AQAB", "use": "enc"}]}).encode(),
        json.dumps({"keys": [{"kty": "RSA", "kid": "k", "alg": "HS256", "n": "AQAB", "e": "AQAB"}]}).encode(),
    ],
)
def test_a_key_set_without_a_usable_signing_key_is_unavailable(document: bytes) -> None:
    keys = KeySet(ISSUER.jwks_url, fetch=lambda url, timeout: document)
    with pytest.raises(JwksUnavailable):
        keys.key("k")


def test_the_default_transport_only_speaks_https(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(JwksUnavailable, match="https"):
        http_get("http://cognito-idp.example/jwks.json", 1.0)
    # An https URL is fetched, with the timeout given
    asked: list[tuple[str, float]] = []

    class Answer(io.BytesIO):
        def __enter__(self) -> Answer:
            return self

        def __exit__(self, *_: object) -> None:
            self.close()

    def urlopen(request: urllib.request.Request, timeout: float) -> Answer:
        asked.append((request.full_url, timeout))
        return Answer(b'{"keys": []}')

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    assert http_get("https://cognito-idp.example/jwks.json", 2.5) == b'{"keys": []}'
    assert asked == [("https://cognito-idp.example/jwks.json", 2.5)]


def test_a_transport_may_be_swapped_and_restored() -> None:
    restore = tokens.use_transport(ISSUER.fetch)
    try:
        keys = KeySet(ISSUER.jwks_url)
        assert keys.key(ISSUER.kid).key_id == ISSUER.kid
    finally:
        restore()
    assert tokens._transport() is http_get


def test_the_security_document_states_the_token_length_the_code_enforces() -> None:
    document = (Path(__file__).resolve().parents[3] / "docs" / "security.md").read_text(encoding="utf-8")
    (row,) = [line for line in document.splitlines() if line.startswith("| JWT |")]
    assert f"at most {tokens.MAX_TOKEN_LENGTH:,} characters" in row
    token = ISSUER.token("alice", now=NOW)
    assert _reason(token + "A" * (tokens.MAX_TOKEN_LENGTH + 1 - len(token))) == "malformed"
