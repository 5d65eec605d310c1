"""The REST API's request rules, from ONE source: JSON Schemas as plain Python dicts.

The same dicts build the API Gateway request models (draft-4; :func:`gateway_schema` drops what
API Gateway does not understand) in the stack, and validate again in the Lambdas with
fastjsonschema (compiled once per schema per container), which also enforces what API Gateway
ignores (``format: uuid``) and applies to path and query parameters, which API Gateway models
cannot check at all. fastjsonschema comes with the official Powertools layer (its ``[all]``
extra, the one the layer is built with); the tests pin the same version.

The schemas may use only the keywords both sides enforce alike (:data:`_KNOWN_KEYWORDS`), so a
rule cannot be written here and silently ignored by one side. A broken rule answers 400 with the
code API Gateway itself uses for the same kind of input (:data:`BODY_ERROR` for the body,
:data:`PARAMETERS_ERROR` for path and query) and a message that names the field and the rule.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Mapping
from typing import Any, Final

import fastjsonschema
from fastjsonschema.exceptions import JsonSchemaDefinitionException, JsonSchemaValueException

from lambdas.events.messages import REASON_ESCALATED
from lambdas.shared import keys

SCHEMA_DRAFT: Final = "http://json-schema.org/draft-04/schema#"
MAX_BODY_BYTES: Final = 8 * 1024

CUSTOMER_ID_PATTERN: Final = "^[a-zA-Z0-9-]{1,64}$"
LANGUAGE_PATTERN: Final = "^[a-z]{2}(-[A-Z]{2})?$"
SOURCES: Final = ("web", "mobile", "voice")
PRIORITIES: Final = ("low", "normal", "high", "urgent")
#: Reasons with a meaning inside the system, never chosen by a caller: ``escalated`` is the status
#: of a handoff the managers were paged for, ``manager`` is the skill that reserves a manager directly.
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

#: An agent's id is the subject (``sub``) of its identity-provider user, e.g. a Cognito UUID.
AGENT_ID_PATTERN: Final = "^[A-Za-z0-9-]{1,64}$"
#: The stage's skill rule (``StageConfig.manager_skill`` obeys the same one).
SKILL_PATTERN: Final = "^[A-Za-z0-9_-]{1,64}$"
#: A display name: printable text, no control characters (it is shown in consoles and logs).
#: Written with regex escapes (not the characters themselves): a template holding a raw control
#: character is not valid YAML, and API Gateway's (Java) and Python's engines both read ``\uXXXX``.
DISPLAY_NAME_PATTERN: Final = r"^[^\u0000-\u001f\u007f]{1,100}$"
MAX_AGENT_SKILLS: Final = 40
#: What ``GET /admin/agents?status=`` may filter on (every agent status, retired included).
AGENT_STATUSES: Final = ("available", "busy", "away", "offline", "retired")

AGENT_ID: Final[dict[str, Any]] = {"type": "string", "pattern": AGENT_ID_PATTERN, "maxLength": 64}
_SKILLS: Final[dict[str, Any]] = {
    "type": "array",
    "minItems": 1,
    "maxItems": MAX_AGENT_SKILLS,
    "uniqueItems": True,
    "items": {"type": "string", "pattern": SKILL_PATTERN, "maxLength": 64},
}
_DISPLAY_NAME: Final[dict[str, Any]] = {
    "type": "string",
    "pattern": DISPLAY_NAME_PATTERN,
    "maxLength": 100,
    "description": "1 to 100 characters, none of them a control character",
}

REGISTER_AGENT: Final[dict[str, Any]] = {
    "$schema": SCHEMA_DRAFT,
    "title": "RegisterAgentRequest",
    "type": "object",
    "required": ["agent_id", "display_name", "skills"],
    "additionalProperties": False,
    "properties": {
        "agent_id": AGENT_ID,
        "display_name": _DISPLAY_NAME,
        "skills": _SKILLS,
        # Escalated handoffs go only to managers.
        "is_manager": {"type": "boolean"},
    },
}

UPDATE_AGENT: Final[dict[str, Any]] = {
    "$schema": SCHEMA_DRAFT,
    "title": "UpdateAgentRequest",
    "type": "object",
    "minProperties": 1,
    "additionalProperties": False,
    "properties": {"display_name": _DISPLAY_NAME, "skills": _SKILLS, "is_manager": {"type": "boolean"}},
}

AGENTS_QUERY: Final[dict[str, Any]] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 25},
        "cursor": CURSOR,
        "status": {"type": "string", "enum": list(AGENT_STATUSES)},
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
    "RegisterAgentRequest": REGISTER_AGENT,
    "UpdateAgentRequest": UPDATE_AGENT,
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
        "minProperties",
        "items",
        "minItems",
        "maxItems",
        "uniqueItems",
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
#: Formats the Lambda checks beyond draft-4's own (API Gateway ignores every ``format``).
_FORMATS: Final[Mapping[str, Callable[[str], bool]]] = {"uuid": lambda value: bool(_UUID.fullmatch(value))}

#: The error codes of a 400, the same ones API Gateway's own validator answers with
#: (``$context.error.responseType`` in the gateway responses): one code per kind, either side.
BODY_ERROR: Final = "BAD_REQUEST_BODY"
PARAMETERS_ERROR: Final = "BAD_REQUEST_PARAMETERS"


class ValidationError(ValueError):
    """A request breaks a rule; the message names the field and the rule (safe to return).

    ``code`` is :data:`BODY_ERROR` or :data:`PARAMETERS_ERROR`, as API Gateway would answer.
    """

    def __init__(self, message: str, code: str = BODY_ERROR) -> None:
        super().__init__(message)
        self.code = code


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
    if "items" in schema:
        _check_schema(schema["items"], f"{where}[]")


def gateway_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``schema`` for an API Gateway model: without ``format`` and ``default``."""
    _check_schema(schema)
    result: dict[str, Any] = {k: copy.deepcopy(v) for k, v in schema.items() if k not in _LAMBDA_ONLY}
    if "properties" in result:
        result["properties"] = {name: gateway_schema(sub) for name, sub in schema["properties"].items()}
    if "items" in result:
        result["items"] = gateway_schema(schema["items"])
    return result


