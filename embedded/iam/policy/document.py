"""The policy document model: ``Policy`` and its ``Statement`` elements, parsed and checked from JSON.

Parsing rejects what IAM would reject (unknown elements, both Action and NotAction, a wildcard in a
principal, ...) with a ``PolicyError`` that names the policy and the statement.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from embedded.iam.policy.conditions import Condition, parse_conditions
from embedded.iam.policy.errors import Fail, PolicyError, UnsupportedCondition
from embedded.iam.policy.matching import action_matches, resource_matches
from embedded.iam.policy.principals import PrincipalSet, parse_principal

Effect: TypeAlias = Literal["Allow", "Deny"]

_STATEMENT_ELEMENTS = frozenset(
    {"Sid", "Effect", "Principal", "NotPrincipal", "Action", "NotAction", "Resource", "NotResource", "Condition"}
)
_POLICY_ELEMENTS = frozenset({"Version", "Id", "Statement"})
_VERSIONS = frozenset({"2012-10-17", "2008-10-17"})
_ACTION_PATTERN = re.compile(r"\*|[A-Za-z0-9*?-]+:[A-Za-z0-9*?]+")


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
            return any(action_matches(p, action) for p in self.actions)
        return not any(action_matches(p, action) for p in self.not_actions or ())

    def matches_resource(self, resource: str) -> bool:
        if self.resources is not None:
            return any(resource_matches(p, resource) for p in self.resources)
        if self.not_resources is not None:
            return not any(resource_matches(p, resource) for p in self.not_resources)
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

    principals = parse_principal(raw["Principal"], "Principal", fail) if "Principal" in raw else None
    not_principals = parse_principal(raw["NotPrincipal"], "NotPrincipal", fail) if "NotPrincipal" in raw else None
    if not_principals is not None and effect == "Allow":
        raise fail("NotPrincipal must be used with Deny; with Allow it is not supported")
    for element, parsed in (("Principal", principals), ("NotPrincipal", not_principals)):
        if parsed is not None and parsed.canonical_users and (effect == "Deny" or element == "NotPrincipal"):
            raise fail(
                f"a CanonicalUser in a Deny's {element} cannot be evaluated: which principals it covers is unknown"
            )

    conditions = parse_conditions(raw["Condition"], fail, where) if "Condition" in raw else ()
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


def _check_resource_pattern(pattern: str, fail: Fail, where: str) -> None:
    if "${" in pattern:
        raise UnsupportedCondition(f"{where}: policy variable in Resource {pattern!r} is not supported")
    if pattern == "*":
        return
    if not pattern.startswith("arn:"):
        raise fail(f"Resource {pattern!r} must be an ARN or *")
    parts = pattern.split(":", 5)
    if len(parts) >= 3 and ("*" in parts[2] or "?" in parts[2]):
        raise fail(f"Resource {pattern!r}: a wildcard cannot stand in the service segment of an ARN")
