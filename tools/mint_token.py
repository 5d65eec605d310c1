"""Sign a dev user in to a deployed stage's user pool and print its token: ``python -m tools.mint_token``.

A helper for trying a deployed development stage with curl or a WebSocket client::

    export DEV_USER_PASSWORD='...'      # the user's password; never a flag, so never in shell history
    python -m tools.mint_token --email alice@example.com --role customer --create
    curl -H "Authorization: Bearer $(python -m tools.mint_token --email alice@example.com)" ...

It reads the stage's ``UserPoolId`` and ``UserPoolClientId`` outputs (or takes ``--user-pool-id``
and ``--client-id``), signs in with ``AdminInitiateAuth`` (``ADMIN_USER_PASSWORD_AUTH``: your AWS
credentials, not an app secret) and prints only the token (the ID token, or ``--token access``)
on standard output. The password and the refresh token are never printed. With ``--create`` a
user that does not exist yet is created with that password (e-mail marked verified, no invitation
mail) and put in the ``--role`` group. Only for stages that do not retain data: a production
pool's users are real people, managed by admins and by the users themselves.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from collections.abc import Sequence
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from contracts.access import ROLES
from stacks.config import ConfigError
from stacks.project import stage_config

PASSWORD_VARIABLE = "DEV_USER_PASSWORD"  # noqa: S105 - the variable's name


class ToolError(Exception):
    """Something the user must fix; printed without a traceback."""


def pool_of(cloudformation: Any, stage: str) -> tuple[str, str]:
    """The ``UserPoolId`` and ``UserPoolClientId`` outputs of the stage's Storage stack."""
    name = f"MangaAssist-{stage}-Storage"
    try:
        stacks = cloudformation.describe_stacks(StackName=name)["Stacks"]
    except ClientError as error:
        raise ToolError(f"cannot read stack {name}: {error}") from None
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stacks[0].get("Outputs", [])}
    if "UserPoolId" not in outputs or "UserPoolClientId" not in outputs:
        raise ToolError(f"stack {name} has no UserPoolId/UserPoolClientId outputs (an external OIDC stage?)")
    return outputs["UserPoolId"], outputs["UserPoolClientId"]


def ensure_user(cognito: Any, pool_id: str, email: str, password: str, role: str | None, *, create: bool) -> None:
    """The user exists (created when ``create``) and, when ``role`` is given, holds exactly that role."""
    try:
        groups = cognito.admin_list_groups_for_user(UserPoolId=pool_id, Username=email)["Groups"]
    except cognito.exceptions.UserNotFoundException:
        if not create:
            raise ToolError(f"{email} is not a user of pool {pool_id}; add --create to create it") from None
        cognito.admin_create_user(
            UserPoolId=pool_id,
            Username=email,
            UserAttributes=[{"Name": "email", "Value": email}, {"Name": "email_verified", "Value": "true"}],
            MessageAction="SUPPRESS",
        )
        cognito.admin_set_user_password(UserPoolId=pool_id, Username=email, Password=password, Permanent=True)
        groups = []
    held = sorted(g["GroupName"] for g in groups if g["GroupName"] in ROLES)
    if role is None or held == [role]:
        return
    if held:
        raise ToolError(f"{email} already has the role {', '.join(held)}; change roles in the pool, not here")
    cognito.admin_add_user_to_group(UserPoolId=pool_id, Username=email, GroupName=role)


def sign_in(cognito: Any, pool_id: str, client_id: str, email: str, password: str) -> dict[str, Any]:
    """The authentication result of an admin password sign-in; ToolError on a challenge or refusal."""
    try:
        answer = cognito.admin_initiate_auth(
            UserPoolId=pool_id,
            ClientId=client_id,
            AuthFlow="ADMIN_USER_PASSWORD_AUTH",
            AuthParameters={"USERNAME": email, "PASSWORD": password},
        )
    except cognito.exceptions.NotAuthorizedException:
        raise ToolError(f"sign-in refused for {email}: wrong password, or the user is disabled") from None
    if "AuthenticationResult" not in answer:
        challenge = answer.get("ChallengeName", "unknown")
        raise ToolError(f"{email} must answer the {challenge} challenge first (sign in once through the app)")
    return dict(answer["AuthenticationResult"])


def main(argv: Sequence[str] | None = None, *, session: Any = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.mint_token", description=__doc__.splitlines()[0])
    parser.add_argument("--email", required=True, help="the user's e-mail (its user name in the pool)")
    parser.add_argument("--role", choices=ROLES, help="the role group the user must be in (added when missing)")
    parser.add_argument("--create", action="store_true", help="create the user when it does not exist")
    parser.add_argument("--stage", default="dev", help="the deployed stage (default dev)")
    parser.add_argument("--token", choices=("id", "access"), default="id", help="which token to print (default id)")
    parser.add_argument("--user-pool-id", help="instead of the stage's UserPoolId output")
    parser.add_argument("--client-id", help="instead of the stage's UserPoolClientId output")
    parser.add_argument("--region", help="the stage's region (default: the stage's, else your AWS profile's)")
    args = parser.parse_args(argv)
    try:
        config = stage_config(args.stage)
        if config.is_production:
            raise ToolError(f"stage {args.stage} retains its data: its users are real people, not dev users")
        if config.identity.provider != "cognito":
            raise ToolError(f"stage {args.stage} signs in with an external issuer ({config.identity.issuer})")
        password = os.environ.get(PASSWORD_VARIABLE) or (getpass.getpass("password: ") if sys.stdin.isatty() else "")
        if not password:
            raise ToolError(f"give the user's password in ${PASSWORD_VARIABLE}")
        if session is None:
            import boto3

            session = boto3.session.Session(region_name=args.region or config.region)
        cognito = session.client("cognito-idp")
        if args.user_pool_id and args.client_id:
            pool_id, client_id = args.user_pool_id, args.client_id
        else:
            pool_id, client_id = pool_of(session.client("cloudformation"), args.stage)
        ensure_user(cognito, pool_id, args.email, password, args.role, create=args.create)
        result = sign_in(cognito, pool_id, client_id, args.email, password)
    except (ToolError, ConfigError) as error:  # ConfigError: a stage cdk.json does not define, or defines wrongly
        print(f"error: {error}", file=sys.stderr)
        return 2
    except (ClientError, BotoCoreError) as error:  # no credentials, a weak password, throttling, ...
        print(f"error: {error}", file=sys.stderr)
        return 1
    kind = "IdToken" if args.token == "id" else "AccessToken"  # noqa: S105 - a token kind
    sys.stdout.write(result[kind] + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
