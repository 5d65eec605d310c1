"""A typed IAM policy evaluator for the embedded AWS: identity, resource, KMS key and role trust policies.

It follows AWS's documented rules (IAM User Guide: the "IAM JSON policy elements" reference, "Condition
operators", "Single-valued vs. multivalued context keys", "Policy evaluation for requests within a single
account"; AWS KMS Developer Guide: "Key policies in AWS KMS") and never allows by default: a document, an
operator, a condition key or a request value it does not understand raises an error instead of deciding.

Deliberately out of scope (each raises rather than being guessed at): cross-account requests, policy
variables, condition keys outside ``SUPPORTED_CONDITION_KEYS``, plain operators on multivalued keys, and
ARN condition values with fewer than six segments. Permissions boundaries, session policies, SCPs, RCPs and
KMS grants are not evaluated: the callers pass none.
"""

from __future__ import annotations

import base64
import binascii
import enum
import ipaddress
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import Any, Literal, TypeAlias

__all__ = [
    "SUPPORTED_CONDITION_KEYS",
    "Condition",
    "ContextValue",
    "Decision",
    "Outcome",
    "Policy",
    "PolicyError",
    "Principal",
    "PrincipalSet",
    "Request",
    "Statement",
    "UnsupportedCondition",
    "decide",
    "decide_assume_role",
    "decide_kms",
    "principal_context",
]

#: A value of a condition key in a request: a sequence (not a str) is a multivalued key's set of values.
ContextValue: TypeAlias = str | bool | int | float | Sequence[str]
_Scalar: TypeAlias = str | bool | int | float
Effect: TypeAlias = Literal["Allow", "Deny"]
_Fail: TypeAlias = Callable[[str], "PolicyError"]


class PolicyError(ValueError):
    """A malformed policy document; the message names the policy, the statement and what is wrong."""


class UnsupportedCondition(PolicyError):
    """A condition operator or key this evaluator does not know, a policy variable, or a request value an
    operator cannot read: the evaluator refuses to guess."""


# --- Condition keys ---------------------------------------------------------------------------------------------

_SINGLE_VALUED_KEYS = (
    "aws:SourceArn",
    "aws:SourceAccount",
    "aws:SourceOwner",
    "aws:SecureTransport",
    "aws:PrincipalArn",
    "aws:PrincipalAccount",
    "aws:PrincipalServiceName",
    "aws:PrincipalType",
    "aws:SourceIp",
    "aws:CurrentTime",
    "aws:EpochTime",
    "aws:RequestedRegion",
    "aws:CalledViaFirst",
    "aws:CalledViaLast",
    "aws:ViaAWSService",
    "kms:ViaService",
    "kms:CallerAccount",
    "kms:GrantIsForAWSResource",
    "s3:TlsVersion",
    "s3:x-amz-server-side-encryption",
    "s3:x-amz-server-side-encryption-aws-kms-key-id",
    "s3:prefix",
    "iam:PassedToService",
    "sns:Protocol",
    "sns:Endpoint",
)
#: Keys whose request value is a set ("Single-valued vs. multivalued context keys"): they need a set operator.
_MULTIVALUED_KEYS = ("aws:CalledVia", "kms:EncryptionContextKeys", "kms:GrantOperations")
_ENCRYPTION_CONTEXT_PREFIX = "kms:EncryptionContext:"
#: Every condition key the evaluator knows, plus every ``kms:EncryptionContext:<name>``.
SUPPORTED_CONDITION_KEYS: frozenset[str] = frozenset(_SINGLE_VALUED_KEYS + _MULTIVALUED_KEYS)

_CANONICAL_KEYS = {key.lower(): key for key in SUPPORTED_CONDITION_KEYS}
_MULTIVALUED_LOOKUP = frozenset(key.lower() for key in _MULTIVALUED_KEYS)


def _lookup_key(key: str) -> str | None:
    """The context lookup form of a condition key, or None if the key is not supported.

    Key names are case-insensitive, except the ``<name>`` of ``kms:EncryptionContext:<name>``, which AWS
    matches case-sensitively: it is kept as written.
    """
    prefix = _ENCRYPTION_CONTEXT_PREFIX
    if key[: len(prefix)].lower() == prefix.lower() and len(key) > len(prefix):
        return prefix.lower() + key[len(prefix) :]
    lowered = key.lower()
    return lowered if lowered in _CANONICAL_KEYS else None


