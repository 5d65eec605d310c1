"""The decision: which statements apply to a request, and the rules that weigh them.

``decide`` applies the same-account rule, ``decide_kms`` KMS's key-policy rule and ``decide_assume_role`` a
role's trust policy; each first checks that every policy has the elements its kind needs.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from embedded.iam.policy.conditions import condition_holds
from embedded.iam.policy.document import Policy, Statement
from embedded.iam.policy.errors import PolicyError
from embedded.iam.policy.keys import ContextValue
from embedded.iam.policy.matching import split_arn
from embedded.iam.policy.principals import Principal, Reach, excluded_by_not_principal, reach
from embedded.iam.policy.request import Request


class Outcome(enum.Enum):
    ALLOW = "allow"
    EXPLICIT_DENY = "explicit deny"
    IMPLICIT_DENY = "implicit deny"


@dataclass(frozen=True)
class Decision:
    outcome: Outcome
    #: Which policy and statement allowed or denied, or why nothing allowed.
    reason: str

    @property
    def allowed(self) -> bool:
        return self.outcome is Outcome.ALLOW


_Match: TypeAlias = tuple[Policy, Statement]


def _describe(request: Request) -> str:
    return f"{request.action} on {request.resource} for {request.principal.arn}"


def _cite(match: _Match) -> str:
    policy, statement = match
    return f"{policy.source} {statement.label}"


def _deny(request: Request, match: _Match) -> Decision:
    return Decision(Outcome.EXPLICIT_DENY, f"{_describe(request)} is explicitly denied by {_cite(match)}")


def _nothing_allows(request: Request, detail: str = "") -> Decision:
    reason = f"no statement allows {_describe(request)}"
    return Decision(Outcome.IMPLICIT_DENY, f"{reason}: {detail}" if detail else reason)


PolicyKind: TypeAlias = Literal["identity", "resource", "key", "trust"]


def _check_shape(policy: Policy, kind: PolicyKind) -> None:
    """The elements a policy of this kind must and must not have (IAM User Guide, "IAM JSON policy elements")."""
    for statement in policy.statements:
        where = f"{policy.source}, {statement.label}"
        has_principal = statement.principals is not None or statement.not_principals is not None
        has_resource = statement.resources is not None or statement.not_resources is not None
        if kind == "identity" and has_principal:
            raise PolicyError(f"{where}: an identity policy cannot have a Principal or NotPrincipal")
        if kind != "identity" and not has_principal:
            raise PolicyError(f"{where}: a {kind} policy statement needs a Principal")
        if kind == "trust":
            if statement.not_principals is not None:
                raise PolicyError(f"{where}: a role trust policy cannot use NotPrincipal")
            if has_resource:
                raise PolicyError(f"{where}: a role trust policy cannot have a Resource or NotResource")
        elif not has_resource:
            raise PolicyError(f"{where}: a statement needs a Resource or NotResource")


def _reaches(statement: Statement, principal: Principal) -> Reach:
    if statement.not_principals is not None:
        excluded = excluded_by_not_principal(statement.not_principals, principal)
        return Reach.NONE if excluded else Reach.DIRECT
    if statement.principals is None:
        return Reach.NONE
    return reach(statement.principals, principal)


def _applies(statement: Statement, request: Request, policy: Policy) -> bool:
    """Whether the statement covers the request's action and resource and all its conditions hold (its principal
    is checked by the caller)."""
    if not (statement.matches_action(request.action) and statement.matches_resource(request.resource)):
        return False
    return all(condition_holds(c, request, policy, statement) for c in statement.conditions)


@dataclass
class _Findings:
    denies: list[_Match] = field(default_factory=list)
    identity_allows: list[_Match] = field(default_factory=list)
    direct_allows: list[_Match] = field(default_factory=list)
    account_allows: list[_Match] = field(default_factory=list)


def _gather(request: Request, identity: Sequence[Policy], others: Sequence[Policy]) -> _Findings:
    """Every statement that applies: identity ones as they are, the others by how their principal reaches."""
    found = _Findings()
    for policy in identity:
        for statement in policy.statements:
            if _applies(statement, request, policy):
                (found.denies if statement.effect == "Deny" else found.identity_allows).append((policy, statement))
    for policy in others:
        for statement in policy.statements:
            reach = _reaches(statement, request.principal)
            if reach is Reach.NONE or not _applies(statement, request, policy):
                continue
            if statement.effect == "Deny":
                found.denies.append((policy, statement))
            elif reach is Reach.DIRECT:
                found.direct_allows.append((policy, statement))
            elif reach is Reach.ACCOUNT:
                found.account_allows.append((policy, statement))
    return found


def _check_identity_holder(request: Request, identity: Sequence[Policy]) -> None:
    if identity and request.principal.kind != "role":
        raise ValueError(
            f"{request.principal.arn} is a {request.principal.kind} principal: it has no identity policies"
        )


def decide(request: Request, *, identity: Sequence[Policy] = (), resource: Sequence[Policy] = ()) -> Decision:
    """The same-account rule ("Policy evaluation for requests within a single account").

    An explicit Deny in any identity or resource policy wins. Otherwise the request is allowed if an identity
    policy allows it (roles only: a service principal has no identity policies) or a resource policy allows it
    with a Principal naming this principal ("*", its role ARN or its service). A resource-policy Allow naming
    the account only delegates to IAM: it grants nothing by itself. Otherwise it is implicitly denied.
    """
    _check_identity_holder(request, identity)
    arn = split_arn(request.resource)
    account = request.principal.account
    if arn is not None and arn[4] and account is not None and arn[4] != account:
        raise ValueError(
            f"{request.principal.arn} (account {account}) calls {request.resource} of account {arn[4]}: "
            "only the same-account rule is implemented"
        )
    for policy in identity:
        _check_shape(policy, "identity")
    for policy in resource:
        _check_shape(policy, "resource")
    found = _gather(request, identity, resource)
    if found.denies:
        return _deny(request, found.denies[0])
    allows = found.identity_allows + found.direct_allows
    if allows:
        return Decision(Outcome.ALLOW, f"{_describe(request)} is allowed by {_cite(allows[0])}")
    if found.account_allows:
        return _nothing_allows(
            request,
            f"{_cite(found.account_allows[0])} names the account, which delegates to IAM, "
            "and no identity policy allows it",
        )
    return _nothing_allows(request)


def decide_kms(request: Request, *, key_policy: Policy, identity: Sequence[Policy] = ()) -> Decision:
    """KMS's rule (AWS KMS Developer Guide, "Key policies in AWS KMS").

    An explicit Deny anywhere wins. Otherwise the key policy must allow: a statement naming this principal
    (its role ARN, its service, or "*") allows directly; a statement naming the key's account delegates to IAM,
    and then an identity policy must allow too. Without the key policy, identity policies never give access.
    """
    _check_identity_holder(request, identity)
    key = split_arn(request.resource)
    if key is None or key[2] != "kms" or not key[5].startswith("key/"):
        raise ValueError(f"{request.resource!r} is not a KMS key ARN")
    account = request.principal.account
    if account is not None and account != key[4]:
        raise ValueError(
            f"{request.principal.arn} (account {account}) uses a key of account {key[4]}: "
            "only the same-account rule is implemented"
        )
    _check_shape(key_policy, "key")
    for policy in identity:
        _check_shape(policy, "identity")
    found = _gather(request, identity, [key_policy])
    if found.denies:
        return _deny(request, found.denies[0])
    if found.direct_allows:
        return Decision(Outcome.ALLOW, f"{_describe(request)} is allowed by {_cite(found.direct_allows[0])}")
    if found.account_allows:
        delegation = _cite(found.account_allows[0])
        if found.identity_allows:
            return Decision(
                Outcome.ALLOW,
                f"{_describe(request)} is allowed by {_cite(found.identity_allows[0])}, "
                f"as {delegation} delegates the key's access to IAM",
            )
        return _nothing_allows(request, f"{delegation} delegates to IAM, but no identity policy allows it")
    if found.identity_allows:
        return _nothing_allows(
            request,
            f"{_cite(found.identity_allows[0])} allows it, but the key policy {key_policy.source} does not allow it "
            "and does not delegate to IAM",
        )
    return _nothing_allows(request)


def decide_assume_role(
    service: str, role_arn: str, trust_policy: Policy, context: Mapping[str, ContextValue]
) -> Decision:
    """Whether a service principal may assume a role: sts:AssumeRole against the role's trust policy."""
    principal = Principal.service(service)
    role = Principal.role(role_arn)
    _check_shape(trust_policy, "trust")
    request = Request("sts:AssumeRole", role.arn, principal, context)
    found = _gather(request, (), [trust_policy])
    if found.denies:
        return _deny(request, found.denies[0])
    if found.direct_allows:
        return Decision(Outcome.ALLOW, f"{_describe(request)} is allowed by {_cite(found.direct_allows[0])}")
    return _nothing_allows(request)
