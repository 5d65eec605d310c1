"""The smoke's own users: created before the story, deleted after it, on ``make local`` or a deployed pool.

* ``make local``: through its local-only user routes (``POST`` and ``DELETE /local/users``) and
  its sign-in route, over HTTP like every other call.
* A deployed stage: with the deployer's AWS credentials through Cognito's admin APIs
  (``AdminCreateUser``, ``AdminSetUserPassword``, ``AdminAddUserToGroup``, ``AdminDeleteUser``);
  the users then sign in through Cognito's public ``InitiateAuth`` as any client does, or with
  ``AdminInitiateAuth`` where the app client allows no password sign-in (prod).

Every user gets a fresh random password that is never printed, and an unverified address on the
reserved ``example.com`` domain, so no notice is ever mailed to it.
"""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import aiohttp

from local.smoke.client import CognitoSignIn, LocalSignIn, Tokens, UserExists, WireError

#: Where the smoke's users live: a reserved domain (RFC 2606), and their addresses stay unverified.
EMAIL_DOMAIN: Final = "example.com"
#: The users of one run, by the story's name for them, and their role groups.
ROLES: Final = (("customer", "customer"), ("other", "customer"), ("agent", "agent"), ("admin", "admin"))


@dataclass(frozen=True)
class SmokeUser:
    """A user the smoke creates (and deletes): its story name, address, role and password."""

    label: str
    email: str
    role: str
    password: str = field(repr=False)


def new_password() -> str:
    """A random password that meets a Cognito policy asking for every character class."""
    return f"Sm0ke-{secrets.token_urlsafe(18)}-aA1"


def new_run_id() -> str:
    """A short id that keeps the users, the handoff skill and the messages of one run apart."""
    return secrets.token_hex(4)


def plan_users(run_id: str, domain: str = EMAIL_DOMAIN) -> tuple[SmokeUser, ...]:
    """The users one run creates: two customers, an agent and an admin."""
    return tuple(SmokeUser(label, f"smoke-{run_id}-{label}@{domain}", role, new_password()) for label, role in ROLES)


class UserDirectory(Protocol):
    """Where the smoke creates, signs in and deletes its users."""

    #: How users are created and deleted, for the report.
    description: str
    #: How users sign in, for the report.
    sign_in_description: str

    async def create(self, user: SmokeUser) -> None:
        """Create ``user`` in its role; UserExists (before any change) when the address is taken."""

    async def delete(self, user: SmokeUser) -> bool:
        """Delete ``user``; False when it was not there."""

    async def sign_in(self, email: str, password: str) -> Tokens: ...


class LocalUsers:
    """``make local``'s user routes: ``POST /local/users`` (agents left unregistered) and ``DELETE``."""

    def __init__(self, http: aiohttp.ClientSession, origin: str) -> None:
        self.http, self.origin = http, origin.rstrip("/")
        self.url = f"{self.origin}/local/users"
        self.description = f"make local's {self.url} (POST to create, DELETE to delete)"
        self.sign_in_description = f"POST {self.origin}/local/sign-in (make local's Cognito is in its process)"
        self._sign_in = LocalSignIn(http, origin)

    async def _call(self, method: str, body: dict[str, Any]) -> tuple[int, str]:
        try:
            async with self.http.request(method, self.url, json=body) as response:
                return response.status, await response.text()
        except (aiohttp.ClientError, TimeoutError) as error:
            raise WireError(f"{method} {self.url}: cannot reach make local ({error!r})") from None

    async def create(self, user: SmokeUser) -> None:
        # The agent is registered by the smoke's own admin over the REST API, as on a deployed stage.
        body = {"email": user.email, "role": user.role, "password": user.password, "register": False}
        status, text = await self._call("POST", body)
        if status == 409:
            raise UserExists(f"{user.email} exists already in make local's pool")
        if status != 201:
            raise WireError(f"POST {self.url} for {user.email} answered {status}: {text[:200]}")

    async def delete(self, user: SmokeUser) -> bool:
        status, text = await self._call("DELETE", {"email": user.email})
        if status == 404:
            return False
        if status != 204:
            raise WireError(
                f"DELETE {self.url} for {user.email} answered {status}: {text[:200]} "
                "(a make local older than this smoke has no DELETE: restart it)"
            )
        return True

    async def sign_in(self, email: str, password: str) -> Tokens:
        return await self._sign_in.sign_in(email, password)


