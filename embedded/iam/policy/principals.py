"""Principals: who makes a request (``Principal``), and the Principal / NotPrincipal elements that name them.

``reach`` says how a Principal element reaches a request's principal, ``excluded_by_not_principal`` whether a
NotPrincipal element spares it; ``parse_principal`` reads either element of a statement.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from embedded.iam.policy.errors import Fail
from embedded.iam.policy.keys import ContextValue

_ACCOUNT_ID = re.compile(r"\d{12}")
_ROLE_ARN = re.compile(r"arn:[a-z][a-z0-9-]*:iam::(\d{12}):role/(?:[\w+=,.@-]+/)*([\w+=,.@-]+)")
_ROOT_ARN = re.compile(r"arn:[a-z][a-z0-9-]*:iam::(\d{12}):root")
_USER_ARN = re.compile(r"arn:[a-z][a-z0-9-]*:iam::\d{12}:user/(?:[\w+=,.@-]+/)*[\w+=,.@-]+")
_SESSION_ARN = re.compile(r"arn:[a-z][a-z0-9-]*:sts::(\d{12}):assumed-role/([\w+=,.@-]+)/[\w+=,.@-]+")
_FEDERATED_USER_ARN = re.compile(r"arn:[a-z][a-z0-9-]*:sts::\d{12}:federated-user/[\w+=,.@-]+")
_SERVICE_NAME = re.compile(r"[a-z0-9][a-z0-9.-]*\.amazonaws\.com(?:\.cn)?")
_PRINCIPAL_TYPES = frozenset({"AWS", "Service", "Federated", "CanonicalUser"})


@dataclass(frozen=True)
class Principal:
    """Who makes a request: an IAM role (its sessions), an AWS service principal, or an account's root."""

    arn: str
    kind: Literal["role", "service", "account"]
    account: str | None = None

    def __post_init__(self) -> None:
        if self.kind == "role":
            match = _ROLE_ARN.fullmatch(self.arn)
            if match is None:
                raise ValueError(f"not an IAM role ARN: {self.arn!r}")
            self._check_account(match.group(1))
        elif self.kind == "account":
            match = _ROOT_ARN.fullmatch(self.arn)
            if match is None:
                raise ValueError(f"not an account root ARN (arn:aws:iam::<account>:root): {self.arn!r}")
            self._check_account(match.group(1))
        elif self.kind == "service":
            if _SERVICE_NAME.fullmatch(self.arn) is None:
                raise ValueError(f"not an AWS service principal name (like sns.amazonaws.com): {self.arn!r}")
            if self.account is not None:
                raise ValueError(f"a service principal belongs to no account: {self.arn} given {self.account}")
        else:
            raise ValueError(f"unknown principal kind {self.kind!r}")

    def _check_account(self, account: str) -> None:
        if self.account is None:
            object.__setattr__(self, "account", account)
        elif self.account != account:
            raise ValueError(f"{self.arn} belongs to account {account}, not {self.account}")

    @classmethod
    def role(cls, arn: str) -> Principal:
        return cls(arn, "role")

    @classmethod
    def service(cls, name: str) -> Principal:
        return cls(name, "service")

    @classmethod
    def root(cls, account: str) -> Principal:
        """The root principal of an account (``arn:aws:iam::<account>:root``)."""
        return cls(f"arn:aws:iam::{account}:root", "account")

    @property
    def role_name(self) -> str | None:
        match = _ROLE_ARN.fullmatch(self.arn) if self.kind == "role" else None
        return match.group(2) if match else None


def principal_context(principal: Principal) -> dict[str, ContextValue]:
    """The principal keys AWS puts in every request context of this principal, to merge into a Request's context.

    For a role: ``aws:PrincipalArn`` (the role's ARN, not the session's), ``aws:PrincipalAccount`` and
    ``aws:PrincipalType`` ("AssumedRole"); for a service principal: ``aws:PrincipalServiceName``; for an
    account root: its ARN, account and type "Account".
    """
    if principal.kind == "service":
        return {"aws:PrincipalServiceName": principal.arn}
    account = principal.account or ""
    kind = "AssumedRole" if principal.kind == "role" else "Account"
    return {"aws:PrincipalArn": principal.arn, "aws:PrincipalAccount": account, "aws:PrincipalType": kind}


