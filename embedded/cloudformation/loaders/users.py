"""Loaders of Cognito user pools, their app clients and groups: moto signs the tokens and serves the JWKS."""

from __future__ import annotations

from typing import Any

from embedded.cloudformation.intrinsics import Deployed, Pseudo
from embedded.cloudformation.loaders.base import Cloud, loader, physical_name

#: UserPool properties moto's CreateUserPool takes as they are in the template.
_USER_POOL_KEYS = (
    "Policies",
    "AutoVerifiedAttributes",
    "UsernameAttributes",
    "AliasAttributes",
    "UsernameConfiguration",
    "MfaConfiguration",
    "AccountRecoverySetting",
    "AdminCreateUserConfig",
    "Schema",
    "DeletionProtection",
    "EmailVerificationMessage",
    "EmailVerificationSubject",
    "VerificationMessageTemplate",
)


@loader("AWS::Cognito::UserPool")
def _user_pool(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    """The pool as the template shapes it; moto signs its tokens (RS256) and serves its JWKS."""
    name = str(props.get("UserPoolName") or physical_name(pseudo.stack_name, lid, max_length=128))
    args = {key: props[key] for key in _USER_POOL_KEYS if key in props}
    pool = cloud.client("cognito-idp").create_user_pool(PoolName=name, **args)["UserPool"]
    pool_id = str(pool["Id"])
    provider = f"cognito-idp.{cloud.region}.amazonaws.com/{pool_id}"
    attributes = {"Arn": pool["Arn"], "ProviderName": provider, "ProviderURL": provider, "UserPoolId": pool_id}
    return Deployed(lid, "AWS::Cognito::UserPool", pool_id, attributes)


@loader("AWS::Cognito::UserPoolClient")
def _user_pool_client(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    keys = (
        "GenerateSecret",
        "ExplicitAuthFlows",
        "ReadAttributes",
        "WriteAttributes",
        "PreventUserExistenceErrors",
        "EnableTokenRevocation",
        "AccessTokenValidity",
        "IdTokenValidity",
        "RefreshTokenValidity",
        "TokenValidityUnits",
        "SupportedIdentityProviders",
        "AllowedOAuthFlowsUserPoolClient",
    )
    args = {key: props[key] for key in keys if key in props}
    name = str(props.get("ClientName") or lid)
    client = cloud.client("cognito-idp").create_user_pool_client(
        UserPoolId=str(props["UserPoolId"]), ClientName=name, **args
    )["UserPoolClient"]
    client_id = str(client["ClientId"])
    return Deployed(
        lid, "AWS::Cognito::UserPoolClient", client_id, {"ClientId": client_id, "Name": name, "ClientSecret": ""}
    )


@loader("AWS::Cognito::UserPoolGroup")
def _user_pool_group(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    name = str(props.get("GroupName") or physical_name(pseudo.stack_name, lid, max_length=128))
    args = {key: props[key] for key in ("Description", "Precedence", "RoleArn") if key in props}
    cloud.client("cognito-idp").create_group(GroupName=name, UserPoolId=str(props["UserPoolId"]), **args)
    return Deployed(lid, "AWS::Cognito::UserPoolGroup", name, {})
