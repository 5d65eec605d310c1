"""The stage settings of every function, read once per container with one set of bounds, and the store.

The deploy side (``stacks/functions.py``) sets every variable of :data:`STAGE_VARIABLES` (defined
in :mod:`contracts.environment`) on every function from the stage's ``StageConfig``; this module
is the only reader. A setting every
function gets (the session TTL, the cleanup shards) is required, so a missing one fails with its
name instead of silently falling back; the others keep the documented default where a stage may
genuinely leave them out. Resource names (``TABLE_NAME``, topic ARNs, ...) differ per function
and are read with :func:`resource` where used.

Usage::

    from lambdas.shared import settings

    settings.settings().context_turns      # validated int, read once per container
    settings.store().turns.add_turn(...)         # the one store, with the stage's TTL and shards

``env.reset()`` forgets both (tests change the environment between cases).
"""

from __future__ import annotations

from dataclasses import dataclass

from contracts.environment import STAGE_VARIABLES as STAGE_VARIABLES
from contracts.environment import Variable as Variable
from lambdas.shared import env

# Defined with the other environment readers, so a module that needs its resources but neither the
# stage settings nor the store (the token verifier) can read them without importing this one.
from lambdas.shared.env import optional_resource as optional_resource
from lambdas.shared.env import resource as resource
from lambdas.shared.store import DynamoSessionStore


@dataclass(frozen=True)
class Settings:
    """The stage settings (see :data:`STAGE_VARIABLES` for the variable of each field).

    ``bedrock_model_id`` None means the echo responder and the extractive summary;
    ``bedrock_fallback_model_id`` None means no fallback model.
    ``bedrock_guardrail_id``/``_version``: the guardrail that screens chat replies, both or neither.
    ``cors_allowed_origins`` is needed by the API functions only; :meth:`need` reads a text
    setting and names its variable when it is absent.
    """

    session_ttl_hours: int
    cleanup_shards: int
    summary_interval: int
    context_turns: int
    context_max_tokens: int
    bedrock_model_id: str | None
    bedrock_guardrail_id: str | None
    bedrock_guardrail_version: str | None
    bedrock_attempts: int
    bedrock_deadline_seconds: int
    bedrock_fallback_model_id: str | None
    reply_deadline_seconds: int
    reply_max_tokens: int
    model_calls_per_second: int
    model_call_buckets: int
    max_reassignments: int
    cleanup_grace_seconds: int
    session_resume_grace_seconds: int
    cors_allowed_origins: tuple[str, ...]
    chat_connection_messages_per_minute: int
    chat_connection_burst: int
    chat_customer_messages_per_minute: int
    chat_customer_burst: int
    chat_max_connections_per_customer: int
    chat_daily_token_budget: int
    manager_skill: str
    archive_prefix: str
    audit_lock_mode: str | None
    audit_retention_days: int | None

    def need(self, field: str) -> str:
        """A text setting a function cannot run without; MissingSetting names its variable when empty."""
        value = getattr(self, field)
        if not value:
            name = next(n for n, v in STAGE_VARIABLES.items() if v.field == field)
            raise env.MissingSetting(f"environment variable {name} is required but not set")
        return str(value)

    def audit_retention(self) -> tuple[str, int]:
        """The Object Lock mode (GOVERNANCE or COMPLIANCE) and days each audit object is kept.

        Only the audit locker needs them; MissingSetting names the variable that is absent or wrong.
        """
        mode = self.need("audit_lock_mode").upper()
        if mode not in ("GOVERNANCE", "COMPLIANCE"):
            raise env.MissingSetting(
                f"environment variable AUDIT_LOCK_MODE must be GOVERNANCE or COMPLIANCE (given {mode!r})"
            )
        if self.audit_retention_days is None:
            raise env.MissingSetting("environment variable AUDIT_RETENTION_DAYS is required but not set")
        return mode, self.audit_retention_days

    def origins(self) -> tuple[str, ...]:
        """The CORS origins of the REST API; MissingSetting when CORS_ALLOWED_ORIGINS is empty."""
        self.need("cors_allowed_origins")
        return self.cors_allowed_origins