@dataclass(frozen=True)
class PrincipalSet:
    """A parsed Principal or NotPrincipal element."""

    everyone: bool = False
    accounts: frozenset[str] = frozenset()
    #: Role and user ARNs, matched exactly.
    iam_arns: frozenset[str] = frozenset()
    #: Assumed-role session ARNs as (account, role name): their session names cannot be checked here.
    sessions: frozenset[tuple[str, str]] = frozenset()
    services: frozenset[str] = frozenset()
    federated: frozenset[str] = frozenset()
    canonical_users: frozenset[str] = frozenset()


class Reach(enum.Enum):
    """How a Principal element reaches a request's principal."""

    NONE = "none"
    #: Named directly: the role's ARN, the service, "*" (or the account itself for an account principal).
    DIRECT = "direct"
    #: Through the principal's account: in an Allow this delegates to IAM, in a Deny it applies.
    ACCOUNT = "account"
    #: Through an assumed-role session ARN of the role: a Deny applies (fail closed), an Allow grants nothing.
    SESSION = "session"


def reach(principals: PrincipalSet, principal: Principal) -> Reach:
    if principals.everyone:
        return Reach.DIRECT
    if principal.kind == "service":
        return Reach.DIRECT if principal.arn in principals.services else Reach.NONE
    if principal.kind == "account":
        return Reach.DIRECT if principal.account in principals.accounts else Reach.NONE
    if principal.arn in principals.iam_arns:
        return Reach.DIRECT
    if (principal.account, principal.role_name) in principals.sessions:
        return Reach.SESSION
    if principal.account in principals.accounts:
        return Reach.ACCOUNT
    return Reach.NONE


def excluded_by_not_principal(principals: PrincipalSet, principal: Principal) -> bool:
    """Whether a NotPrincipal element spares this principal from its Deny.

    "AWS JSON policy elements: NotPrincipal": AWS may check the account, then the role, then the session, so
    a role is spared only if both its ARN and its account are named.
    """
    if principals.everyone:
        return True
    if principal.kind == "service":
        return principal.arn in principals.services
    if principal.kind == "account":
        return principal.account in principals.accounts
    return principal.arn in principals.iam_arns and principal.account in principals.accounts


def parse_principal(raw: object, element: str, fail: Fail) -> PrincipalSet:
    if raw == "*":
        return PrincipalSet(everyone=True)
    if not isinstance(raw, Mapping) or not raw:
        raise fail(f'{element} must be "*" or an object of AWS / Service / Federated / CanonicalUser')
    unknown = sorted(str(k) for k in raw if k not in _PRINCIPAL_TYPES)
    if unknown:
        raise fail(f"{element}: unknown principal type(s) {', '.join(unknown)}")
    accounts: set[str] = set()
    iam_arns: set[str] = set()
    sessions: set[tuple[str, str]] = set()
    services: set[str] = set()
    federated: set[str] = set()
    canonical_users: set[str] = set()
    everyone = False
    for kind, value in raw.items():
        values = [value] if isinstance(value, str) else value
        if not isinstance(values, list) or not values or not all(isinstance(v, str) and v for v in values):
            raise fail(f"{element}: {kind} must be a non-empty string or a non-empty list of non-empty strings")
        for text in values:
            if kind == "AWS" and text == "*":
                everyone = True
                continue
            if "*" in text or "?" in text:
                raise fail(f"{element}: {kind} {text!r}: a wildcard cannot match part of a principal")
            if kind == "Service":
                services.add(text.lower())
            elif kind == "Federated":
                federated.add(text)
            elif kind == "CanonicalUser":
                canonical_users.add(text)
            elif _ACCOUNT_ID.fullmatch(text):
                accounts.add(text)
            elif root := _ROOT_ARN.fullmatch(text):
                accounts.add(root.group(1))
            elif _ROLE_ARN.fullmatch(text) or _USER_ARN.fullmatch(text):
                iam_arns.add(text)
            elif session := _SESSION_ARN.fullmatch(text):
                sessions.add((session.group(1), session.group(2)))
            elif _FEDERATED_USER_ARN.fullmatch(text):
                federated.add(text)
            else:
                raise fail(f"{element}: AWS {text!r} is not an account, a root, role, user or session ARN, or *")
    return PrincipalSet(
        everyone=everyone,
        accounts=frozenset(accounts),
        iam_arns=frozenset(iam_arns),
        sessions=frozenset(sessions),
        services=frozenset(services),
        federated=frozenset(federated),
        canonical_users=frozenset(canonical_users),
    )
