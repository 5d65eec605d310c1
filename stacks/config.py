"""Per-stage configuration: read from cdk.json context, validated into a frozen, typed object.

`cdk.json` holds a `stages` block; `load_stage_config` turns one entry into a `StageConfig` and
fails with the stage name, the key, the given value and the allowed values when anything is off.
Every field has a default here except the ones that must differ between stages on purpose.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from aws_cdk import Duration, RemovalPolicy

from contracts.workflows import EXPORT_RISK_MAX_SCORE
from stacks.backup_config import BackupConfig, backup
from stacks.capacity import WAF_IP_SHARE as WAF_IP_SHARE
from stacks.capacity import WAF_WINDOW_SECONDS as WAF_WINDOW_SECONDS
from stacks.capacity import CapacityConfig, capacity, refuse_retired_keys
from stacks.errors import ConfigError as ConfigError
from stacks.guardrail_config import GuardrailConfig, guardrail
from stacks.model_resilience import ModelResilienceConfig, model_resilience
from stacks.models import DEFAULT_BEDROCK_MODEL_ID as DEFAULT_BEDROCK_MODEL_ID
from stacks.models import INFERENCE_PROFILE_PREFIXES as INFERENCE_PROFILE_PREFIXES
from stacks.models import RETIRED_MODELS as RETIRED_MODELS
from stacks.models import RetiredModel as RetiredModel
from stacks.models import foundation_model_of as foundation_model_of
from stacks.models import model_id_problem
from stacks.search_config import AnalyticsSearchConfig, analytics_search
from stacks.token_budget import TokenBudgetConfig, token_budget

RemovalMode = Literal["destroy", "retain"]
ObjectLockMode = Literal["governance", "compliance"]

# CloudWatch Logs accepts only these retention periods (days).
LOG_RETENTION_DAYS = (
    1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557,
    2922, 3288, 3653,
)  # fmt: skip

_STAGE_NAME = re.compile(r"^[a-z][a-z0-9]{1,15}$")
_ACCOUNT = re.compile(r"^\d{12}$")
_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d$")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_KEY_PREFIX = re.compile(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$")
_SKILL = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_REASON = re.compile(r"^[a-z][a-z0-9_]{0,31}$")  # a handoff reason as the REST API accepts it
_MAX_METRIC_REASONS = 20
#: A Bedrock guardrail: its id in the stack's account and region, or its ARN; and a version.
_GUARDRAIL_ID = re.compile(
    r"^([a-z0-9]{1,64}|arn:aws(-[a-z]+)*:bedrock:[a-z0-9-]{1,20}:\d{12}:guardrail/[a-z0-9]{1,64})$"
)
_GUARDRAIL_VERSION = re.compile(r"^([1-9][0-9]{0,7}|DRAFT)$")
_DOMAIN = re.compile(r"^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$")
_ORIGIN = re.compile(r"^https?://[A-Za-z0-9.-]+(:\d{1,5})?$")
_HTTPS_URL = re.compile(r"^https://[A-Za-z0-9.-]+(:\d{1,5})?(/[A-Za-z0-9._~%!$&'()*+,;=:@/-]*)?$")

IdentityProvider = Literal["cognito", "oidc"]
ThreatProtection = Literal["off", "audit", "enforced"]
MfaMode = Literal["off", "optional", "required"]

#: Signature algorithms a token may use: asymmetric only, so a public key never verifies an HMAC.
ISSUER_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512")
_CLAIM = re.compile(r"^[A-Za-z0-9_:./-]{1,256}$")  # cognito:groups, roles, https://example.com/roles
_CLIENT_ID = re.compile(r"^[\x21-\x7e]{1,256}$")


@dataclass(frozen=True)
class IdentityConfig:
    """Who signs callers in. ``cognito``: the stage creates a user pool with an app client and
    the groups ``customer``, ``agent``, ``admin`` as roles. ``oidc``: an external issuer whose
    tokens carry the role in ``role_claim``; the stage creates no pool.

    The Cognito fields shape the pool; the OIDC fields (``issuer``, ``audiences``, ``jwks_url``)
    are required for ``oidc`` and refused for ``cognito``, whose issuer is the pool itself.
    """

    provider: IdentityProvider = "cognito"
    # Cognito: who may create an account, how strong it is, what protects it.
    self_sign_up: bool = True
    password_min_length: int = 12
    mfa: MfaMode = "optional"
    # Threat protection (Cognito's Plus plan): compromised credentials and adaptive sign-in risk.
    threat_protection: ThreatProtection = "enforced"
    # Let the app client sign in with a plain password (USER_PASSWORD_AUTH: curl, scripts).
    # Browsers and apps use SRP; a production stage should leave this off.
    password_auth: bool = False
    # How long ID and access tokens live (minutes) and refresh tokens (days).
    token_validity_minutes: int = 60
    refresh_token_validity_days: int = 30
    # External OIDC issuer.
    issuer: str | None = None
    audiences: tuple[str, ...] = ()
    jwks_url: str | None = None
    algorithms: tuple[str, ...] = ("RS256",)
    # Both: the claim that carries the role (a list of groups or one string), and the role of a
    # token whose claim names none (only "customer" may be given; null refuses such a token).
    role_claim: str = "cognito:groups"
    default_role: str | None = "customer"

    def validate(self, stage: str) -> None:
        """Raise ConfigError naming ``identity.<key>`` when anything is off."""
        if self.provider not in ("cognito", "oidc"):
            raise _fail(stage, "identity.provider", "must be 'cognito' or 'oidc'", self.provider)
        for key in ("self_sign_up", "password_auth"):
            if not isinstance(getattr(self, key), bool):
                raise _fail(stage, f"identity.{key}", "must be true or false", getattr(self, key))
        if self.mfa not in ("off", "optional", "required"):
            raise _fail(stage, "identity.mfa", "must be 'off', 'optional' or 'required'", self.mfa)
        if self.threat_protection not in ("off", "audit", "enforced"):
            raise _fail(
                stage, "identity.threat_protection", "must be 'off', 'audit' or 'enforced'", self.threat_protection
            )
        for key, (low, high) in {
            "password_min_length": (8, 99),
            "token_validity_minutes": (5, 1440),
            "refresh_token_validity_days": (1, 3650),
        }.items():
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise _fail(stage, f"identity.{key}", f"must be a whole number in {low}..{high}", value)
        if not isinstance(self.role_claim, str) or not _CLAIM.fullmatch(self.role_claim):
            raise _fail(
                stage,
                "identity.role_claim",
                "must be a claim name like cognito:groups or https://example.com/roles",
                self.role_claim,
            )
        if self.default_role not in (None, "customer"):
            raise _fail(
                stage,
                "identity.default_role",
                "must be 'customer' or null (a token never gets agent or admin by default)",
                self.default_role,
            )
        weak = [a for a in self.algorithms if a not in ISSUER_ALGORITHMS]
        if not self.algorithms or weak:
            raise _fail(
                stage, "identity.algorithms", f"must list asymmetric algorithms from {list(ISSUER_ALGORITHMS)}", weak
            )
        external = {"issuer": self.issuer, "audiences": self.audiences, "jwks_url": self.jwks_url}
        if self.provider == "cognito":
            given = sorted(key for key, value in external.items() if value)
            if given:
                raise _fail(stage, "identity", "names the issuer only for provider 'oidc' (cognito is its own)", given)
            return
        for key in ("issuer", "jwks_url"):
            value = getattr(self, key)
            if not isinstance(value, str) or not _HTTPS_URL.fullmatch(value):
                raise _fail(stage, f"identity.{key}", "must be an https:// URL for provider 'oidc'", value)
        if not self.audiences or not all(isinstance(a, str) and _CLIENT_ID.fullmatch(a) for a in self.audiences):
            raise _fail(
                stage, "identity.audiences", "must list the client ids (aud) tokens are issued to", self.audiences
            )


@dataclass(frozen=True)
class StageConfig:
    """Everything that differs between stages. Built by `load_stage_config`, never by hand in app code."""

    name: str
    # Deployment target; both absent means an environment-agnostic synth.
    account: str | None = None
    region: str | None = None

    # Data protection.
    removal_policy: RemovalMode = "destroy"
    deletion_protection: bool = False
    point_in_time_recovery: bool = True
    audit_object_lock_mode: ObjectLockMode = "governance"
    audit_retention_days: int = 30
    archive_transition_days: int = 90
    analytics_expiration_days: int = 90

    # Observability.
    log_retention_days: int = 7
    log_execution_data: bool = True
    alarm_email: str | None = None

    # API.
    cors_allowed_origins: tuple[str, ...] = ("http://localhost:3000",)
    waf_enabled: bool = False
    waf_ip_rate_limit: int = 600  # requests per source IP in WAF_WINDOW_SECONDS: one client's share
    authorizer_cache_seconds: int = 300
    # Who signs in callers: the stage's own Cognito user pool, or an external OIDC issuer.
    identity: IdentityConfig = field(default_factory=IdentityConfig)
    # The analytics records also searchable in OpenSearch Serverless (stacks/search_config.py); off by default.
    analytics_search: AnalyticsSearchConfig = field(default_factory=AnalyticsSearchConfig)
    # AWS Backup's daily recovery points of the table (stacks/backup_config.py).
    backup: BackupConfig = field(default_factory=BackupConfig)

    # Chat limits (the whole defence of the WebSocket API: WAF cannot be attached to one).
    # Per-connection and per-customer message buckets: a burst, refilled at a rate per minute.
    chat_connection_messages_per_minute: int = 20
    chat_connection_burst: int = 10
    chat_customer_messages_per_minute: int = 30
    chat_customer_burst: int = 20
    # Live WebSocket connections one customer may hold, checked at $connect.
    chat_max_connections_per_customer: int = 3
    # Model tokens one customer may spend in a UTC day (stacks/token_budget.py).
    token_budget: TokenBudgetConfig = field(default_factory=TokenBudgetConfig)
    # The load the stage is built for: every throttle, the message function's reserved concurrency and
    # the stream router's batching derive from it (stacks/capacity.py, docs/capacity.md).
    capacity: CapacityConfig = field(default_factory=CapacityConfig)

    # Models: None selects the echo responder (no Bedrock calls). A foundation-model id or a
    # cross-region inference profile id (a prefix of INFERENCE_PROFILE_PREFIXES); never a model
    # in RETIRED_MODELS.
    bedrock_model_id: str | None = DEFAULT_BEDROCK_MODEL_ID
    bedrock_attempts: int = 3
    # The fallback model and the stage-wide cap on model calls (stacks/model_resilience.py).
    model_resilience: ModelResilienceConfig = field(default_factory=ModelResilienceConfig)
    # A Bedrock guardrail that screens chat replies: its id (or ARN) and version, both or neither.
    # Unset: replies are not screened by a guardrail.
    bedrock_guardrail_id: str | None = None
    bedrock_guardrail_version: str | None = None
    # Or the stage's own guardrail (stacks/guardrail_config.py): masks personal data, blocks card numbers.
    guardrail: GuardrailConfig = field(default_factory=GuardrailConfig)
    # The chat context sent to the model: the last N turns, within a token budget.
    context_turns: int = 20
    context_max_tokens: int = 3000

    # Sessions and the stream.
    session_ttl_hours: int = 24
    cleanup_shards: int = 8
    summary_interval: int = 10
    stream_max_retries: int = 5
    stream_max_record_age_seconds: int = 21600
    event_archive_retention_days: int = 30
    firehose_buffer_seconds: int = 60
    firehose_buffer_mb: int = 5
    # The most one Athena query of the trail's workgroup may scan, in MiB (at least 10): a query
    # that would read more is cancelled, so no query can run up the bill.
    trail_query_scan_limit_mb: int = 1024

    # Workflows: every timeout is configurable so tests can run them in seconds.
    map_max_concurrency: int = 10
    handoff_agent_wait_seconds: int = 300
    # How long an escalated handoff waits for a paged manager before it fails.
    handoff_manager_wait_seconds: int = 900
    handoff_idle_seconds: int = 120
    # How long an agent may stay silent after a reply before the handoff goes to another agent (or,
    # with none free, back to the assistant).
    handoff_reply_idle_seconds: int = 600
    handoff_max_reassignments: int = 2
    # Handoff metrics: the reasons that are a dimension of their own (any other counts as "other",
    # so callers cannot mint metrics); the time to assignment (p90, seconds) the stage alarms over.
    handoff_metric_reasons: tuple[str, ...] = ("general", "billing", "orders", "technical")
    handoff_assignment_p90_alarm_seconds: int = 300
    # The agent skill that marks a manager (escalations go to an available agent with it).
    manager_skill: str = "manager"
    cleanup_grace_seconds: int = 3600
    # How long a session whose last connection closed may be resumed; at most cleanup_grace_seconds.
    session_resume_grace_seconds: int = 3600
    # Key prefix of session archives in the archive bucket (no leading or trailing '/').
    archive_prefix: str = "sessions"
    workflow_timeout_minutes: int = 60
    export_poll_seconds: int = 60
    export_max_polls: int = 120
    review_ttl_days: int = 7
    # Export risk scores (0..10, lambdas/orchestration/export_risk.py) from which a person approves; 0: every export.
    export_review_min_score: int = 0
    reviewer_email: str | None = None
    # Who is paged when a handoff escalates (an e-mail subscription on the managers topic); unset: nobody.
    managers_email: str | None = None
    # Who sends notices by e-mail (SES: customers away from the chat, export requesters); unset:
    # nobody is mailed and notices stay in the app. A stage that is not production must list the
    # recipient domains it may mail, so it is safe in the SES sandbox and never mails a customer.
    notice_sender: str | None = None
    notice_recipient_domains: tuple[str, ...] = ()

    # Lambda defaults.
    lambda_memory_mb: int = 256
    lambda_timeout_seconds: int = 30

    tags: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _validate(self)

    @property
    def is_production(self) -> bool:
        """True when data must survive the stack: RETAIN, deletion protection."""
        return self.removal_policy == "retain"

    @property
    def resource_removal_policy(self) -> RemovalPolicy:
        """What deleting a stack does to its stateful resources: RETAIN in production, else DESTROY."""
        return RemovalPolicy.RETAIN if self.is_production else RemovalPolicy.DESTROY

    @property
    def disposable(self) -> bool:
        """Whether a bucket's objects may be deleted with the stack (only where nothing is retained)."""
        return not self.is_production

    @property
    def key_pending_window(self) -> Duration:
        """How long a deleted KMS key waits before it is gone: the longest window (30 days) where data is kept."""
        return Duration.days(30 if self.is_production else 7)

    @property
    def bedrock_deadline_seconds(self) -> int:
        """The chat reply's model deadline: the function timeout less 10 s to store the turn and answer.

        At most 600 s, the longest a model call may be given.
        """
        return min(600, max(1, self.lambda_timeout_seconds - 10))


