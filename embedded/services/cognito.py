"""The stage's identity provider on moto: its Cognito pool's users, their sign-in, its key set.

moto's ``cognito-idp`` signs real RS256 tokens and publishes the public key at the pool's JWKS
URL (``https://cognito-idp.<region>.amazonaws.com/<pool>/.well-known/jwks.json``), answered
in-process through the HTTP mock. The authorizers fetch key sets with urllib, which that mock
does not see, so :func:`jwks_transport` points their fetch at the mock for the stage's lifetime.

Usage::

    directory = Directory.of(stage)
    signed_in = directory.sign_in("alice@example.com", role="customer")
    headers = {"Authorization": f"Bearer {signed_in.id_token}"}
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final
from unittest import mock

import requests

from lambdas.shared import tokens

if TYPE_CHECKING:
    from embedded.stage import EmbeddedStage

#: Meets the pool's password policy (length, both cases, digits, symbols).
PASSWORD = "Story-Passw0rd!"  # noqa: S105 - the embedded pool's demo users only


def fetch_over_mock(url: str, timeout: float) -> bytes:
    """GET ``url`` through the HTTP client moto intercepts; an error status raises."""
    response = requests.get(url, timeout=timeout)
    response.raise_for_status()
    return bytes(response.content)


@contextmanager
def jwks_transport() -> Iterator[None]:
    """Every key set the functions fetch inside the block comes from moto (see the module docstring)."""
    restore = tokens.use_transport(fetch_over_mock)
    try:
        yield
    finally:
        restore()


def claims_of(token: str) -> dict[str, Any]:
    """The payload of a JWT, read without verifying (the stage's authorizers verify it)."""
    payload = token.split(".")[1]
    return dict(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))))


@dataclass(frozen=True)
class SignedIn:
    """What the app client holds after signing a user in."""

    email: str
    id_token: str
    access_token: str
    refresh_token: str

    @property
    def sub(self) -> str:
        return str(claims_of(self.id_token)["sub"])

    @property
    def expires_at(self) -> int:
        return int(claims_of(self.id_token)["exp"])


class Directory:
    """The users of one pool: created and grouped as an admin would, signed in as the app client does."""

    def __init__(
        self, client: Any, pool_id: str, client_id: str, clock: Callable[[], float], *, password: str = PASSWORD
    ) -> None:
        self.client, self.pool_id, self.client_id, self.clock = client, pool_id, client_id, clock
        #: the password of every user this directory creates (unless told another)
        self.password = password

    @classmethod
    def of(cls, stage: EmbeddedStage, *, password: str = PASSWORD) -> Directory:
        """The directory of the stage's one user pool and its one app client."""
        pool = stage.only("AWS::Cognito::UserPool")
        client = stage.only("AWS::Cognito::UserPoolClient")
        flows = client.properties.get("ExplicitAuthFlows", [])
        if "ALLOW_USER_PASSWORD_AUTH" not in flows:
            raise LookupError(f"the stage's app client does not allow password sign-in (flows {flows})")
        return cls(stage.client("cognito-idp"), pool.ref, client.ref, stage.clock, password=password)

    @property
    def issuer(self) -> str:
        region = self.pool_id.split("_", 1)[0]
        return f"https://cognito-idp.{region}.amazonaws.com/{self.pool_id}"

    def ensure_user(self, email: str, *, role: str | None, verified: bool = True, password: str | None = None) -> bool:
        """Create the user once (confirmed, with a permanent password) and put it in ``role``'s group.

        True when the user was created now, False when it existed (then nothing changes).
        """
        try:
            self.client.admin_get_user(UserPoolId=self.pool_id, Username=email)
        except self.client.exceptions.UserNotFoundException:
            self.client.admin_create_user(
                UserPoolId=self.pool_id,
                Username=email,
                UserAttributes=[
                    {"Name": "email", "Value": email},
                    {"Name": "email_verified", "Value": "true" if verified else "false"},
                ],
                MessageAction="SUPPRESS",
            )
            self.client.admin_set_user_password(
                UserPoolId=self.pool_id, Username=email, Password=password or self.password, Permanent=True
            )
            if role is not None:
                self.client.admin_add_user_to_group(UserPoolId=self.pool_id, Username=email, GroupName=role)
            return True
        return False

    def sign_in(self, email: str, password: str | None = None) -> SignedIn:
        """``InitiateAuth`` with the user's password, as a script or ``curl`` against dev does."""
        result = self.client.initiate_auth(
            ClientId=self.client_id,
            AuthFlow="USER_PASSWORD_AUTH",
            AuthParameters={"USERNAME": email, "PASSWORD": password or self.password},
        )["AuthenticationResult"]
        return SignedIn(email, result["IdToken"], result["AccessToken"], result["RefreshToken"])

    def refresh(self, signed_in: SignedIn) -> SignedIn:
        """New ID and access tokens from the refresh token, as a client does before they expire."""
        result = self.client.initiate_auth(
            ClientId=self.client_id,
            AuthFlow="REFRESH_TOKEN_AUTH",
            AuthParameters={"REFRESH_TOKEN": signed_in.refresh_token},
        )["AuthenticationResult"]
        return SignedIn(signed_in.email, result["IdToken"], result["AccessToken"], signed_in.refresh_token)

    def fresh(self, signed_in: SignedIn, *, margin: float = 120) -> SignedIn:
        """``signed_in`` itself, or refreshed when its tokens expire within ``margin`` seconds."""
        return self.refresh(signed_in) if signed_in.expires_at - self.clock() < margin else signed_in

    def jwks(self) -> dict[str, Any]:
        """The pool's published key set."""
        return dict(json.loads(fetch_over_mock(f"{self.issuer}/.well-known/jwks.json", 5)))


