"""The REST API's request rules, from ONE source: JSON Schemas as plain Python dicts.

The same dicts build the API Gateway request models (draft-4; :func:`gateway_schema` drops what
API Gateway does not understand) in the stack, and validate again in the session Lambda with
:func:`validate`, which also enforces what API Gateway ignores (``format: uuid``) and applies to
path and query parameters, which API Gateway models cannot check at all.

The validator implements exactly the subset of draft-4 used here (type, properties, required,
additionalProperties: false, enum, pattern, minLength, maxLength, minimum, maximum, format: uuid)
and refuses a schema with any other keyword, so a rule cannot be written here and silently
ignored by one side. No third-party library: the Lambda layer ships neither jsonschema nor
fastjsonschema.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Mapping
from typing import Any, Final

from lambdas.events.messages import REASON_ESCALATED
from lambdas.shared import keys

SCHEMA_DRAFT: Final = "http://json-schema.org/draft-04/schema#"
MAX_BODY_BYTES: Final = 8 * 1024

CUSTOMER_ID_PATTERN: Final = "^[a-zA-Z0-9-]{1,64}$"
LANGUAGE_PATTERN: Final = "^[a-z]{2}(-[A-Z]{2})?$"
SOURCES: Final = ("web", "mobile", "voice")
PRIORITIES: Final = ("low", "normal", "high", "urgent")
#: Reasons with a meaning inside the system, never chosen by a caller: ``escalated`` routes a
#: handoff to the managers (SNS filter), ``manager`` is the skill that reserves a manager directly.
RESERVED_REASONS: Final = (REASON_ESCALATED, "manager")
#: A handoff reason doubles as the skill an agent needs (the workflow matches agents on it).
#: The lookahead refuses the reserved ones; API Gateway's (Java) and Python's regex engines both support it.
REASON_PATTERN: Final = f"^(?!(?:{'|'.join(RESERVED_REASONS)})$)[a-z][a-z0-9_]{{0,31}}$"
#: States.Format-safe, Step Functions-safe: what an execution ARN path segment may hold.
EXECUTION_ARN_PATTERN: Final = (
    r"^arn:aws[a-z-]*:states:[a-z0-9-]+:[0-9]{12}:execution:[A-Za-z0-9_-]{1,80}:[A-Za-z0-9_-]{1,80}$"
)
_UUID: Final = keys.UUID_PATTERN

CREATE_SESSION: Final[dict[str, Any]] = {
    "$schema": SCHEMA_DRAFT,
    "title": "CreateSessionRequest",
    "type": "object",
    "required": ["customer_id"],
    "additionalProperties": False,
    "properties": {
        "customer_id": {"type": "string", "pattern": CUSTOMER_ID_PATTERN, "maxLength": 64},
        "metadata": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "source": {"type": "string", "enum": list(SOURCES)},
                "language": {"type": "string", "pattern": LANGUAGE_PATTERN, "maxLength": 5},
            },
        },
    },
}

HANDOFF_REQUEST: Final[dict[str, Any]] = {
    "$schema": SCHEMA_DRAFT,
    "title": "HandoffRequest",
    "type": "object",
    "required": ["reason"],
    "additionalProperties": False,
    "properties": {
        "reason": {"type": "string", "pattern": REASON_PATTERN, "maxLength": 32},
        "priority": {"type": "string", "enum": list(PRIORITIES)},
    },
}

CLEANUP_REQUEST: Final[dict[str, Any]] = {
    "$schema": SCHEMA_DRAFT,
    "title": "CleanupRequest",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        # Sessions waiting longer than this are cleaned; the workflow's configured grace applies when absent.
        "older_than_seconds": {"type": "integer", "minimum": 0, "maximum": 7 * 86400},
    },
}

EXPORT_REQUEST: Final[dict[str, Any]] = {
    "$schema": SCHEMA_DRAFT,
    "title": "ExportRequest",
    "type": "object",
    "required": ["reason"],
    "additionalProperties": False,
    "properties": {
        # Shown to the human reviewer who approves the export; free text, bounded.
        "reason": {"type": "string", "minLength": 3, "maxLength": 256},
    },
}

#: How a closed handoff leaves the session: the assistant answers again, or the session ends.
CLOSE_OUTCOMES: Final = ("resume", "end")

CLOSE_HANDOFF: Final[dict[str, Any]] = {
    "$schema": SCHEMA_DRAFT,
    "title": "CloseHandoffRequest",
    "type": "object",
    "required": ["resolution", "outcome"],
    "additionalProperties": False,
    "properties": {
        # Kept on the handoff record: what the agent did for the customer.
        "resolution": {"type": "string", "minLength": 1, "maxLength": 1000},
        "outcome": {"type": "string", "enum": list(CLOSE_OUTCOMES)},
    },
}

PRESENCE_REQUEST: Final[dict[str, Any]] = {
    "$schema": SCHEMA_DRAFT,
    "title": "PresenceRequest",
    "type": "object",
    "required": ["status"],
    "additionalProperties": False,
    "properties": {"status": {"type": "string", "enum": ["available", "away"]}},
}

SESSION_ID: Final[dict[str, Any]] = {"type": "string", "format": "uuid", "maxLength": 36}
CUSTOMER_ID: Final[dict[str, Any]] = {"type": "string", "pattern": CUSTOMER_ID_PATTERN, "maxLength": 64}
EXECUTION_ID: Final[dict[str, Any]] = {"type": "string", "pattern": EXECUTION_ARN_PATTERN, "maxLength": 256}
CURSOR: Final[dict[str, Any]] = {"type": "string", "minLength": 1, "maxLength": 2048}

TURNS_QUERY: Final[dict[str, Any]] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20},
        "cursor": CURSOR,
    },
}
CUSTOMER_SESSIONS_QUERY: Final[dict[str, Any]] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10},
        "cursor": CURSOR,
    },
}

#: Request body models by name (the stack creates one API Gateway model per entry).
BODY_MODELS: Final[Mapping[str, dict[str, Any]]] = {
    "CreateSessionRequest": CREATE_SESSION,
    "HandoffRequest": HANDOFF_REQUEST,
    "CleanupRequest": CLEANUP_REQUEST,
    "ExportRequest": EXPORT_REQUEST,
    "CloseHandoffRequest": CLOSE_HANDOFF,
    "PresenceRequest": PRESENCE_REQUEST,
}

_KNOWN_KEYWORDS: Final = frozenset(
    {
        "$schema",
        "title",
        "description",
        "type",
        "properties",
        "required",
        "additionalProperties",
        "enum",
        "pattern",
        "minLength",
        "maxLength",
        "minimum",
        "maximum",
        "format",
        "default",
    }
)
#: Keywords API Gateway's draft-4 validator does not enforce or that mean nothing to it.
_LAMBDA_ONLY: Final = frozenset({"format", "default"})
_FORMATS: Final = frozenset({"uuid"})


class ValidationError(ValueError):
    """A request breaks a rule; the message names the field and the rule (safe to return)."""


def _check_schema(schema: Mapping[str, Any], where: str = "$") -> None:
    unknown = set(schema) - _KNOWN_KEYWORDS
    if unknown:
        raise TypeError(f"schema at {where} uses unsupported keywords {sorted(unknown)}")
    if schema.get("additionalProperties", False) is not False:
        raise TypeError(f"schema at {where}: additionalProperties may only be false")
    if "format" in schema and schema["format"] not in _FORMATS:
        raise TypeError(f"schema at {where}: unsupported format {schema['format']!r}")
    for name, sub in schema.get("properties", {}).items():
        _check_schema(sub, f"{where}.{name}")


def gateway_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``schema`` for an API Gateway model: without ``format`` and ``default``."""
    _check_schema(schema)
    result: dict[str, Any] = {k: copy.deepcopy(v) for k, v in schema.items() if k not in _LAMBDA_ONLY}
    if "properties" in result:
        result["properties"] = {name: gateway_schema(sub) for name, sub in schema["properties"].items()}
    return result