def _number(value: float) -> str:
    """A bound as a reader writes it: whole numbers in full (10485760, not 1.04858e+07)."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _fail(stage: str, key: str, rule: str, given: Any) -> ConfigError:
    return ConfigError(f"stage '{stage}': {key} {rule} (given {given!r})")


#: The numeric settings and their allowed ranges (inclusive).
_BOUNDS: dict[str, tuple[float, float]] = {
    "audit_retention_days": (1, 3650),
    "archive_transition_days": (30, 3650),
    "analytics_expiration_days": (1, 3650),
    "waf_ip_rate_limit": (10, 2_000_000_000),
    "authorizer_cache_seconds": (0, 3600),
    "session_ttl_hours": (1, 24 * 365),
    "cleanup_shards": (1, 64),
    "summary_interval": (2, 1000),
    "stream_max_retries": (0, 10000),
    "stream_max_record_age_seconds": (60, 86399),
    "event_archive_retention_days": (1, 3650),
    "firehose_buffer_seconds": (0, 900),
    "firehose_buffer_mb": (1, 128),
    "trail_query_scan_limit_mb": (10, 10 * 1024 * 1024),
    "map_max_concurrency": (1, 40),
    "handoff_agent_wait_seconds": (1, 86400),
    "handoff_manager_wait_seconds": (1, 86400),
    "handoff_idle_seconds": (1, 86400),
    "handoff_reply_idle_seconds": (1, 86400),
    "handoff_max_reassignments": (0, 10),
    "handoff_assignment_p90_alarm_seconds": (1, 86400),
    "cleanup_grace_seconds": (0, 7 * 86400),
    "session_resume_grace_seconds": (0, 7 * 86400),
    "workflow_timeout_minutes": (1, 7 * 24 * 60),
    "export_poll_seconds": (1, 3600),
    "export_max_polls": (1, 1000),
    "review_ttl_days": (1, 30),
    "export_review_min_score": (0, EXPORT_RISK_MAX_SCORE),
    "chat_connection_messages_per_minute": (1, 600),
    "chat_connection_burst": (1, 100),
    "chat_customer_messages_per_minute": (1, 600),
    "chat_customer_burst": (1, 100),
    "chat_max_connections_per_customer": (1, 100),
    "bedrock_attempts": (1, 10),
    "context_turns": (1, 100),
    "context_max_tokens": (100, 100_000),
    "lambda_memory_mb": (128, 10240),
    "lambda_timeout_seconds": (1, 900),
}


def _validate(c: StageConfig) -> None:
    """Raise ConfigError naming the stage, the key, the rule and the given value when anything is off."""
    _validate_target(c)
    _validate_data(c)
    _validate_mail(c)
    _validate_origins(c)
    _validate_names(c)
    _validate_guardrail(c)
    _validate_bounds(c)
    _validate_flags(c)
    if c.bedrock_model_id is not None:  # the model-call cap against the capacity target, both valid alone
        c.model_resilience.check_carries(c.name, c.capacity.limits.messages_per_second)


def _validate_target(c: StageConfig) -> None:
    """The stage's name, and the account and region it deploys to."""
    n = c.name
    if not _STAGE_NAME.fullmatch(n):
        raise _fail(n, "name", "must be 2-16 lowercase letters/digits, starting with a letter", n)
    if c.account is not None and not _ACCOUNT.fullmatch(c.account):
        raise _fail(n, "account", "must be a 12-digit AWS account id", c.account)
    if c.region is not None and not _REGION.fullmatch(c.region):
        raise _fail(n, "region", "must be an AWS region such as eu-west-1", c.region)
    if (c.account is None) != (c.region is None):
        raise _fail(n, "account/region", "must be given together or not at all", (c.account, c.region))


