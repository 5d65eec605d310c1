"""The REST API's request rules in the Lambdas: the schemas of :mod:`contracts.requests`, enforced.

The same schema dicts build the API Gateway request models in the API stack; here they validate
again with fastjsonschema (compiled once per schema per container), which also enforces what API
Gateway ignores (``format: uuid``) and applies to path and query parameters, which API Gateway
models cannot check at all. fastjsonschema comes with the official Powertools layer (its
``[all]`` extra, the one the layer is built with); the tests pin the same version. The schemas
are re-exported here, so the handlers read every rule from this module.

A broken rule answers 400 with the
code API Gateway itself uses for the same kind of input (:data:`BODY_ERROR` for the body,
:data:`PARAMETERS_ERROR` for path and query) and a message that names the field and the rule.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any, Final

import fastjsonschema
from fastjsonschema.exceptions import JsonSchemaDefinitionException, JsonSchemaValueException

from contracts.requests import (
    AGENT_ID,
    AGENT_ID_PATTERN,
    AGENT_LISTABLE_STATUS,
    AGENT_STATUSES,
    AGENTS_QUERY,
    BODY_MODELS,
    CLEANUP_REQUEST,
    CLOSE_HANDOFF,
    CLOSE_OUTCOMES,
    CREATE_SESSION,
    CURSOR,
    CUSTOMER_ID,
    CUSTOMER_ID_PATTERN,
    CUSTOMER_SESSIONS_QUERY,
    DISPLAY_NAME_PATTERN,
    EXECUTION_ARN_PATTERN,
    EXECUTION_ID,
    EXPORT_REQUEST,
    FORMATS,
    HANDOFF_REQUEST,
    LANGUAGE_PATTERN,
    MAX_AGENT_SKILLS,
    PRESENCE_REQUEST,
    PRIORITIES,
    REASON_PATTERN,
    REGISTER_AGENT,
    RESERVED_REASONS,
    REWIND_REQUEST,
    SCHEMA_DRAFT,
    SESSION_ID,
    SESSION_STATUSES,
    SESSIONS_BY_STATUS_QUERY,
    SKILL_PATTERN,
    SOURCES,
    TURNS_QUERY,
    UPDATE_AGENT,
    check_schema,
    gateway_schema,
)
from lambdas.shared import keys

__all__ = [
    "AGENTS_QUERY",
    "AGENT_ID",
    "AGENT_ID_PATTERN",
    "AGENT_LISTABLE_STATUS",
    "AGENT_STATUSES",
    "BODY_ERROR",
    "BODY_MODELS",
    "CLEANUP_REQUEST",
    "CLOSE_HANDOFF",
    "CLOSE_OUTCOMES",
    "CREATE_SESSION",
    "CURSOR",
    "CUSTOMER_ID",
    "CUSTOMER_ID_PATTERN",
    "CUSTOMER_SESSIONS_QUERY",
    "DISPLAY_NAME_PATTERN",
    "EXECUTION_ARN_PATTERN",
    "EXECUTION_ID",
    "EXPORT_REQUEST",
    "FORMATS",
    "HANDOFF_REQUEST",
    "LANGUAGE_PATTERN",
    "MAX_AGENT_SKILLS",
    "MAX_BODY_BYTES",
    "PARAMETERS_ERROR",
    "PRESENCE_REQUEST",
    "PRIORITIES",
    "REASON_PATTERN",
    "REGISTER_AGENT",
    "RESERVED_REASONS",
    "REWIND_REQUEST",
    "SCHEMA_DRAFT",
    "SESSIONS_BY_STATUS_QUERY",
    "SESSION_ID",
    "SESSION_STATUSES",
    "SKILL_PATTERN",
    "SOURCES",
    "TURNS_QUERY",
    "UPDATE_AGENT",
    "ValidationError",
    "Validator",
    "check_schema",
    "compiled",
    "gateway_schema",
    "parse_body",
    "parse_path",
    "parse_query",
    "validate",
]

MAX_BODY_BYTES: Final = 8 * 1024
_UUID: Final = keys.UUID_PATTERN

#: How the Lambdas check each format of :data:`FORMATS` (API Gateway ignores every ``format``).
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


Validator = Callable[[Any], Any]
#: Compiled validators by schema identity; the schema is kept beside its validator so that an id
#: cannot be reused by another dict while the entry lives.
_COMPILED: dict[int, tuple[Mapping[str, Any], Validator]] = {}


def compiled(schema: Mapping[str, Any]) -> Validator:
    """``schema`` compiled by fastjsonschema, once per container (schemas are module constants)."""
    entry = _COMPILED.get(id(schema))
    if entry is not None and entry[0] is schema:
        return entry[1]
    check_schema(schema)
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