def _is_multivalued(lookup: str) -> bool:
    return lookup in _MULTIVALUED_LOOKUP


# --- Principals --------------------------------------------------------------------------------------------------

_ACCOUNT_ID = re.compile(r"\d{12}")
_ROLE_ARN = re.compile(r"arn:[a-z][a-z0-9-]*:iam::(\d{12}):role/(?:[\w+=,.@-]+/)*([\w+=,.@-]+)")
_ROOT_ARN = re.compile(r"arn:[a-z][a-z0-9-]*:iam::(\d{12}):root")
_USER_ARN = re.compile(r"arn:[a-z][a-z0-9-]*:iam::\d{12}:user/(?:[\w+=,.@-]+/)*[\w+=,.@-]+")
_SESSION_ARN = re.compile(r"arn:[a-z][a-z0-9-]*:sts::(\d{12}):assumed-role/([\w+=,.@-]+)/[\w+=,.@-]+")
_FEDERATED_USER_ARN = re.compile(r"arn:[a-z][a-z0-9-]*:sts::\d{12}:federated-user/[\w+=,.@-]+")
_SERVICE_NAME = re.compile(r"[a-z0-9][a-z0-9.-]*\.amazonaws\.com(?:\.cn)?")


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


class _Reach(enum.Enum):
    """How a Principal element reaches a request's principal."""

    NONE = "none"
    #: Named directly: the role's ARN, the service, "*" (or the account itself for an account principal).
    DIRECT = "direct"
    #: Through the principal's account: in an Allow this delegates to IAM, in a Deny it applies.
    ACCOUNT = "account"
    #: Through an assumed-role session ARN of the role: a Deny applies (fail closed), an Allow grants nothing.
    SESSION = "session"


def _reach(principals: PrincipalSet, principal: Principal) -> _Reach:
    if principals.everyone:
        return _Reach.DIRECT
    if principal.kind == "service":
        return _Reach.DIRECT if principal.arn in principals.services else _Reach.NONE
    if principal.kind == "account":
        return _Reach.DIRECT if principal.account in principals.accounts else _Reach.NONE
    if principal.arn in principals.iam_arns:
        return _Reach.DIRECT
    if (principal.account, principal.role_name) in principals.sessions:
        return _Reach.SESSION
    if principal.account in principals.accounts:
        return _Reach.ACCOUNT
    return _Reach.NONE


def _excluded_by_not_principal(principals: PrincipalSet, principal: Principal) -> bool:
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


# --- Conditions --------------------------------------------------------------------------------------------------

_Family: TypeAlias = Literal["string", "string_ignore_case", "string_like", "numeric", "date", "bool", "binary", "ip"]
_Comparison: TypeAlias = Literal["eq", "lt", "le", "gt", "ge"]


@dataclass(frozen=True)
class _Operator:
    family: _Family | Literal["arn", "null"]
    negated: bool = False
    comparison: _Comparison = "eq"


_OPERATORS: dict[str, _Operator] = {
    "StringEquals": _Operator("string"),
    "StringNotEquals": _Operator("string", negated=True),
    "StringEqualsIgnoreCase": _Operator("string_ignore_case"),
    "StringNotEqualsIgnoreCase": _Operator("string_ignore_case", negated=True),
    "StringLike": _Operator("string_like"),
    "StringNotLike": _Operator("string_like", negated=True),
    "NumericEquals": _Operator("numeric"),
    "NumericNotEquals": _Operator("numeric", negated=True),
    "NumericLessThan": _Operator("numeric", comparison="lt"),
    "NumericLessThanEquals": _Operator("numeric", comparison="le"),
    "NumericGreaterThan": _Operator("numeric", comparison="gt"),
    "NumericGreaterThanEquals": _Operator("numeric", comparison="ge"),
    "DateEquals": _Operator("date"),
    "DateNotEquals": _Operator("date", negated=True),
    "DateLessThan": _Operator("date", comparison="lt"),
    "DateLessThanEquals": _Operator("date", comparison="le"),
    "DateGreaterThan": _Operator("date", comparison="gt"),
    "DateGreaterThanEquals": _Operator("date", comparison="ge"),
    "Bool": _Operator("bool"),
    "BinaryEquals": _Operator("binary"),
    "IpAddress": _Operator("ip"),
    "NotIpAddress": _Operator("ip", negated=True),
    "ArnEquals": _Operator("arn"),
    "ArnLike": _Operator("arn"),
    "ArnNotEquals": _Operator("arn", negated=True),
    "ArnNotLike": _Operator("arn", negated=True),
    "Null": _Operator("null"),
}
_IF_EXISTS = "IfExists"