def _validate_data(c: StageConfig) -> None:
    """What happens to data: removal, the audit trail's lock, log retention."""
    n = c.name
    if c.removal_policy not in ("destroy", "retain"):
        raise _fail(n, "removal_policy", "must be 'destroy' or 'retain'", c.removal_policy)
    if c.audit_object_lock_mode not in ("governance", "compliance"):
        raise _fail(n, "audit_object_lock_mode", "must be 'governance' or 'compliance'", c.audit_object_lock_mode)
    if c.log_retention_days not in LOG_RETENTION_DAYS:
        raise _fail(n, "log_retention_days", f"must be one of {list(LOG_RETENTION_DAYS)}", c.log_retention_days)


def _validate_mail(c: StageConfig) -> None:
    """Who is mailed and who mails: addresses, and the domains a stage that is not production may mail."""
    n = c.name
    for key in ("alarm_email", "reviewer_email", "managers_email", "notice_sender"):
        value = getattr(c, key)
        if value is not None and not _EMAIL.fullmatch(value):
            raise _fail(n, key, "must be an e-mail address", value)
    for domain in c.notice_recipient_domains:
        if not isinstance(domain, str) or not _DOMAIN.fullmatch(domain):
            raise _fail(n, "notice_recipient_domains", "must hold domains like example.com", domain)
    if c.notice_sender is not None and not c.notice_recipient_domains and not c.is_production:
        raise _fail(
            n,
            "notice_recipient_domains",
            "must list the domains a stage that is not production may mail (SES sandbox safety)",
            c.notice_recipient_domains,
        )