def _integer(name: str) -> int:
    spec = STAGE_VARIABLES[name]
    default = spec.default if isinstance(spec.default, int) and not spec.required else None
    return env.integer(name, default, low=spec.low, high=spec.high)


def _optional_integer(name: str) -> int | None:
    """An integer only some functions need: None when absent, its bounds checked when present."""
    spec = STAGE_VARIABLES[name]
    return env.integer(name, low=spec.low, high=spec.high) if env.optional(name) is not None else None


def _text(name: str) -> str | None:
    spec = STAGE_VARIABLES[name]
    return env.optional(name, spec.default if isinstance(spec.default, str) else None)


@env.once
def settings() -> Settings:
    """The stage settings, read and validated on first use in the container."""
    origins = _text("CORS_ALLOWED_ORIGINS") or ""
    guardrail = {name: _text(name) for name in ("BEDROCK_GUARDRAIL_ID", "BEDROCK_GUARDRAIL_VERSION")}
    missing = [name for name, value in guardrail.items() if value is None]
    if len(missing) == 1:
        raise env.MissingSetting(
            f"environment variable {missing[0]} is required when a guardrail is named (the id and its version)"
        )
    return Settings(
        session_ttl_hours=_integer("SESSION_TTL_HOURS"),
        cleanup_shards=_integer("CLEANUP_SHARDS"),
        summary_interval=_integer("SUMMARY_INTERVAL"),
        context_turns=_integer("CONTEXT_TURNS"),
        context_max_tokens=_integer("CONTEXT_MAX_TOKENS"),
        bedrock_model_id=_text("BEDROCK_MODEL_ID"),
        bedrock_guardrail_id=guardrail["BEDROCK_GUARDRAIL_ID"],
        bedrock_guardrail_version=guardrail["BEDROCK_GUARDRAIL_VERSION"],
        bedrock_attempts=_integer("BEDROCK_ATTEMPTS"),
        bedrock_deadline_seconds=_integer("BEDROCK_DEADLINE_SECONDS"),
        bedrock_fallback_model_id=_text("BEDROCK_FALLBACK_MODEL_ID"),
        reply_deadline_seconds=_integer("REPLY_DEADLINE_SECONDS"),
        reply_max_tokens=_integer("REPLY_MAX_TOKENS"),
        model_calls_per_second=_integer("MODEL_CALLS_PER_SECOND"),
        model_call_buckets=_integer("MODEL_CALL_BUCKETS"),
        max_reassignments=_integer("MAX_REASSIGNMENTS"),
        cleanup_grace_seconds=_integer("CLEANUP_GRACE_SECONDS"),
        session_resume_grace_seconds=_integer("SESSION_RESUME_GRACE_SECONDS"),
        cors_allowed_origins=tuple(part.strip() for part in origins.split(",") if part.strip()),
        chat_connection_messages_per_minute=_integer("CHAT_CONNECTION_MESSAGES_PER_MINUTE"),
        chat_connection_burst=_integer("CHAT_CONNECTION_BURST"),
        chat_customer_messages_per_minute=_integer("CHAT_CUSTOMER_MESSAGES_PER_MINUTE"),
        chat_customer_burst=_integer("CHAT_CUSTOMER_BURST"),
        chat_max_connections_per_customer=_integer("CHAT_MAX_CONNECTIONS_PER_CUSTOMER"),
        chat_daily_token_budget=_integer("CHAT_DAILY_TOKEN_BUDGET"),
        manager_skill=_text("MANAGER_SKILL") or "manager",
        archive_prefix=_text("ARCHIVE_PREFIX") or "sessions",
        audit_lock_mode=_text("AUDIT_LOCK_MODE"),
        audit_retention_days=_optional_integer("AUDIT_RETENTION_DAYS"),
    )


@env.once
def store() -> DynamoSessionStore:
    """The container's store on ``TABLE_NAME`` with the stage's TTL and cleanup sharding."""
    config = settings()
    return DynamoSessionStore(
        resource("TABLE_NAME"), ttl_hours=config.session_ttl_hours, cleanup_shards=config.cleanup_shards
    )