@dataclass(frozen=True)
class Condition:
    """One key of one operator of a Condition block: ``{operator: {key: values}}``."""

    operator: str
    key: str
    values: tuple[str, ...]
    #: The operator without its set prefix and IfExists suffix, e.g. "StringLike".
    base: str
    set_operator: Literal["ForAnyValue", "ForAllValues"] | None = None
    if_exists: bool = False
    #: The key as looked up in a request's context (see ``_lookup_key``).
    lookup: str = ""


def _split_operator(operator: str) -> tuple[str, Literal["ForAnyValue", "ForAllValues"] | None, bool] | None:
    set_operator: Literal["ForAnyValue", "ForAllValues"] | None = None
    rest = operator
    if operator.startswith("ForAnyValue:"):
        set_operator, rest = "ForAnyValue", operator.removeprefix("ForAnyValue:")
    elif operator.startswith("ForAllValues:"):
        set_operator, rest = "ForAllValues", operator.removeprefix("ForAllValues:")
    if_exists = rest.endswith(_IF_EXISTS) and rest != _IF_EXISTS
    base = rest.removesuffix(_IF_EXISTS) if if_exists else rest
    if base not in _OPERATORS or (base == "Null" and (if_exists or set_operator is not None)):
        return None
    return base, set_operator, if_exists


_EPOCH = re.compile(r"-?\d+(?:\.\d+)?")


def _parse_date(text: str) -> float | None:
    """Seconds since the epoch of an ISO 8601 date or date-time, or of epoch seconds; None if neither."""
    if _EPOCH.fullmatch(text):
        return float(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _parse_number(text: str) -> Decimal | None:
    try:
        number = Decimal(text.strip())
    except InvalidOperation:
        return None
    return number if number.is_finite() else None


def _parse_bool(text: str) -> bool | None:
    lowered = text.lower()
    return True if lowered == "true" else False if lowered == "false" else None


def _parse_binary(text: str) -> bytes | None:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None


def _parse_network(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        return None


def _split_arn(text: str) -> list[str] | None:
    parts = text.split(":", 5)
    return parts if len(parts) == 6 and parts[0] == "arn" else None


# --- Glob matching ---------------------------------------------------------------------------------------------


@lru_cache(maxsize=8192)
def _glob(pattern: str) -> re.Pattern[str]:
    """``*`` any run of characters (slashes and colons included), ``?`` one character, the rest literal."""
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern), re.DOTALL)


@lru_cache(maxsize=1024)
def _segment_tail(pattern: str) -> re.Pattern[str]:
    """The last segment of an ARN pattern with fewer than six segments, matched against the rest of an ARN.

    Wildcards stay within the segment, except a ``*`` that ends it: that one "can expand to match beyond the
    colon boundaries" ("IAM JSON policy elements: Resource").
    """
    parts = []
    for position, c in enumerate(pattern):
        if c == "*":
            parts.append(".*" if position == len(pattern) - 1 else "[^:]*")
        elif c == "?":
            parts.append("[^:]")
        else:
            parts.append(re.escape(c))
    return re.compile("".join(parts), re.DOTALL)


def _action_matches(pattern: str, action: str) -> bool:
    return _glob(pattern.lower()).fullmatch(action.lower()) is not None


def _arn_matches(pattern_parts: Sequence[str], arn_parts: Sequence[str]) -> bool:
    """Six pattern segments against six ARN segments, each separately; the last one (the resource part,
    which may hold colons and slashes) as a glob."""
    return all(_glob(p).fullmatch(a) is not None for p, a in zip(pattern_parts, arn_parts, strict=True))


def _resource_matches(pattern: str, resource: str) -> bool:
    if pattern == "*":
        return True
    arn = _split_arn(resource)
    if arn is None:
        return False
    parts = pattern.split(":", 5)
    if len(parts) == 6:
        return _arn_matches(parts, arn)
    head, tail = parts[:-1], parts[-1]
    if not all(_glob(p).fullmatch(a) is not None for p, a in zip(head, arn, strict=False)):
        return False
    return _segment_tail(tail).fullmatch(":".join(arn[len(head) :])) is not None


# --- Statements and policies ---------------------------------------------------------------------------------------

