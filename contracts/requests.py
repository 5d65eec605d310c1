"""The REST API's request rules, from ONE source: JSON Schemas as plain Python dicts.

The same dicts build the API Gateway request models in the API stack (draft-4;
:func:`gateway_schema` drops what API Gateway does not understand) and validate again in the
Lambdas (``lambdas.api.validation``, with fastjsonschema), which also enforce what API Gateway
ignores (``format: uuid``) and apply the path and query schemas, which API Gateway models
cannot check at all.

The schemas may use only the keywords both sides enforce alike (:data:`KNOWN_KEYWORDS`), so a
rule cannot be written here and silently ignored by one side.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Final

from contracts.messages import REASON_ESCALATED
from contracts.priorities import PRIORITIES as PRIORITIES

SCHEMA_DRAFT: Final = "http://json-schema.org/draft-04/schema#"

CUSTOMER_ID_PATTERN: Final = "^[a-zA-Z0-9-]{1,64}$"
LANGUAGE_PATTERN: Final = "^[a-z]{2}(-[A-Z]{2})?$"
SOURCES: Final = ("web", "mobile", "voice")
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

#: A chat message's length limit (the WebSocket protocol's, in characters).
MAX_MESSAGE_CHARS: Final = 4000

REWIND_REQUEST: Final[dict[str, Any]] = {
    "$schema": SCHEMA_DRAFT,
    "title": "RewindRequest",
    "type": "object",
    "required": ["turn_number"],
    "additionalProperties": False,
    "properties": {
        # One of the customer's own turns; everything after it is taken back.
        "turn_number": {"type": "integer", "minimum": 1, "maximum": 9999999999},
        # The turn's new text; without it the turn is answered again as it is.
        "text": {"type": "string", "minLength": 1, "maxLength": MAX_MESSAGE_CHARS},
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
#: Every session status: what ``GET /admin/sessions?status=`` may list (the session records'
#: status machine has exactly these; a unit test holds the two equal).
SESSION_STATUSES: Final = ("active", "handoff", "disconnected", "archived", "deleted")
#: The one status an agent may list: the sessions waiting for or served by an agent.
AGENT_LISTABLE_STATUS: Final = "handoff"
SESSIONS_BY_STATUS_QUERY: Final[dict[str, Any]] = {
    "type": "object",
    "required": ["status"],
    "additionalProperties": False,
    "properties": {
        "status": {"type": "string", "enum": list(SESSION_STATUSES)},
        "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 25},
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
    "RewindRequest": REWIND_REQUEST,
    "PresenceRequest": PRESENCE_REQUEST,
    "RegisterAgentRequest": REGISTER_AGENT,
    "UpdateAgentRequest": UPDATE_AGENT,
}

KNOWN_KEYWORDS: Final = frozenset(
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
LAMBDA_ONLY: Final = frozenset({"format", "default"})
#: Formats the Lambdas check beyond draft-4's own (API Gateway ignores every ``format``).
FORMATS: Final = frozenset({"uuid"})


def check_schema(schema: Mapping[str, Any], where: str = "$") -> None:
    unknown = set(schema) - KNOWN_KEYWORDS
    if unknown:
        raise TypeError(f"schema at {where} uses unsupported keywords {sorted(unknown)}")
    if schema.get("additionalProperties", False) is not False:
        raise TypeError(f"schema at {where}: additionalProperties may only be false")
    if "format" in schema and schema["format"] not in FORMATS:
        raise TypeError(f"schema at {where}: unsupported format {schema['format']!r}")
    for name, sub in schema.get("properties", {}).items():
        check_schema(sub, f"{where}.{name}")
    if "items" in schema:
        check_schema(schema["items"], f"{where}[]")


def gateway_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``schema`` for an API Gateway model: without ``format`` and ``default``."""
    check_schema(schema)
    result: dict[str, Any] = {k: copy.deepcopy(v) for k, v in schema.items() if k not in LAMBDA_ONLY}
    if "properties" in result:
        result["properties"] = {name: gateway_schema(sub) for name, sub in schema["properties"].items()}
    if "items" in result:
        result["items"] = gateway_schema(schema["items"])
    return result
