"""The one JWT implementation: every check of `verify`, `mint` round trips, the cached secret."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from lambdas.shared import env
from lambdas.shared.tokens import (
    Claims,
    TokenError,
    bearer,
    mint,
    signing_secret,
    verify,
)

SECRET = "s" * 48
ISS = "https://auth.test"
AUD = "test-api"
NOW = 1_767_225_600


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _forge(header: dict[str, Any], payload: dict[str, Any], secret: str = SECRET) -> str:
    """A token signed with HMAC-SHA256 over arbitrary header and payload (for negative cases)."""
    head = _b64(json.dumps(header).encode())
    body = _b64(json.dumps(payload).encode())
    sig = hmac.new(secret.encode(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{_b64(sig)}"


def _payload(**overrides: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "sub": "alice",
        "role": "customer",
        "iss": ISS,
        "aud": AUD,
        "iat": NOW,
        "nbf": NOW,
        "exp": NOW + 600,
    }
    payload.update(overrides)
    return {k: v for k, v in payload.items() if v is not None}


def _verify(token: str | None, **kw: Any) -> Claims:
    return verify(token, SECRET, issuer=ISS, audience=AUD, now=kw.pop("now", NOW + 1), **kw)


def _reason(token: str | None, **kw: Any) -> str:
    with pytest.raises(TokenError) as caught:
        _verify(token, **kw)
    return caught.value.reason


def test_minted_token_verifies_with_its_claims() -> None:
    token = mint(sub="alice", role="agent", secret=SECRET, issuer=ISS, audience=AUD, now=NOW, ttl_seconds=60)
    claims = _verify(token)
    assert (claims.sub, claims.role, claims.issuer, claims.audience) == ("alice", "agent", ISS, AUD)
    assert (claims.issued_at, claims.not_before, claims.expires_at) == (NOW, NOW, NOW + 60)


def test_forged_valid_token_verifies() -> None:
    assert _verify(_forge({"alg": "HS256", "typ": "JWT"}, _payload())).sub == "alice"


def test_audience_may_be_a_list_holding_ours() -> None:
    assert _verify(_forge({"alg": "HS256"}, _payload(aud=["other", AUD]))).role == "customer"


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        (None, "missing"),
        ("", "missing"),
        ("abc", "malformed"),
        ("a.b", "malformed"),
        ("a.b.c.d", "malformed"),
        ("!!!.e30.e30", "malformed"),
        (f"{_b64(b'not json')}.e30.e30", "malformed"),
        (f"{_b64(b'[1]')}.e30.e30", "malformed"),
        ("x" * 5000, "malformed"),
    ],
)
def test_fails_on_missing_or_malformed(token: str | None, reason: str) -> None:
    assert _reason(token) == reason


def test_fails_on_expired_and_accepts_within_leeway() -> None:
    token = _forge({"alg": "HS256"}, _payload(exp=NOW + 10))
    assert _verify(token, now=NOW + 10 + 29).sub == "alice"
    assert _reason(token, now=NOW + 10 + 30) == "expired"


def test_fails_on_a_lifetime_longer_than_mint_allows() -> None:
    # Signed with the right secret, but valid for a year: refused, whoever minted it
    assert _reason(_forge({"alg": "HS256"}, _payload(exp=NOW + 365 * 86400))) == "lifetime"
    # Issued for 2 days, even when checked near its end
    long_issued = _forge({"alg": "HS256"}, _payload(iat=NOW, exp=NOW + 2 * 86400))
    assert _reason(long_issued, now=NOW + 2 * 86400 - 60) == "lifetime"
    # Exactly the cap is accepted
    assert _verify(_forge({"alg": "HS256"}, _payload(exp=NOW + 24 * 3600))).sub == "alice"


def test_fails_when_not_yet_valid() -> None:
    token = _forge({"alg": "HS256"}, _payload(nbf=NOW + 100))
    assert _reason(token, now=NOW) == "not_yet_valid"
    assert _verify(token, now=NOW + 80).sub == "alice"


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (_payload(aud="someone-else"), "audience"),
        (_payload(aud=["a", "b"]), "audience"),
        (_payload(aud=None), "audience"),
        (_payload(iss="https://evil"), "issuer"),
        (_payload(iss=None), "issuer"),
        (_payload(exp=None), "claims"),
        (_payload(exp="tomorrow"), "claims"),
        (_payload(exp=True), "claims"),
        (_payload(sub=None), "claims"),
        (_payload(sub="a/b"), "claims"),
        (_payload(sub="x" * 65), "claims"),
        (_payload(role="root"), "role"),
        (_payload(role=None), "role"),
    ],
)
def test_fails_on_wrong_claims(payload: dict[str, Any], reason: str) -> None:
    assert _reason(_forge({"alg": "HS256"}, payload)) == reason


def test_fails_on_tampered_payload() -> None:
    # Given a valid token whose payload is swapped for one claiming the admin role
    head, _, sig = _forge({"alg": "HS256"}, _payload()).split(".")
    evil = _b64(json.dumps(_payload(role="admin")).encode())
    # When / Then the signature no longer matches
    assert _reason(f"{head}.{evil}.{sig}") == "signature"


def test_fails_on_tampered_signature() -> None:
    head, body, sig = _forge({"alg": "HS256"}, _payload()).split(".")
    flipped = _b64(bytes([base64.urlsafe_b64decode(sig + "=")[0] ^ 1]) + base64.urlsafe_b64decode(sig + "=")[1:])
    assert _reason(f"{head}.{body}.{flipped}") == "signature"
    assert _reason(f"{head}.{body}.") == "signature"


def test_fails_on_another_secret() -> None:
    assert _reason(_forge({"alg": "HS256"}, _payload(), secret="t" * 48)) == "signature"


@pytest.mark.parametrize("alg", ["none", "None", "NONE", "HS512", "HS384", "RS256", "ES256", "", None])
def test_fails_on_any_algorithm_but_hs256(alg: str | None) -> None:
    # An unsigned token ("alg": "none", empty signature) and any other algorithm are refused
    head = _b64(json.dumps({"alg": alg, "typ": "JWT"}).encode())
    body = _b64(json.dumps(_payload()).encode())
    assert _reason(f"{head}.{body}.") == "algorithm"
    assert _reason(_forge({"alg": alg}, _payload())) == "algorithm"


def test_fails_on_wrong_typ_or_crit() -> None:
    assert _reason(_forge({"alg": "HS256", "typ": "JWE"}, _payload())) == "malformed"
    assert _reason(_forge({"alg": "HS256", "crit": ["b64"]}, _payload())) == "malformed"


def test_fails_fast_on_a_short_secret() -> None:
    with pytest.raises(ValueError, match="at least 32 bytes"):
        verify("a.b.c", "short", issuer=ISS, audience=AUD)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"sub": "bad sub"}, "sub must match"),
        ({"role": "root"}, "role must be one of"),
        ({"ttl_seconds": 0}, "ttl_seconds must be"),
        ({"ttl_seconds": 10**6}, "ttl_seconds must be"),
    ],
)
def test_fails_to_mint_what_verify_would_refuse(kwargs: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {"sub": "alice", "role": "customer", "secret": SECRET, "issuer": ISS, "audience": AUD}
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        mint(**args)


@pytest.mark.parametrize(
    ("value", "token"),
    [("Bearer abc", "abc"), ("bearer  abc ", "abc"), ("Basic abc", None), ("Bearer", None), ("", None), (None, None)],
)
def test_bearer_extracts_the_token(value: str | None, token: str | None) -> None:
    assert bearer(value) == token


@pytest.fixture
def secrets_client() -> Iterator[Any]:
    with mock_aws():
        env.reset()
        yield boto3.client("secretsmanager", region_name="us-east-1")
        env.reset()


def test_signing_secret_is_fetched_once_then_cached(secrets_client: Any) -> None:
    # Given a secret in Secrets Manager
    arn = secrets_client.create_secret(Name="jwt", SecretString=SECRET)["ARN"]
    # When it is read, then rotated and read again within max_age
    first = signing_secret(arn, max_age=300)
    secrets_client.put_secret_value(SecretId=arn, SecretString="r" * 48)
    second = signing_secret(arn, max_age=300)
    # Then the cached value is served; a new container (reset) reads the rotated one
    assert first == second == SECRET
    env.reset()
    assert signing_secret(arn, max_age=300) == "r" * 48


def test_mint_token_tool_prints_a_token_the_stage_accepts(capsys: pytest.CaptureFixture[str]) -> None:
    # Given the dev stage's issuer and audience from cdk.json
    from tools.mint_token import main, stage_config

    config = stage_config("dev")
    # When a token is minted on the command line
    assert main(["--sub", "alice", "--role", "agent", "--secret", SECRET]) == 0
    token = capsys.readouterr().out.strip()
    # Then it verifies against the stage's settings with the same secret
    claims = verify(token, SECRET, issuer=config.jwt_issuer, audience=config.jwt_audience)
    assert (claims.sub, claims.role) == ("alice", "agent")


def test_mint_token_tool_fails_on_a_bad_role(capsys: pytest.CaptureFixture[str]) -> None:
    from tools.mint_token import main

    with pytest.raises(SystemExit):
        main(["--sub", "alice", "--role", "root", "--secret", SECRET])
    assert "invalid choice" in capsys.readouterr().err


_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def test_fails_on_a_signature_whose_unused_low_bits_are_set() -> None:
    # Given a valid token; its 43-character signature leaves two bits of the last character unused
    head, body, sig = mint(sub="alice", role="customer", secret=SECRET, issuer=ISS, audience=AUD, now=NOW).split(".")
    flipped = sig[:-1] + _ALPHABET[_ALPHABET.index(sig[-1]) ^ 1]
    assert base64.urlsafe_b64decode(flipped + "=") == base64.urlsafe_b64decode(sig + "=")
    # Then only the canonical spelling verifies
    assert _verify(f"{head}.{body}.{sig}").sub == "alice"
    assert _reason(f"{head}.{body}.{flipped}") == "malformed"


def test_fails_on_a_padded_or_standard_alphabet_segment() -> None:
    head, body, sig = mint(sub="alice", role="customer", secret=SECRET, issuer=ISS, audience=AUD, now=NOW).split(".")
    standard = base64.b64encode(base64.urlsafe_b64decode(sig + "=")).decode()
    assert _reason(f"{head}.{body}.{sig}=") == "malformed"
    assert _reason(f"{head}.{body}.{standard}") == "malformed"


def test_fails_on_a_subject_with_a_trailing_newline() -> None:
    assert _reason(_forge({"alg": "HS256"}, _payload(sub="alice\n"))) == "claims"
    with pytest.raises(ValueError, match="sub must match"):
        mint(sub="alice\n", role="customer", secret=SECRET, issuer=ISS, audience=AUD)


@pytest.mark.parametrize("claim", ["exp", "nbf", "iat"])
@pytest.mark.parametrize("value", ["1e400", "-1e400", "1e308", "NaN", "Infinity", "-1", "1" + "0" * 400])
def test_fails_on_huge_or_non_finite_time_claims_without_raising_anything_else(claim: str, value: str) -> None:
    # Given a correctly signed payload whose time claim is written as raw JSON (1e400 parses as inf)
    payload = json.dumps(_payload(**{claim: 0})).replace(f'"{claim}": 0', f'"{claim}": {value}')
    head = _b64(json.dumps({"alg": "HS256"}).encode())
    body = _b64(payload.encode())
    sig = hmac.new(SECRET.encode(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    # Then it is a refused token (TokenError), never OverflowError or ValueError
    assert _reason(f"{head}.{body}.{_b64(sig)}") in {"claims", "expired", "lifetime"}