Validator = Callable[[Any], Any]
#: Compiled validators by schema identity; the schema is kept beside its validator so that an id
#: cannot be reused by another dict while the entry lives.
_COMPILED: dict[int, tuple[Mapping[str, Any], Validator]] = {}


def compiled(schema: Mapping[str, Any]) -> Validator:
    """``schema`` compiled by fastjsonschema, once per container (schemas are module constants)."""
    entry = _COMPILED.get(id(schema))
    if entry is not None and entry[0] is schema:
        return entry[1]
    _check_schema(schema)
    # A path or query parameter's schema has no $schema; every rule here means the same in draft-4.
    definition = {"$schema": SCHEMA_DRAFT, **schema}
    try:
        validator: Validator = fastjsonschema.compile(definition, formats=dict(_FORMATS), use_default=False)
    except JsonSchemaDefinitionException as err:
        raise TypeError(f"schema {schema.get('title', '')!r} does not compile: {err}") from None
    _COMPILED[id(schema)] = (schema, validator)
    return validator


def _message(err: JsonSchemaValueException, where: str) -> str:
    """The project's message for ``err``: the field, then the rule it breaks, in plain words."""
    field = where + (err.name or "data").removeprefix("data")
    rule, expected, value = err.rule, err.rule_definition, err.value
    if rule == "required" and isinstance(value, dict):
        missing = [str(name) for name in expected if name not in value]
        return f"{field}.{missing[0]} is required" if missing else f"{field} misses a required property"
    if rule == "additionalProperties" and isinstance(value, dict):
        known = err.definition.get("properties", {}) if isinstance(err.definition, dict) else {}
        extra = sorted(str(k) for k in value if k not in known)
        return f"{field} has unknown properties: {', '.join(extra)[:200]}"
    if rule == "enum":
        return f"{field} must be one of {', '.join(map(str, expected))}"
    if rule == "uniqueItems":
        return f"{field} must not repeat an item"
    described = err.definition.get("description") if isinstance(err.definition, dict) else None
    if rule == "pattern" and described:
        return f"{field} must be {described}"  # where the pattern itself would not read well
    if rule == "format":
        return f"{field} must be a lowercase {expected}"
    words = {
        "type": "must be of type",
        "minLength": "must have at least {} characters",
        "maxLength": "must have at most {} characters",
        "pattern": "must match",
        "minimum": "must be >=",
        "maximum": "must be <=",
        "minItems": "must have at least {} items",
        "maxItems": "must have at most {} items",
        "minProperties": "must have at least {} properties",
    }.get(str(rule))
    if words is None:
        return f"{field} is invalid"
    return f"{field} {words.format(expected)}" if "{}" in words else f"{field} {words} {expected}"


def validate(value: Any, schema: Mapping[str, Any], where: str = "body", code: str = BODY_ERROR) -> None:
    """Raise ValidationError naming the first field of ``value`` that breaks ``schema``."""
    try:
        compiled(schema)(value)
    except JsonSchemaValueException as err:
        raise ValidationError(_message(err, where), code) from None
    except RecursionError:
        raise ValidationError(f"{where} is nested too deeply", code) from None


def _no_constant(name: str) -> float:
    """``NaN`` and ``Infinity`` are not JSON (Python's parser accepts them); refuse them."""
    raise ValueError(f"{name} is not JSON")


def parse_body(raw: str | None, schema: Mapping[str, Any], *, required: bool = True) -> dict[str, Any]:
    """The JSON body as a dict that satisfies ``schema``; an absent optional body is ``{}``."""
    if raw is None or raw == "":
        if required:
            raise ValidationError("a JSON body is required")
        raw = "{}"
    if len(raw.encode("utf-8", "surrogatepass")) > MAX_BODY_BYTES:
        raise ValidationError(f"the body must be at most {MAX_BODY_BYTES} bytes")
    try:
        body = json.loads(raw, parse_constant=_no_constant)
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
                raise ValidationError(f"query.{name} must be an integer", PARAMETERS_ERROR)
            values[name] = int(text)
        else:
            values[name] = text
    validate(values, schema, "query", PARAMETERS_ERROR)
    for name, prop in properties.items():
        if name not in values and "default" in prop:
            values[name] = prop["default"]
    return values


def parse_path(value: str | None, schema: Mapping[str, Any], name: str) -> str:
    """A path parameter that satisfies ``schema``."""
    if value is None:
        raise ValidationError(f"path.{name} is required", PARAMETERS_ERROR)
    validate(value, schema, f"path.{name}", PARAMETERS_ERROR)
    return value