_STATEMENT_ELEMENTS = frozenset(
    {"Sid", "Effect", "Principal", "NotPrincipal", "Action", "NotAction", "Resource", "NotResource", "Condition"}
)
_POLICY_ELEMENTS = frozenset({"Version", "Id", "Statement"})
_VERSIONS = frozenset({"2012-10-17", "2008-10-17"})
_ACTION_PATTERN = re.compile(r"\*|[A-Za-z0-9*?-]+:[A-Za-z0-9*?]+")
_ACTION = re.compile(r"[A-Za-z0-9-]+:[A-Za-z0-9]+")
_PRINCIPAL_TYPES = frozenset({"AWS", "Service", "Federated", "CanonicalUser"})


@dataclass(frozen=True)
class Statement:
    """A parsed policy statement. Exactly one of actions / not_actions is set; at most one of resources /
    not_resources and of principals / not_principals (which ones a policy needs depends on its kind)."""

    sid: str | None
    effect: Effect
    actions: tuple[str, ...] | None = None
    not_actions: tuple[str, ...] | None = None
    resources: tuple[str, ...] | None = None
    not_resources: tuple[str, ...] | None = None
    principals: PrincipalSet | None = None
    not_principals: PrincipalSet | None = None
    conditions: tuple[Condition, ...] = ()
    #: The statement's position in its policy, for messages when it has no Sid.
    index: int = 0

    @property
    def label(self) -> str:
        return f"statement {self.sid!r}" if self.sid else f"statement [{self.index}]"

    def matches_action(self, action: str) -> bool:
        if self.actions is not None:
            return any(_action_matches(p, action) for p in self.actions)
        return not any(_action_matches(p, action) for p in self.not_actions or ())

    def matches_resource(self, resource: str) -> bool:
        if self.resources is not None:
            return any(_resource_matches(p, resource) for p in self.resources)
        if self.not_resources is not None:
            return not any(_resource_matches(p, resource) for p in self.not_resources)
        return True


@dataclass(frozen=True)
class Policy:
    """A parsed policy document. ``source`` labels it in messages."""

    source: str
    statements: tuple[Statement, ...]
    version: str | None = None
    id: str | None = None

    @classmethod
    def parse(cls, document: Mapping[str, Any] | str, source: str) -> Policy:
        """Parse JSON text or an already-decoded document; raise PolicyError if it is malformed and
        UnsupportedCondition if it uses an operator, key or policy variable this evaluator does not know."""
        if isinstance(document, str):
            try:
                decoded = json.loads(document, object_pairs_hook=_no_duplicate_keys)
            except json.JSONDecodeError as error:
                raise PolicyError(f"{source}: not JSON: {error}") from None
            except _DuplicateKey as error:
                raise PolicyError(f"{source}: duplicate key {error.args[0]!r} in the JSON text") from None
        else:
            decoded = document
        if not isinstance(decoded, Mapping):
            raise PolicyError(f"{source}: a policy document is a JSON object, not {type(decoded).__name__}")
        unknown = sorted(str(k) for k in decoded if k not in _POLICY_ELEMENTS)
        if unknown:
            raise PolicyError(f"{source}: unknown policy element(s) {', '.join(unknown)}")
        version = decoded.get("Version")
        if version is not None and version not in _VERSIONS:
            raise PolicyError(f"{source}: Version must be 2012-10-17 or 2008-10-17, not {version!r}")
        policy_id = decoded.get("Id")
        if policy_id is not None and not isinstance(policy_id, str):
            raise PolicyError(f"{source}: Id must be a string")
        if "Statement" not in decoded:
            raise PolicyError(f"{source}: no Statement")
        raw = decoded["Statement"]
        raw_statements = [raw] if isinstance(raw, Mapping) else raw
        if not isinstance(raw_statements, list):
            raise PolicyError(f"{source}: Statement must be an object or a list of objects")
        statements = tuple(_parse_statement(s, index, source) for index, s in enumerate(raw_statements))
        return cls(source=source, statements=statements, version=version, id=policy_id)


class _DuplicateKey(Exception):
    pass


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(key)
        result[key] = value
    return result