def _validate_origins(c: StageConfig) -> None:
    """The REST API's CORS origins."""
    n = c.name
    if not c.cors_allowed_origins:
        raise _fail(n, "cors_allowed_origins", "must list at least one origin", c.cors_allowed_origins)
    for origin in c.cors_allowed_origins:
        if origin == "*" and c.is_production:
            raise _fail(n, "cors_allowed_origins", "must not be '*' in a retained (production) stage", origin)
        if origin != "*" and not _ORIGIN.fullmatch(origin):
            raise _fail(n, "cors_allowed_origins", "must hold origins like https://app.example.com", origin)


def _validate_names(c: StageConfig) -> None:
    """Names the handlers use: the archive prefix, the manager skill, the model."""
    n = c.name
    if not isinstance(c.archive_prefix, str) or not _KEY_PREFIX.fullmatch(c.archive_prefix):
        raise _fail(
            n,
            "archive_prefix",
            "must be an S3 key prefix like 'sessions' (no leading or trailing '/')",
            c.archive_prefix,
        )
    if not isinstance(c.manager_skill, str) or not _SKILL.fullmatch(c.manager_skill):
        raise _fail(n, "manager_skill", "must be 1-64 letters, digits, '_' or '-'", c.manager_skill)
    reasons = c.handoff_metric_reasons
    if len(reasons) > _MAX_METRIC_REASONS or not all(isinstance(r, str) and _REASON.fullmatch(r) for r in reasons):
        rule = f"must be at most {_MAX_METRIC_REASONS} handoff reasons (a lowercase letter, then up to 31 of a-z0-9_)"
        raise _fail(n, "handoff_metric_reasons", rule, reasons)
    _validate_model(c)


