"""HardenedUserPool on its own, outside the app: hardened defaults, what a caller may loosen, bad props."""

from __future__ import annotations

import re

import pytest
from aws_cdk import App, Duration, RemovalPolicy, Stack, Validations
from aws_cdk import aws_cognito as cognito
from aws_cdk.assertions import Match, Template
from cdk_nag import AwsSolutionsChecks

from constructs_lib import HardenedUserPool


def test_defaults_are_hardened() -> None:
    stack = Stack(App(), "Defaults")
    users = HardenedUserPool(stack, "Users")

    template = Template.from_stack(stack)

    template.has_resource(
        "AWS::Cognito::UserPool",
        {
            "DeletionPolicy": "Retain",
            "Properties": Match.object_like(
                {
                    "AdminCreateUserConfig": {"AllowAdminCreateUserOnly": True},  # no self sign-up
                    "DeletionProtection": "ACTIVE",
                    "UserPoolTier": "PLUS",
                    "UserPoolAddOns": {"AdvancedSecurityMode": "ENFORCED"},
                    "MfaConfiguration": "OPTIONAL",
                    "EnabledMfas": ["SOFTWARE_TOKEN_MFA"],
                    "UsernameAttributes": ["email"],
                    "Policies": {"PasswordPolicy": Match.object_like({"MinimumLength": 12, "RequireSymbols": True})},
                }
            ),
        },
    )
    template.has_resource_properties(
        "AWS::Cognito::UserPoolClient",
        {
            "GenerateSecret": False,
            "ExplicitAuthFlows": ["ALLOW_USER_SRP_AUTH", "ALLOW_REFRESH_TOKEN_AUTH"],
            "AllowedOAuthFlowsUserPoolClient": False,
            "PreventUserExistenceErrors": "ENABLED",
            "EnableTokenRevocation": True,
        },
    )
    template.resource_count_is("AWS::Cognito::UserPoolGroup", 0)
    pool = stack.resolve(users.user_pool.user_pool_id)["Ref"]
    provider = {"Fn::GetAtt": [pool, "ProviderURL"]}
    assert stack.resolve(users.issuer_url) == {"Fn::Join": ["", ["https://", provider]]}
    assert stack.resolve(users.jwks_url) == {"Fn::Join": ["", ["https://", provider, "/.well-known/jwks.json"]]}


def test_a_caller_shapes_groups_sign_up_flows_and_plan_explicitly() -> None:
    stack = Stack(App(), "Shaped")
    users = HardenedUserPool(
        stack,
        "Users",
        groups=["customer", "admin"],
        self_sign_up=True,
        threat_protection=None,
        mfa=cognito.Mfa.REQUIRED,
        auth_flows=cognito.AuthFlow(user_srp=True, admin_user_password=True),
        token_validity=Duration.minutes(15),
        refresh_token_validity=Duration.days(1),
        deletion_protection=False,
        removal_policy=RemovalPolicy.DESTROY,
    )

    template = Template.from_stack(stack)

    template.has_resource_properties(
        "AWS::Cognito::UserPool",
        Match.object_like(
            {
                "AdminCreateUserConfig": {"AllowAdminCreateUserOnly": False},
                "DeletionProtection": "INACTIVE",
                "MfaConfiguration": "ON",
                "UserPoolAddOns": Match.absent(),
            }
        ),
    )
    template.has_resource_properties(
        "AWS::Cognito::UserPoolClient",
        Match.object_like({"IdTokenValidity": 15, "AccessTokenValidity": 15, "RefreshTokenValidity": 1440}),
    )
    assert sorted(users.groups) == ["admin", "customer"]
    template.has_resource_properties(
        "AWS::Cognito::UserPoolGroup", Match.object_like({"GroupName": "customer", "Precedence": 0})
    )
    template.has_resource_properties("AWS::Cognito::UserPoolGroup", Match.object_like({"GroupName": "admin"}))


def test_its_defaults_pass_the_aws_solutions_checks_on_cognito() -> None:
    app = App()
    stack = Stack(app, "Nagged")
    HardenedUserPool(stack, "Users", groups=["customer"])
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    # Then only the optional-MFA finding remains, a choice the caller acknowledges or changes
    with pytest.raises(RuntimeError) as raised:
        app.synth()
    findings = set(re.findall(r"AwsSolutions-COG\d", str(raised.value)))
    assert findings == {"AwsSolutions-COG2"}


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"password_min_length": 6}, r"password_min_length must be 8..99 \(given 6\)"),
        ({"groups": ["a b"]}, r"group names must match .* \(given 'a b'\)"),
        ({"groups": ["x", "x"]}, r"groups must not repeat a name"),
        ({"token_validity": Duration.minutes(1)}, r"token_validity must be 5..1440 minutes \(given 1 minutes\)"),
        (
            {"token_validity": Duration.hours(2), "refresh_token_validity": Duration.hours(1)},
            r"refresh_token_validity must be longer than token_validity \(given 60 and 120 minutes\)",
        ),
    ],
)
def test_fails_on_bad_props(props: dict[str, object], message: str) -> None:
    stack = Stack(App(), "S")
    HardenedUserPool(stack, "Users", **props)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match=r"\[S/Users\] " + message):
        Template.from_stack(stack)
