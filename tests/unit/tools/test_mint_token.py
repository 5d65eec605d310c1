"""The dev sign-in helper against a user pool on moto: what it prints, what it refuses, what it never prints."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from embedded.services.cognito import fetch_over_mock
from lambdas.shared.tokens import Issuer, KeySet, verify
from tools import mint_token

PASSWORD = "Dev-User-Passw0rd!"
REGION = "us-east-1"


@pytest.fixture
def pool(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """A pool shaped like the stage's (e-mail user names, role groups, admin password sign-in) on moto."""
    with mock_aws():
        cognito = boto3.client("cognito-idp", region_name=REGION)
        pool_id = cognito.create_user_pool(PoolName="dev-users", UsernameAttributes=["email"])["UserPool"]["Id"]
        client_id = cognito.create_user_pool_client(
            UserPoolId=pool_id,
            ClientName="app",
            ExplicitAuthFlows=["ALLOW_USER_SRP_AUTH", "ALLOW_ADMIN_USER_PASSWORD_AUTH", "ALLOW_REFRESH_TOKEN_AUTH"],
            ReadAttributes=["email", "email_verified"],
        )["UserPoolClient"]["ClientId"]
        for role in ("customer", "agent", "admin"):
            cognito.create_group(UserPoolId=pool_id, GroupName=role)
        monkeypatch.setenv(mint_token.PASSWORD_VARIABLE, PASSWORD)
        yield {"cognito": cognito, "pool_id": pool_id, "client_id": client_id}


def _run(pool: dict[str, Any], *args: str) -> int:
    argv = ["--user-pool-id", pool["pool_id"], "--client-id", pool["client_id"], *args]
    return mint_token.main(argv, session=boto3.session.Session(region_name=REGION))


def _verify(pool: dict[str, Any], token: str) -> Any:
    issuer = f"https://cognito-idp.{REGION}.amazonaws.com/{pool['pool_id']}"
    settings = Issuer(
        issuer=issuer,
        jwks_url=f"{issuer}/.well-known/jwks.json",
        audiences=(pool["client_id"],),
        token_uses=("id", "access"),
        default_role="customer",
    )
    return verify(token, settings, KeySet(settings.jwks_url, fetch=fetch_over_mock))


def test_creates_a_user_in_its_role_and_prints_only_a_token_the_stage_accepts(
    pool: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    # When a new agent is created and signed in
    assert _run(pool, "--email", "seven@example.com", "--role", "agent", "--create") == 0
    out, err = capsys.readouterr()
    # Then standard output is one token, verified by the authorizers' own verifier, in the role
    token = out.strip()
    claims = _verify(pool, token)
    assert (claims.role, claims.token_use, claims.raw["email"]) == ("agent", "id", "seven@example.com")
    # And neither the password nor a refresh token was printed anywhere
    assert PASSWORD not in out + err
    assert out.count("\n") == 1


def test_signs_an_existing_user_in_again_and_prints_the_access_token_on_request(
    pool: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(pool, "--email", "alice@example.com", "--role", "customer", "--create") == 0
    capsys.readouterr()
    assert _run(pool, "--email", "alice@example.com", "--token", "access") == 0
    claims = _verify(pool, capsys.readouterr().out.strip())
    assert (claims.role, claims.token_use) == ("customer", "access")


@pytest.mark.parametrize(
    ("setup", "args", "message"),
    [
        (None, ["--email", "nobody@example.com"], "add --create"),
        ("agent", ["--email", "a@example.com", "--role", "admin"], "already has the role agent"),
        ("agent", ["--email", "a@example.com", "--stage", "prod"], "retains its data"),
        (None, ["--email", "a@example.com", "--stage", "qa"], "unknown stage 'qa': cdk.json defines ['dev', 'prod']"),
    ],
)
def test_refuses_with_a_clear_message(
    pool: dict[str, Any], capsys: pytest.CaptureFixture[str], setup: str | None, args: list[str], message: str
) -> None:
    if setup:
        assert _run(pool, "--email", "a@example.com", "--role", setup, "--create") == 0
        capsys.readouterr()
    assert _run(pool, *args) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert message in err


def test_a_wrong_password_is_refused(
    pool: dict[str, Any], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _run(pool, "--email", "a@example.com", "--create") == 0
    capsys.readouterr()
    monkeypatch.setenv(mint_token.PASSWORD_VARIABLE, "Another-Passw0rd!")
    assert _run(pool, "--email", "a@example.com") == 2
    assert "sign-in refused" in capsys.readouterr().err


def test_needs_the_password_in_the_environment(
    pool: dict[str, Any], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(mint_token.PASSWORD_VARIABLE)
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    assert _run(pool, "--email", "a@example.com", "--create") == 2
    assert mint_token.PASSWORD_VARIABLE in capsys.readouterr().err


def test_finds_the_pool_from_the_stage_outputs(pool: dict[str, Any]) -> None:
    # Given a Storage stack whose outputs name the pool and its client (as the stage's do)
    template = {
        "Resources": {"Nothing": {"Type": "AWS::CloudFormation::WaitConditionHandle"}},
        "Outputs": {"UserPoolId": {"Value": pool["pool_id"]}, "UserPoolClientId": {"Value": pool["client_id"]}},
    }
    cloudformation = boto3.client("cloudformation", region_name=REGION)
    cloudformation.create_stack(StackName="MangaAssist-dev-Storage", TemplateBody=json.dumps(template))
    assert mint_token.pool_of(cloudformation, "dev") == (pool["pool_id"], pool["client_id"])
    with pytest.raises(mint_token.ToolError, match="cannot read stack MangaAssist-qa-Storage"):
        mint_token.pool_of(cloudformation, "qa")