@functools.lru_cache(maxsize=64)
def _regex(pattern: str) -> re.Pattern[str]:
    """``pattern`` as ECMA-262 reads it: a final ``$`` is the end of input, never before a newline."""
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        pattern = pattern[:-1] + r"\Z"
    return re.compile(pattern)


def _type_ok(value: Any, kind: str) -> bool:
    if kind == "object":
        return isinstance(value, dict)
    if kind == "string":
        return isinstance(value, str)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "boolean":
        return isinstance(value, bool)
    raise TypeError(f"unsupported schema type {kind!r}")


def validate(value: Any, schema: Mapping[str, Any], where: str = "body") -> None:
    """Raise ValidationError naming the first field of ``value`` that breaks ``schema``."""
    kind = schema.get("type")
    if kind is not None and not _type_ok(value, kind):
        raise ValidationError(f"{where} must be of type {kind}")
    if "enum" in schema and value not in schema["enum"]:
        raise ValidationError(f"{where} must be one of {', '.join(map(str, schema['enum']))}")
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            raise ValidationError(f"{where} must have at least {schema['minLength']} characters")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            raise ValidationError(f"{where} must have at most {schema['maxLength']} characters")
        if "pattern" in schema and not _regex(schema["pattern"]).search(value):
            raise ValidationError(f"{where} must match {schema['pattern']}")
        if schema.get("format") == "uuid" and not _UUID.fullmatch(value):
            raise ValidationError(f"{where} must be a lowercase uuid")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            raise ValidationError(f"{where} must be >= {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            raise ValidationError(f"{where} must be <= {schema['maximum']}")
    if isinstance(value, dict):
        properties: Mapping[str, Any] = schema.get("properties", {})
        for name in schema.get("required", ()):
            if name not in value:
                raise ValidationError(f"{where}.{name} is required")
        if schema.get("additionalProperties") is False:
            extra = sorted(str(k) for k in value if k not in properties)
            if extra:
                raise ValidationError(f"{where} has unknown properties: {', '.join(extra)[:200]}")
        for name, sub in properties.items():
            if name in value:
                validate(value[name], sub, f"{where}.{name}")


def parse_body(raw: str | None, schema: Mapping[str, Any], *, required: bool = True) -> dict[str, Any]:
    """The JSON body as a dict that satisfies ``schema``; an absent optional body is ``{}``."""
    if raw is None or raw == "":
        if required:
            raise ValidationError("a JSON body is required")
        raw = "{}"
    if len(raw.encode("utf-8", "surrogatepass")) > MAX_BODY_BYTES:
        raise ValidationError(f"the body must be at most {MAX_BODY_BYTES} bytes")
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        raise ValidationError("the body is not valid JSON") from None
    validate(body, schema)
    result: dict[str, Any] = body
    return result


def parse_query(params: Mapping[str, str] | None, schema: Mapping[str, Any]) -> dict[str, Any]:
    """Query string parameters converted to the schema's types, defaults applied, validated."""
    raw = dict(params or {})
    properties: Mapping[str, Any] = schema.get("properties", {})
    values: dict[str, Any] = {}
    for name, text in raw.items():
        prop = properties.get(name)
        if prop is not None and prop.get("type") == "integer":
            if not re.fullmatch(r"-?[0-9]{1,9}", text or ""):
                raise ValidationError(f"query.{name} must be an integer")
            values[name] = int(text)
        else:
            values[name] = text
    validate(values, schema, "query")
    for name, prop in properties.items():
        if name not in values and "default" in prop:
            values[name] = prop["default"]
    return values


def parse_path(value: str | None, schema: Mapping[str, Any], name: str) -> str:
    """A path parameter that satisfies ``schema``."""
    if value is None:
        raise ValidationError(f"path.{name} is required")
    validate(value, schema, f"path.{name}")
    return value