class CognitoUsers:
    """A deployed stage's user pool, managed with the caller's AWS credentials (boto3's default chain).

    ``sign_in="public"`` signs in through Cognito's public ``InitiateAuth`` over HTTPS (the app
    client must allow ``USER_PASSWORD_AUTH``, as dev's does); ``"admin"`` uses
    ``AdminInitiateAuth`` (``ADMIN_USER_PASSWORD_AUTH``) with the credentials, for an app client
    that allows SRP only (prod's).
    """

    def __init__(
        self,
        http: aiohttp.ClientSession,
        *,
        user_pool_id: str,
        client_id: str,
        region: str,
        endpoint: str,
        sign_in: str = "public",
        session: Any = None,
    ) -> None:
        if sign_in not in ("public", "admin"):
            raise ValueError(f"sign_in must be public or admin (given {sign_in!r})")
        self.pool_id, self.client_id, self.region, self.endpoint = user_pool_id, client_id, region, endpoint
        self.sign_in_flow = sign_in
        self.description = (
            f"Cognito pool {user_pool_id} in {region} with your AWS credentials "
            "(AdminCreateUser, AdminSetUserPassword, AdminAddUserToGroup; AdminDeleteUser)"
        )
        self.sign_in_description = (
            f"Cognito InitiateAuth (USER_PASSWORD_AUTH) at {endpoint}, app client {client_id}"
            if sign_in == "public"
            else f"Cognito AdminInitiateAuth (ADMIN_USER_PASSWORD_AUTH) with your credentials, app client {client_id}"
        )
        self._public = CognitoSignIn(http, client_id=client_id, endpoint=endpoint)
        self._session = session
        self._client: Any = None

    def client(self) -> Any:
        """The ``cognito-idp`` client, made on first use (a read-only public sign-in needs none)."""
        if self._client is None:
            if self._session is None:
                import boto3

                self._session = boto3.session.Session(region_name=self.region)
            self._client = self._session.client("cognito-idp", region_name=self.region)
        return self._client

    async def _admin(self, action: str, **kwargs: Any) -> dict[str, Any]:
        """One admin call on a worker thread; WireError that names the call and what to fix."""
        from botocore.exceptions import BotoCoreError, ClientError

        client = self.client()
        call = getattr(client, action)
        try:
            return dict(await asyncio.to_thread(call, UserPoolId=self.pool_id, **kwargs))
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "")
            if code == "UsernameExistsException":
                raise UserExists(f"{kwargs.get('Username')} exists already in pool {self.pool_id}") from None
            if code == "UserNotFoundException":
                raise
            hint = ""
            if code in ("AccessDeniedException", "UnrecognizedClientException", "ExpiredTokenException"):
                hint = f"; the smoke needs AWS credentials allowed cognito-idp:{action_name(action)} on the pool"
            raise WireError(f"Cognito {action_name(action)} in pool {self.pool_id}: {error}{hint}") from None
        except BotoCoreError as error:  # no credentials, no network, ...
            raise WireError(
                f"Cognito {action_name(action)} in pool {self.pool_id}: {error} "
                "(the smoke manages its users with your AWS credentials: set AWS_PROFILE or the like)"
            ) from None

    async def create(self, user: SmokeUser) -> None:
        await self._admin(
            "admin_create_user",
            Username=user.email,
            UserAttributes=[{"Name": "email", "Value": user.email}, {"Name": "email_verified", "Value": "false"}],
            MessageAction="SUPPRESS",
        )
        await self._admin("admin_set_user_password", Username=user.email, Password=user.password, Permanent=True)
        await self._admin("admin_add_user_to_group", Username=user.email, GroupName=user.role)

    async def delete(self, user: SmokeUser) -> bool:
        client = self.client()
        try:
            await self._admin("admin_delete_user", Username=user.email)
        except client.exceptions.UserNotFoundException:
            return False
        return True

    async def sign_in(self, email: str, password: str) -> Tokens:
        if self.sign_in_flow == "public":
            return await self._public.sign_in(email, password)
        client = self.client()
        try:
            answer = await self._admin(
                "admin_initiate_auth",
                ClientId=self.client_id,
                AuthFlow="ADMIN_USER_PASSWORD_AUTH",
                AuthParameters={"USERNAME": email, "PASSWORD": password},
            )
        except client.exceptions.UserNotFoundException:
            raise WireError(f"{email} is not a user of pool {self.pool_id}") from None
        result = answer.get("AuthenticationResult")
        if not isinstance(result, dict):
            raise WireError(f"{email} must answer the {answer.get('ChallengeName', 'unknown')} challenge first")
        return Tokens(email, str(result["IdToken"]), str(result["AccessToken"]))


def action_name(action: str) -> str:
    """``admin_create_user`` -> ``AdminCreateUser``: the API's own name, for messages and IAM."""
    return "".join(part.capitalize() for part in action.split("_"))