#: The app client setting each sign-in flow needs (Cognito API reference, InitiateAuth and
#: AdminInitiateAuth; the legacy names without ``ALLOW_`` still count). A client that names no flow
#: allows Cognito's defaults.
_FLOW_SETTINGS: Final = {
    "USER_PASSWORD_AUTH": ("ALLOW_USER_PASSWORD_AUTH", "USER_PASSWORD_AUTH"),
    "USER_SRP_AUTH": ("ALLOW_USER_SRP_AUTH",),
    "REFRESH_TOKEN_AUTH": ("ALLOW_REFRESH_TOKEN_AUTH",),
    "REFRESH_TOKEN": ("ALLOW_REFRESH_TOKEN_AUTH",),
    "CUSTOM_AUTH": ("ALLOW_CUSTOM_AUTH", "CUSTOM_AUTH_FLOW_ONLY"),
    "ADMIN_USER_PASSWORD_AUTH": ("ALLOW_ADMIN_USER_PASSWORD_AUTH", "ADMIN_NO_SRP_AUTH"),
    "ADMIN_NO_SRP_AUTH": ("ALLOW_ADMIN_USER_PASSWORD_AUTH", "ADMIN_NO_SRP_AUTH"),
}
_DEFAULT_FLOWS: Final = frozenset({"ALLOW_REFRESH_TOKEN_AUTH", "ALLOW_USER_SRP_AUTH", "ALLOW_CUSTOM_AUTH"})


def _flow_allowed(client: Any, auth_flow: str) -> bool:
    allowed = set((client.extended_config or {}).get("ExplicitAuthFlows") or _DEFAULT_FLOWS)
    return bool(allowed & set(_FLOW_SETTINGS.get(auth_flow, (f"ALLOW_{auth_flow}",))))


@contextmanager
def auth_flows_enforced() -> Iterator[None]:
    """Refuse a sign-in flow the app client does not allow, as Cognito does and moto does not.

    ``InitiateAuth`` with ``USER_PASSWORD_AUTH`` on a client without ``ALLOW_USER_PASSWORD_AUTH``
    (prod's, which signs in with SRP only) answers ``InvalidParameterException``.
    """
    from moto.cognitoidp.exceptions import InvalidParameterException
    from moto.cognitoidp.models import CognitoIdpBackend

    initiate, admin_initiate = CognitoIdpBackend.initiate_auth, CognitoIdpBackend.admin_initiate_auth

    def check(backend: CognitoIdpBackend, client_id: str, auth_flow: str) -> None:
        for pool in backend.user_pools.values():
            client = pool.clients.get(client_id)
            if client is not None and not _flow_allowed(client, str(auth_flow)):
                raise InvalidParameterException(f"{auth_flow} flow not enabled for this client")

    def initiate_auth(backend: CognitoIdpBackend, client_id: str, auth_flow: str, *args: Any, **kwargs: Any) -> Any:
        check(backend, client_id, auth_flow)
        return initiate(backend, client_id, auth_flow, *args, **kwargs)

    def admin_initiate_auth(
        backend: CognitoIdpBackend, user_pool_id: str, client_id: str, auth_flow: str, *args: Any, **kwargs: Any
    ) -> Any:
        check(backend, client_id, auth_flow)
        return admin_initiate(backend, user_pool_id, client_id, auth_flow, *args, **kwargs)

    with (
        mock.patch.object(CognitoIdpBackend, "initiate_auth", initiate_auth),
        mock.patch.object(CognitoIdpBackend, "admin_initiate_auth", admin_initiate_auth),
    ):
        yield