def _parse_statement(raw: object, index: int, source: str) -> Statement:
    if not isinstance(raw, Mapping):
        raise PolicyError(f"{source}: statement [{index}] must be an object, not {type(raw).__name__}")
    sid = raw.get("Sid")
    where = f"{source}, statement {sid!r}" if isinstance(sid, str) and sid else f"{source}, statement [{index}]"

    def fail(message: str) -> PolicyError:
        return PolicyError(f"{where}: {message}")

    if sid is not None and not isinstance(sid, str):
        raise fail("Sid must be a string")
    unknown = sorted(str(k) for k in raw if k not in _STATEMENT_ELEMENTS)
    if unknown:
        raise fail(f"unknown statement element(s) {', '.join(unknown)}")
    if "Effect" not in raw:
        raise fail("no Effect")
    effect = raw["Effect"]
    if effect not in ("Allow", "Deny"):
        raise fail(f"Effect must be exactly Allow or Deny, not {effect!r}")

    for one, other in (("Action", "NotAction"), ("Resource", "NotResource"), ("Principal", "NotPrincipal")):
        if one in raw and other in raw:
            raise fail(f"both {one} and {other}")
    if "Action" not in raw and "NotAction" not in raw:
        raise fail("neither Action nor NotAction")

    def strings(element: str) -> tuple[str, ...] | None:
        if element not in raw:
            return None
        value = raw[element]
        values = [value] if isinstance(value, str) else value
        if not isinstance(values, list) or not values or not all(isinstance(v, str) and v for v in values):
            raise fail(f"{element} must be a non-empty string or a non-empty list of non-empty strings")
        return tuple(values)

    actions, not_actions = strings("Action"), strings("NotAction")
    for pattern in (*(actions or ()), *(not_actions or ())):
        if _ACTION_PATTERN.fullmatch(pattern) is None:
            raise fail(f"{pattern!r} is not an action (service:Action, wildcards allowed) or *")

    resources, not_resources = strings("Resource"), strings("NotResource")
    for pattern in (*(resources or ()), *(not_resources or ())):
        _check_resource_pattern(pattern, fail, where)

    principals = _parse_principal(raw["Principal"], "Principal", fail) if "Principal" in raw else None
    not_principals = _parse_principal(raw["NotPrincipal"], "NotPrincipal", fail) if "NotPrincipal" in raw else None
    if not_principals is not None and effect == "Allow":
        raise fail("NotPrincipal must be used with Deny; with Allow it is not supported")
    for element, parsed in (("Principal", principals), ("NotPrincipal", not_principals)):
        if parsed is not None and parsed.canonical_users and (effect == "Deny" or element == "NotPrincipal"):
            raise fail(
                f"a CanonicalUser in a Deny's {element} cannot be evaluated: which principals it covers is unknown"
            )

    conditions = _parse_conditions(raw["Condition"], fail, where) if "Condition" in raw else ()
    return Statement(
        sid=sid or None,
        effect=effect,
        actions=actions,
        not_actions=not_actions,
        resources=resources,
        not_resources=not_resources,
        principals=principals,
        not_principals=not_principals,
        conditions=conditions,
        index=index,
    )


def _check_resource_pattern(pattern: str, fail: _Fail, where: str) -> None:
    if "${" in pattern:
        raise UnsupportedCondition(f"{where}: policy variable in Resource {pattern!r} is not supported")
    if pattern == "*":
        return
    if not pattern.startswith("arn:"):
        raise fail(f"Resource {pattern!r} must be an ARN or *")
    parts = pattern.split(":", 5)
    if len(parts) >= 3 and ("*" in parts[2] or "?" in parts[2]):
        raise fail(f"Resource {pattern!r}: a wildcard cannot stand in the service segment of an ARN")


def _parse_principal(raw: object, element: str, fail: _Fail) -> PrincipalSet:
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


