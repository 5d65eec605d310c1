"""The environment every function gets from its stage, by variable name, and the token issuer's.

The deploy side sets every variable of :data:`STAGE_VARIABLES` on every function from the stage's
configuration (``stacks/functions.py``, the one function factory); ``lambdas.shared.settings``
is their only reader and applies the bounds and defaults below. Both authorizers get the
:data:`ISSUER_VARIABLES` (``stacks/identity.py`` sets them, ``lambdas.shared.tokens`` reads them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final


@dataclass(frozen=True)
class Variable:
    """One stage variable: its settings field, bounds, and default (None: required)."""

    field: str
    low: int | None = None
    high: int | None = None
    default: int | str | None = None
    required: bool = False


#: Every stage-setting variable, by name: what the deploy side must set on each function.
STAGE_VARIABLES: Final[Mapping[str, Variable]] = MappingProxyType(
    {
        "SESSION_TTL_HOURS": Variable("session_ttl_hours", 1, 24 * 365, required=True),
        "CLEANUP_SHARDS": Variable("cleanup_shards", 1, 64, required=True),
        "SUMMARY_INTERVAL": Variable("summary_interval", 2, 1000, 10),
        "CONTEXT_TURNS": Variable("context_turns", 1, 100, 20),
        "CONTEXT_MAX_TOKENS": Variable("context_max_tokens", 100, 100_000, 3000),
        "BEDROCK_MODEL_ID": Variable("bedrock_model_id"),
        "BEDROCK_GUARDRAIL_ID": Variable("bedrock_guardrail_id"),
        "BEDROCK_GUARDRAIL_VERSION": Variable("bedrock_guardrail_version"),
        "BEDROCK_ATTEMPTS": Variable("bedrock_attempts", 1, 10, 3),
        "BEDROCK_DEADLINE_SECONDS": Variable("bedrock_deadline_seconds", 1, 600, 20),
        "BEDROCK_FALLBACK_MODEL_ID": Variable("bedrock_fallback_model_id"),
        "REPLY_DEADLINE_SECONDS": Variable("reply_deadline_seconds", 1, 900, 20),
        "REPLY_MAX_TOKENS": Variable("reply_max_tokens", 1, 64_000, 512),
        "MODEL_CALLS_PER_SECOND": Variable("model_calls_per_second", 1, 1000, 10),
        "MODEL_CALL_BUCKETS": Variable("model_call_buckets", 1, 16, 1),
        "MAX_REASSIGNMENTS": Variable("max_reassignments", 0, 10, 2),
        "CLEANUP_GRACE_SECONDS": Variable("cleanup_grace_seconds", 0, 7 * 86400, 3600),
        "SESSION_RESUME_GRACE_SECONDS": Variable("session_resume_grace_seconds", 0, 7 * 86400, 3600),
        "CORS_ALLOWED_ORIGINS": Variable("cors_allowed_origins"),
        "CHAT_CONNECTION_MESSAGES_PER_MINUTE": Variable("chat_connection_messages_per_minute", 1, 600, 20),
        "CHAT_CONNECTION_BURST": Variable("chat_connection_burst", 1, 100, 10),
        "CHAT_CUSTOMER_MESSAGES_PER_MINUTE": Variable("chat_customer_messages_per_minute", 1, 600, 30),
        "CHAT_CUSTOMER_BURST": Variable("chat_customer_burst", 1, 100, 20),
        "CHAT_MAX_CONNECTIONS_PER_CUSTOMER": Variable("chat_max_connections_per_customer", 1, 100, 3),
        "CHAT_DAILY_TOKEN_BUDGET": Variable("chat_daily_token_budget", 1, 1_000_000_000, 200_000),
        "MANAGER_SKILL": Variable("manager_skill", default="manager"),
        "ARCHIVE_PREFIX": Variable("archive_prefix", default="sessions"),
        "AUDIT_LOCK_MODE": Variable("audit_lock_mode"),
        "AUDIT_RETENTION_DAYS": Variable("audit_retention_days", 1, 36500),
    }
)

#: The variables both authorizers verify tokens with: the stage's issuer, its key set and clients.
ISSUER_VARIABLES: Final = (
    "ISSUER_URL",
    "ISSUER_JWKS_URL",
    "ISSUER_AUDIENCES",
    "ISSUER_ALGORITHMS",
    "ISSUER_ACCEPTED_USES",
    "ISSUER_ROLE_CLAIM",
    "ISSUER_DEFAULT_ROLE",
)