def _validate_bounds(c: StageConfig) -> None:
    """Every number within its range; the capacity target, and the hand-set limits it bounds."""
    n = c.name
    for key, (low, high) in _BOUNDS.items():
        value = getattr(c, key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            raise _fail(n, key, f"must be a number in {_number(low)}..{_number(high)}", value)
    if not isinstance(c.capacity, CapacityConfig):
        raise _fail(n, "capacity", "must be an object", c.capacity)
    bounded = ("chat_connection_messages_per_minute", "chat_customer_messages_per_minute", "waf_ip_rate_limit")
    hand_set = {key: getattr(c, key) for key in (*bounded, "lambda_timeout_seconds", "bedrock_deadline_seconds")}
    c.capacity.validate(n, hand_set)
    if c.session_resume_grace_seconds > c.cleanup_grace_seconds:
        limit = f"must not exceed cleanup_grace_seconds ({c.cleanup_grace_seconds})"
        raise _fail(n, "session_resume_grace_seconds", limit, c.session_resume_grace_seconds)


def _validate_flags(c: StageConfig) -> None:
    """The on/off settings, and the identity block."""
    n = c.name
    for key in ("deletion_protection", "point_in_time_recovery", "log_execution_data", "waf_enabled"):
        if not isinstance(getattr(c, key), bool):
            raise _fail(n, key, "must be true or false", getattr(c, key))
    if not isinstance(c.identity, IdentityConfig):
        raise _fail(n, "identity", "must be an object", c.identity)
    c.identity.validate(n)
    if not isinstance(c.analytics_search, AnalyticsSearchConfig):
        raise _fail(n, "analytics_search", "must be an object", c.analytics_search)
    c.analytics_search.validate(n)
    c.guardrail.validate(n, existing_id=c.bedrock_guardrail_id)
    if not isinstance(c.backup, BackupConfig):
        raise _fail(n, "backup", "must be an object", c.backup)
    c.backup.validate(n, c.region, c.account)


def _validate_model(c: StageConfig) -> None:
    if c.bedrock_model_id is not None:
        problem = model_id_problem(c.bedrock_model_id)
        if problem is not None:
            raise _fail(c.name, "bedrock_model_id", problem, c.bedrock_model_id)
    c.model_resilience.validate(c.name, c.bedrock_model_id)
    c.token_budget.validate(c.name)


def _validate_guardrail(c: StageConfig) -> None:
    n, guardrail_id, version = c.name, c.bedrock_guardrail_id, c.bedrock_guardrail_version
    if (guardrail_id is None) != (version is None):
        raise _fail(
            n,
            "bedrock_guardrail_id/_version",
            "must be given together (the guardrail and its version)",
            (guardrail_id, version),
        )
    if guardrail_id is None:
        return
    if not isinstance(guardrail_id, str) or not _GUARDRAIL_ID.fullmatch(guardrail_id):
        raise _fail(n, "bedrock_guardrail_id", "must be a guardrail id such as 'abc123xyz9' or its ARN", guardrail_id)
    if not isinstance(version, str) or not _GUARDRAIL_VERSION.fullmatch(version):
        raise _fail(n, "bedrock_guardrail_version", "must be a version number such as '1', or 'DRAFT'", version)
    if c.bedrock_model_id is None:
        raise _fail(
            n,
            "bedrock_guardrail_id",
            "needs bedrock_model_id (the echo responder has no reply to screen)",
            guardrail_id,
        )


def load_stage_config(stages: Any, name: str) -> StageConfig:
    """Validate the `stages` context block and return the config of stage `name`."""
    if not isinstance(stages, dict) or not stages:
        raise ConfigError("cdk.json context 'stages' must be an object with one entry per stage")
    if name not in stages:
        raise ConfigError(f"unknown stage {name!r}: cdk.json defines {sorted(stages)}")
    raw = stages[name]
    if not isinstance(raw, dict):
        raise ConfigError(f"stage {name!r}: its entry must be an object (given {type(raw).__name__})")
    refuse_retired_keys(name, raw)
    known = {f.name for f in fields(StageConfig)} - {"name"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"stage {name!r}: unknown keys {unknown}; allowed keys are {sorted(known)}")
    values = dict(raw)
    for key in ("cors_allowed_origins", "notice_recipient_domains", "handoff_metric_reasons"):
        if key in values:
            items = values[key]
            if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
                raise _fail(name, key, "must be a list of strings", items)
            values[key] = tuple(items)
    if "identity" in values:
        values["identity"] = _identity(name, values["identity"])
    if "analytics_search" in values:
        values["analytics_search"] = analytics_search(name, values["analytics_search"])
    if "capacity" in values:
        values["capacity"] = capacity(name, values["capacity"])
    if "guardrail" in values:
        values["guardrail"] = guardrail(name, values["guardrail"])
    if "model_resilience" in values:
        values["model_resilience"] = model_resilience(name, values["model_resilience"])
    if "backup" in values:
        values["backup"] = backup(name, values["backup"])
    if "token_budget" in values:
        values["token_budget"] = token_budget(name, values["token_budget"])
    if "tags" in values and not (
        isinstance(values["tags"], dict) and all(isinstance(v, str) for v in values["tags"].values())
    ):
        raise _fail(name, "tags", "must be an object of string values", values["tags"])
    return StageConfig(name=name, **values)


def _identity(stage: str, raw: Any) -> IdentityConfig:
    """The ``identity`` block of a stage entry as an IdentityConfig (validated with the stage)."""
    if not isinstance(raw, dict):
        raise _fail(stage, "identity", "must be an object", raw)
    known = {f.name for f in fields(IdentityConfig)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"stage {stage!r}: unknown identity keys {unknown}; allowed keys are {sorted(known)}")
    values = dict(raw)
    for key in ("audiences", "algorithms"):
        if key in values:
            if not isinstance(values[key], list) or not all(isinstance(v, str) for v in values[key]):
                raise _fail(stage, f"identity.{key}", "must be a list of strings", values[key])
            values[key] = tuple(values[key])
    return IdentityConfig(**values)


def with_overrides(config: StageConfig, **changes: Any) -> StageConfig:
    """A copy with some values changed, validated again (tests use it for fast timeouts)."""
    return dataclasses.replace(config, **changes)
