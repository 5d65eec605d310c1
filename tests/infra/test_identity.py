"""Identity in the synthesized stages: the user pool, its client and role groups, the issuer both authorizers use.

An OIDC stage (an external issuer named in the config) is synthesized once here: no pool, the
issuer from the config, and only the outputs such a stage has.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest

from embedded.synth import SynthesizedStage, stage_config, synthesize
from lambdas.shared.tokens import ISSUER_VARIABLES, ROLES
from stacks.config import IdentityConfig, with_overrides
from stacks.outputs import COGNITO_OUTPUTS, OUTPUTS

AUTHORIZERS = ("lambdas.api.authorizer.handler", "lambdas.ws.authorizer.handler")


def _of_type(stage: SynthesizedStage, part: str, kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in stage.templates[part]["Resources"].items() if v["Type"] == kind}


def _only(stage: SynthesizedStage, part: str, kind: str) -> dict[str, Any]:
    [resource] = _of_type(stage, part, kind).values()
    return resource


def _issuer_variables(stage: SynthesizedStage, handler: str) -> dict[str, Any]:
    functions = _of_type(stage, "Api", "AWS::Lambda::Function").values()
    [function] = [f for f in functions if f["Properties"]["Handler"] == handler]
    variables = function["Properties"]["Environment"]["Variables"]
    return {k: v for k, v in variables.items() if k.startswith("ISSUER_")}


def test_the_pool_signs_in_by_verified_email_with_a_strong_password(any_stage: SynthesizedStage) -> None:
    pool = _only(any_stage, "Storage", "AWS::Cognito::UserPool")["Properties"]
    assert pool["UsernameAttributes"] == ["email"]
    assert pool["AutoVerifiedAttributes"] == ["email"]
    assert pool["UserAttributeUpdateSettings"] == {"AttributesRequireVerificationBeforeUpdate": ["email"]}
    assert pool["Policies"]["PasswordPolicy"] == {
        "MinimumLength": 12,
        "RequireLowercase": True,
        "RequireNumbers": True,
        "RequireSymbols": True,
        "RequireUppercase": True,
        "TemporaryPasswordValidityDays": 3,
    }
    assert (pool["MfaConfiguration"], pool["EnabledMfas"]) == ("OPTIONAL", ["SOFTWARE_TOKEN_MFA"])
    assert pool["AccountRecoverySetting"] == {"RecoveryMechanisms": [{"Name": "verified_email", "Priority": 1}]}
    assert pool["AdminCreateUserConfig"] == {"AllowAdminCreateUserOnly": False}  # customers sign up


def test_prod_keeps_its_users_and_enforces_threat_protection(prod: SynthesizedStage) -> None:
    pool = _only(prod, "Storage", "AWS::Cognito::UserPool")
    assert (pool["DeletionPolicy"], pool["Properties"]["DeletionProtection"]) == ("Retain", "ACTIVE")
    assert pool["Properties"]["UserPoolTier"] == "PLUS"
    assert pool["Properties"]["UserPoolAddOns"] == {"AdvancedSecurityMode": "ENFORCED"}


def test_dev_is_disposable_on_the_essentials_plan(dev: SynthesizedStage) -> None:
    pool = _only(dev, "Storage", "AWS::Cognito::UserPool")
    assert (pool["DeletionPolicy"], pool["Properties"]["DeletionProtection"]) == ("Delete", "INACTIVE")
    assert "UserPoolAddOns" not in pool["Properties"]
    assert pool["Properties"].get("UserPoolTier", "ESSENTIALS") == "ESSENTIALS"


def test_the_app_client_is_public_and_signs_in_with_srp(any_stage: SynthesizedStage) -> None:
    client = _only(any_stage, "Storage", "AWS::Cognito::UserPoolClient")["Properties"]
    assert client["GenerateSecret"] is False
    assert client["PreventUserExistenceErrors"] == "ENABLED"
    assert client["EnableTokenRevocation"] is True
    assert client["AllowedOAuthFlowsUserPoolClient"] is False
    assert (client["IdTokenValidity"], client["AccessTokenValidity"], client["RefreshTokenValidity"]) == (
        60,
        60,
        30 * 24 * 60,
    )
    assert client["ReadAttributes"] == ["email", "email_verified"]
    password = any_stage.stage.config.identity.password_auth
    expected = {"ALLOW_USER_SRP_AUTH", "ALLOW_ADMIN_USER_PASSWORD_AUTH", "ALLOW_REFRESH_TOKEN_AUTH"}
    assert set(client["ExplicitAuthFlows"]) == expected | ({"ALLOW_USER_PASSWORD_AUTH"} if password else set())


def test_plain_passwords_are_for_dev_only(dev: SynthesizedStage, prod: SynthesizedStage) -> None:
    assert (dev.stage.config.identity.password_auth, prod.stage.config.identity.password_auth) == (True, False)


def test_the_roles_are_the_pools_groups(any_stage: SynthesizedStage) -> None:
    groups = _of_type(any_stage, "Storage", "AWS::Cognito::UserPoolGroup").values()
    assert sorted(g["Properties"]["GroupName"] for g in groups) == sorted(ROLES)


def test_both_authorizers_trust_the_pool_and_its_client(any_stage: SynthesizedStage) -> None:
    rest, websocket = (_issuer_variables(any_stage, handler) for handler in AUTHORIZERS)
    assert rest == websocket
    assert set(rest) == set(ISSUER_VARIABLES)
    assert (
        rest["ISSUER_ALGORITHMS"],
        rest["ISSUER_ACCEPTED_USES"],
        rest["ISSUER_ROLE_CLAIM"],
        rest["ISSUER_DEFAULT_ROLE"],
    ) == (
        "RS256",
        "id,access",
        "cognito:groups",
        "customer",
    )
    # The issuer, key set URL and client come from the Storage stack's pool, not from a setting
    issuer = rest["ISSUER_URL"]["Fn::Join"][1]
    assert issuer[0] == "https://"
    assert "ProviderURL" in str(issuer[1])
    assert "/.well-known/jwks.json" in str(rest["ISSUER_JWKS_URL"])
    assert "UsersClient" in str(rest["ISSUER_AUDIENCES"])


# ------------------------------------------------------------------ an external OIDC issuer

OIDC = IdentityConfig(
    provider="oidc",
    issuer="https://login.example.com/",
    jwks_url="https://login.example.com/.well-known/jwks.json",
    audiences=("web-app", "mobile-app"),
    algorithms=("RS256", "ES256"),
    role_claim="https://mangaassist.example/roles",
    default_role=None,
)


@functools.cache
def oidc_stage() -> SynthesizedStage:
    config = with_overrides(stage_config("dev"), name="oidc", identity=OIDC)
    return synthesize(config)["oidc"]


@pytest.mark.slow
def test_an_oidc_stage_has_no_pool_and_trusts_the_named_issuer() -> None:
    stage = oidc_stage()
    assert _of_type(stage, "Storage", "AWS::Cognito::UserPool") == {}
    for handler in AUTHORIZERS:
        assert _issuer_variables(stage, handler) == {
            "ISSUER_URL": "https://login.example.com/",
            "ISSUER_JWKS_URL": "https://login.example.com/.well-known/jwks.json",
            "ISSUER_AUDIENCES": "web-app,mobile-app",
            "ISSUER_ALGORITHMS": "RS256,ES256",
            "ISSUER_ACCEPTED_USES": "",
            "ISSUER_ROLE_CLAIM": "https://mangaassist.example/roles",
            "ISSUER_DEFAULT_ROLE": "",
        }
    outputs = {k for k in stage.templates["Storage"].get("Outputs", {}) if k in OUTPUTS}
    assert "TokenIssuerUrl" in outputs
    assert not outputs & COGNITO_OUTPUTS
