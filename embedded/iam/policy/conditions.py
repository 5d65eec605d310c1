"""Condition blocks: the operators the evaluator knows, how a block is read from a statement and checked, and
whether a condition holds for a request (``IfExists``, ``ForAnyValue`` / ``ForAllValues``, ``Null``, absent keys).
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Literal, TypeAlias

from embedded.iam.policy.errors import Fail, UnsupportedCondition
from embedded.iam.policy.keys import Scalar, is_multivalued, lookup_key
from embedded.iam.policy.matching import arn_matches, split_arn, wildcard
from embedded.iam.policy.request import Request

if TYPE_CHECKING:
    from embedded.iam.policy.document import Policy, Statement

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
    #: The key as looked up in a request's context (see ``lookup_key``).
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


# --- Reading a Condition block ------------------------------------------------------------------------------------


def _condition_value(value: object, fail: Fail, what: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return value
    raise fail(f"{what}: a condition value must be a string, a number or a boolean, not {type(value).__name__}")


def parse_conditions(raw: object, fail: Fail, where: str) -> tuple[Condition, ...]:
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
            lookup = lookup_key(key)
            if lookup is None:
                raise UnsupportedCondition(f"condition key {key!r} is not supported ({where}, {operator})")
            if isinstance(value, list):
                if not value:
                    raise fail(f"{what}: an empty list of values")
                values = tuple(_condition_value(v, fail, what) for v in value)
            else:
                values = (_condition_value(value, fail, what),)
            if set_operator is None and base != "Null" and is_multivalued(lookup):
                raise UnsupportedCondition(
                    f"{where}: {key} is multivalued; AWS requires ForAnyValue: or ForAllValues: with {operator}"
                )
            for text in values:
                _check_condition_value(_OPERATORS[base], text, operator, key, where, fail)
            conditions.append(Condition(operator, key, values, base, set_operator, if_exists, lookup))
    return tuple(conditions)


def _check_condition_value(spec: _Operator, text: str, operator: str, key: str, where: str, fail: Fail) -> None:
    if "${" in text:
        raise UnsupportedCondition(f"{where}: policy variable in {operator} {key} value {text!r} is not supported")
    family = spec.family
    if family == "arn":
        readable = split_arn(text) is not None
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


# --- Whether a condition holds ------------------------------------------------------------------------------------


class _Unreadable(Exception):
    """A request value the operator cannot read."""


def _as_text(value: Scalar) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _request_number(value: Scalar) -> Decimal:
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


def _request_date(value: Scalar) -> float:
    if isinstance(value, bool):
        raise _Unreadable
    moment = float(value) if isinstance(value, int | float) else _parse_date(value)
    if moment is None:
        raise _Unreadable
    return moment


def _request_bool(value: Scalar) -> bool:
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


def _value_matches(spec: _Operator, value: Scalar, policy_value: str) -> bool:
    """The positive comparison of one request value with one policy value."""
    family = spec.family
    if family == "string":
        return _as_text(value) == policy_value
    if family == "string_ignore_case":
        return _as_text(value).casefold() == policy_value.casefold()
    if family == "string_like":
        return wildcard(policy_value).fullmatch(_as_text(value)) is not None
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
        arn = split_arn(value) if isinstance(value, str) else None
        pattern = split_arn(policy_value)
        if arn is None or pattern is None:
            raise _Unreadable
        return arn_matches(pattern, arn)
    raise _Unreadable


def condition_holds(condition: Condition, request: Request, policy: Policy, statement: Statement) -> bool:
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

    def per_value(value: Scalar) -> bool:
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