def _condition_value(value: object, fail: _Fail, what: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return value
    raise fail(f"{what}: a condition value must be a string, a number or a boolean, not {type(value).__name__}")


def _parse_conditions(raw: object, fail: _Fail, where: str) -> tuple[Condition, ...]:
    if not isinstance(raw, Mapping):
        raise fail("Condition must be an object of operators")
    conditions: list[Condition] = []
    for operator, block in raw.items():
        split = _split_operator(operator)
        if split is None:
            raise UnsupportedCondition(f"{where}: condition operator {operator!r} is not supported")
        base, set_operator, if_exists = split
        if not isinstance(block, Mapping) or not block:
            raise fail(f"{operator} must be an object of condition keys")
        for key, value in block.items():
            what = f"{operator} {key}"
            lookup = _lookup_key(key)
            if lookup is None:
                raise UnsupportedCondition(f"condition key {key!r} is not supported ({where}, {operator})")
            if isinstance(value, list):
                if not value:
                    raise fail(f"{what}: an empty list of values")
                values = tuple(_condition_value(v, fail, what) for v in value)
            else:
                values = (_condition_value(value, fail, what),)
            if set_operator is None and base != "Null" and _is_multivalued(lookup):
                raise UnsupportedCondition(
                    f"{where}: {key} is multivalued; AWS requires ForAnyValue: or ForAllValues: with {operator}"
                )
            for text in values:
                _check_condition_value(_OPERATORS[base], text, operator, key, where, fail)
            conditions.append(Condition(operator, key, values, base, set_operator, if_exists, lookup))
    return tuple(conditions)


def _check_condition_value(spec: _Operator, text: str, operator: str, key: str, where: str, fail: _Fail) -> None:
    if "${" in text:
        raise UnsupportedCondition(f"{where}: policy variable in {operator} {key} value {text!r} is not supported")
    family = spec.family
    if family == "arn":
        readable = _split_arn(text) is not None
    elif family == "numeric":
        readable = _parse_number(text) is not None
    elif family == "date":
        readable = _parse_date(text) is not None
    elif family in ("bool", "null"):
        readable = _parse_bool(text) is not None
    elif family == "binary":
        readable = _parse_binary(text) is not None
    elif family == "ip":
        readable = _parse_network(text) is not None
    else:
        readable = True
    if family != "arn" and not readable:
        raise fail(f"{operator} {key}: {text!r} is not a value {operator} can compare")
    if not readable:
        raise UnsupportedCondition(
            f"{where}: {operator} {key} value {text!r} is not an ARN of six segments; how AWS matches it is not known"
        )


# --- Requests ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """One call: ``action`` on ``resource`` (an ARN, or "*" for an action without resource-level permissions) by
    ``principal``, with the condition keys present in the request. A key absent from ``context`` is absent."""

    action: str
    resource: str
    principal: Principal
    context: Mapping[str, ContextValue] = field(default_factory=dict)
    _values: Mapping[str, tuple[_Scalar, ...]] = field(
        init=False, repr=False, compare=False, hash=False, default_factory=dict
    )

    def __post_init__(self) -> None:
        if _ACTION.fullmatch(self.action) is None:
            raise ValueError(f"not an action (service:Action, no wildcards): {self.action!r}")
        if self.resource != "*" and _split_arn(self.resource) is None:
            raise ValueError(f"the resource must be an ARN or *, not {self.resource!r}")
        values: dict[str, tuple[_Scalar, ...]] = {}
        for key, value in self.context.items():
            lookup = _lookup_key(key)
            if lookup is None:
                raise ValueError(f"condition key {key!r} in the request context is not supported")
            if lookup in values:
                raise ValueError(f"condition key {key!r} is in the request context twice")
            values[lookup] = _context_values(key, lookup, value)
        object.__setattr__(self, "_values", values)

    def values(self, lookup: str) -> tuple[_Scalar, ...] | None:
        """The request's values of a key (by its lookup form), or None when absent (or an empty set)."""
        found = self._values.get(lookup)
        return found if found else None


def _context_values(key: str, lookup: str, value: object) -> tuple[_Scalar, ...]:
    if _is_multivalued(lookup):
        if isinstance(value, str) or not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"{key} is multivalued: give it a list of strings, not {value!r}")
        return tuple(value)
    if not isinstance(value, str | bool | int | float):
        raise ValueError(f"{key} is single-valued: give it a string, a number or a boolean, not {value!r}")
    return (value,)


# --- Condition evaluation -------------------------------------------------------------------------------------------


class _Unreadable(Exception):
    """A request value the operator cannot read."""


def _as_text(value: _Scalar) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _request_number(value: _Scalar) -> Decimal:
    number = None if isinstance(value, bool) else _parse_number(str(value))
    if number is None:
        raise _Unreadable
    return number


def _policy_number(text: str) -> Decimal:
    number = _parse_number(text)
    if number is None:  # checked when the policy was parsed
        raise _Unreadable
    return number


def _policy_date(text: str) -> float:
    moment = _parse_date(text)
    if moment is None:  # checked when the policy was parsed
        raise _Unreadable
    return moment


def _request_date(value: _Scalar) -> float:
    if isinstance(value, bool):
        raise _Unreadable
    moment = float(value) if isinstance(value, int | float) else _parse_date(value)
    if moment is None:
        raise _Unreadable
    return moment


def _request_bool(value: _Scalar) -> bool:
    if isinstance(value, bool):
        return value
    parsed = _parse_bool(value) if isinstance(value, str) else None
    if parsed is None:
        raise _Unreadable
    return parsed


def _ordered(comparison: _Comparison, left: Decimal | float, right: Decimal | float) -> bool:
    if comparison == "lt":
        return left < right
    if comparison == "le":
        return left <= right
    if comparison == "gt":
        return left > right
    if comparison == "ge":
        return left >= right
    return left == right


def _value_matches(spec: _Operator, value: _Scalar, policy_value: str) -> bool:
    """The positive comparison of one request value with one policy value."""
    family = spec.family
    if family == "string":
        return _as_text(value) == policy_value
    if family == "string_ignore_case":
        return _as_text(value).casefold() == policy_value.casefold()
    if family == "string_like":
        return _glob(policy_value).fullmatch(_as_text(value)) is not None
    if family == "numeric":
        return _ordered(spec.comparison, _request_number(value), _policy_number(policy_value))
    if family == "date":
        return _ordered(spec.comparison, _request_date(value), _policy_date(policy_value))
    if family == "bool":
        return _request_bool(value) == _parse_bool(policy_value)
    if family == "binary":
        decoded = _parse_binary(value) if isinstance(value, str) else None
        if decoded is None:
            raise _Unreadable
        return decoded == _parse_binary(policy_value)
    if family == "ip":
        try:
            address = ipaddress.ip_address(value) if isinstance(value, str) else None
        except ValueError:
            address = None
        network = _parse_network(policy_value)
        if address is None or network is None:
            raise _Unreadable
        return address.version == network.version and address in network
    if family == "arn":
        arn = _split_arn(value) if isinstance(value, str) else None
        pattern = _split_arn(policy_value)
        if arn is None or pattern is None:
            raise _Unreadable
        return _arn_matches(pattern, arn)
    raise _Unreadable


def _condition_holds(condition: Condition, request: Request, policy: Policy, statement: Statement) -> bool:
    present = request.values(condition.lookup)
    spec = _OPERATORS[condition.base]
    if spec.family == "null":
        return any((present is None) == _parse_bool(v) for v in condition.values)
    if present is None:
        if condition.if_exists or condition.set_operator == "ForAllValues":
            return True
        if condition.set_operator == "ForAnyValue":
            return False
        return spec.negated

    def per_value(value: _Scalar) -> bool:
        try:
            matched = any(_value_matches(spec, value, p) for p in condition.values)
        except _Unreadable:
            raise UnsupportedCondition(
                f"{policy.source}, {statement.label}: {condition.operator} cannot read the request's "
                f"{condition.key} value {value!r}"
            ) from None
        return not matched if spec.negated else matched

    if condition.set_operator == "ForAllValues":
        return all(per_value(v) for v in present)
    if condition.set_operator == "ForAnyValue":
        return any(per_value(v) for v in present)
    if len(present) != 1:
        raise UnsupportedCondition(
            f"{policy.source}, {statement.label}: {condition.key} has several values; {condition.operator} needs one"
        )
    return per_value(present[0])


def _applies(statement: Statement, request: Request, policy: Policy) -> bool:
    """Whether the statement covers the request's action and resource and all its conditions hold (its principal
    is checked by the caller)."""
    if not (statement.matches_action(request.action) and statement.matches_resource(request.resource)):
        return False
    return all(_condition_holds(c, request, policy, statement) for c in statement.conditions)


# --- Decisions --------------------------------------------------------------------------------------------------


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


def _reaches(statement: Statement, principal: Principal) -> _Reach:
    if statement.not_principals is not None:
        excluded = _excluded_by_not_principal(statement.not_principals, principal)
        return _Reach.NONE if excluded else _Reach.DIRECT
    if statement.principals is None:
        return _Reach.NONE
    return _reach(statement.principals, principal)


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
            if reach is _Reach.NONE or not _applies(statement, request, policy):
                continue
            if statement.effect == "Deny":
                found.denies.append((policy, statement))
            elif reach is _Reach.DIRECT:
                found.direct_allows.append((policy, statement))
            elif reach is _Reach.ACCOUNT:
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
    arn = _split_arn(request.resource)
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
    key = _split_arn(request.resource)
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
