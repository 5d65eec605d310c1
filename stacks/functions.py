"""How every stack builds its Lambda functions: one factory, one code asset, the stage's runtime settings.

The one place on the deploy side where a stage setting becomes a function's environment: every
function gets every stage variable from :func:`stage_environment`, so no stack stringifies a
setting itself and no handler falls back to a default that differs from the stage's; and the one
place that names a function for Powertools (:class:`StageFunctions`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aws_cdk import Duration, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct

from constructs_lib import SharedFunction
from constructs_lib.nag_findings import acknowledge_policy
from contracts.environment import STAGE_VARIABLES
from stacks.config import INFERENCE_PROFILE_PREFIXES, StageConfig, foundation_model_of

#: Every function's Powertools metrics go to this one namespace, told apart by their ``service``
#: dimension (the function's construct id).
METRICS_NAMESPACE = "MangaAssist"

#: The one directory every function's code asset is packaged from.
LAMBDAS_DIR = Path(__file__).resolve().parent.parent / "lambdas"
#: What the handlers share with the stacks: shipped beside ``lambdas`` in the same asset.
CONTRACTS_DIR = Path(__file__).resolve().parent.parent / "contracts"

_RETENTION = {
    1: logs.RetentionDays.ONE_DAY, 3: logs.RetentionDays.THREE_DAYS, 5: logs.RetentionDays.FIVE_DAYS,
    7: logs.RetentionDays.ONE_WEEK, 14: logs.RetentionDays.TWO_WEEKS, 30: logs.RetentionDays.ONE_MONTH,
    60: logs.RetentionDays.TWO_MONTHS, 90: logs.RetentionDays.THREE_MONTHS, 120: logs.RetentionDays.FOUR_MONTHS,
    150: logs.RetentionDays.FIVE_MONTHS, 180: logs.RetentionDays.SIX_MONTHS, 365: logs.RetentionDays.ONE_YEAR,
    400: logs.RetentionDays.THIRTEEN_MONTHS, 545: logs.RetentionDays.EIGHTEEN_MONTHS,
    731: logs.RetentionDays.TWO_YEARS, 1096: logs.RetentionDays.THREE_YEARS, 1827: logs.RetentionDays.FIVE_YEARS,
    2192: logs.RetentionDays.SIX_YEARS, 2557: logs.RetentionDays.SEVEN_YEARS, 2922: logs.RetentionDays.EIGHT_YEARS,
    3288: logs.RetentionDays.NINE_YEARS, 3653: logs.RetentionDays.TEN_YEARS,
}  # fmt: skip


def log_retention(days: int) -> logs.RetentionDays:
    """The CloudWatch Logs retention enum member for ``config.log_retention_days``."""
    if days not in _RETENTION:
        raise ValueError(f"log_retention_days must be one of {sorted(_RETENTION)} (given {days})")
    return _RETENTION[days]


def stage_environment(config: StageConfig) -> dict[str, str]:
    """Every stage variable of ``contracts.environment.STAGE_VARIABLES``, from ``config``.

    ``BEDROCK_MODEL_ID`` is left out when the stage has no model (the echo responder answers),
    ``BEDROCK_FALLBACK_MODEL_ID`` when it has no fallback model,
    ``BEDROCK_GUARDRAIL_ID`` and ``_VERSION`` when it names no guardrail.
    """
    environment = {
        "SESSION_TTL_HOURS": str(config.session_ttl_hours),
        "CLEANUP_SHARDS": str(config.cleanup_shards),
        "SUMMARY_INTERVAL": str(config.summary_interval),
        "CONTEXT_TURNS": str(config.context_turns),
        "CONTEXT_MAX_TOKENS": str(config.context_max_tokens),
        "BEDROCK_ATTEMPTS": str(config.bedrock_attempts),
        "BEDROCK_DEADLINE_SECONDS": str(config.bedrock_deadline_seconds),
        "REPLY_DEADLINE_SECONDS": str(config.capacity.limits.reply_deadline_seconds),
        "REPLY_MAX_TOKENS": str(config.capacity.max_output_tokens),
        "MODEL_CALLS_PER_SECOND": str(config.model_resilience.model_calls_per_second),
        "MODEL_CALL_BUCKETS": str(config.model_resilience.model_call_buckets),
        "MAX_REASSIGNMENTS": str(config.handoff_max_reassignments),
        "CLEANUP_GRACE_SECONDS": str(config.cleanup_grace_seconds),
        "SESSION_RESUME_GRACE_SECONDS": str(config.session_resume_grace_seconds),
        "CORS_ALLOWED_ORIGINS": ",".join(config.cors_allowed_origins),
        "CHAT_CONNECTION_MESSAGES_PER_MINUTE": str(config.chat_connection_messages_per_minute),
        "CHAT_CONNECTION_BURST": str(config.chat_connection_burst),
        "CHAT_CUSTOMER_MESSAGES_PER_MINUTE": str(config.chat_customer_messages_per_minute),
        "CHAT_CUSTOMER_BURST": str(config.chat_customer_burst),
        "CHAT_MAX_CONNECTIONS_PER_CUSTOMER": str(config.chat_max_connections_per_customer),
        "CHAT_DAILY_TOKEN_BUDGET": str(config.token_budget.daily_tokens_per_customer),
        "MANAGER_SKILL": config.manager_skill,
        "ARCHIVE_PREFIX": config.archive_prefix,
        "AUDIT_LOCK_MODE": config.audit_object_lock_mode.upper(),
        "AUDIT_RETENTION_DAYS": str(config.audit_retention_days),
    }
    if config.bedrock_model_id is not None:
        environment["BEDROCK_MODEL_ID"] = config.bedrock_model_id
        if config.model_resilience.fallback_model_id is not None:
            environment["BEDROCK_FALLBACK_MODEL_ID"] = config.model_resilience.fallback_model_id
    if config.bedrock_guardrail_id is not None and config.bedrock_guardrail_version is not None:
        environment["BEDROCK_GUARDRAIL_ID"] = config.bedrock_guardrail_id
        environment["BEDROCK_GUARDRAIL_VERSION"] = config.bedrock_guardrail_version
    return environment


#: Every stage variable the Lambda side reads (its settings module is the only reader).
STAGE_VARIABLE_NAMES = frozenset(STAGE_VARIABLES)


class StageFunctions:
    """The app's one function factory: every function of a stage is built by it, the same way.

    Example::

        functions = StageFunctions(config, log_encryption_key=storage.key)
        router = functions(self, "StreamRouter", "lambdas.events.router.handler", {"EVENT_BUS_NAME": bus_name})

    Every function gets the shared code asset (``lambdas`` with ``contracts``), the stage's
    timeout, memory and log retention, its log group encrypted with ``log_encryption_key``, and
    every stage variable (:func:`stage_environment`). One naming rule: Powertools' service name is
    the function's construct id and its metrics go to :data:`METRICS_NAMESPACE`, so a log line,
    a trace and a metric (its ``service`` dimension) name the function alike.
    """

    def __init__(self, config: StageConfig, *, log_encryption_key: kms.IKey) -> None:
        self.config = config
        self.log_encryption_key = log_encryption_key

    def __call__(
        self,
        scope: Construct,
        construct_id: str,
        handler: str,
        environment: Mapping[str, str] | None = None,
        **options: Any,
    ) -> SharedFunction:
        """A function in ``scope``; ``environment`` holds what only it needs (resource names and ARNs).

        The stage variables win over a same-named entry of ``environment``, so a setting has one
        source. ``options`` go to :class:`SharedFunction` and win over the stage defaults (a
        longer timeout, an on-failure destination, reserved concurrency, ...).
        """
        config = self.config
        settings: dict[str, Any] = {
            "timeout": Duration.seconds(config.lambda_timeout_seconds),
            "memory_size": config.lambda_memory_mb,
            "log_retention": log_retention(config.log_retention_days),
            "log_encryption_key": self.log_encryption_key,
            **options,
        }
        return SharedFunction(
            scope,
            construct_id,
            code_root=LAMBDAS_DIR,
            with_packages=(CONTRACTS_DIR,),
            handler=handler,
            service_name=construct_id,
            metrics_namespace=METRICS_NAMESPACE,
            environment={**(environment or {}), **stage_environment(config)},
            **settings,
        )


def service_metric(function_id: str, metric_name: str) -> cloudwatch.Metric:
    """A Powertools (EMF) metric of the function whose construct id is ``function_id`` (``Sum``)."""
    return cloudwatch.Metric(
        namespace=METRICS_NAMESPACE,
        metric_name=metric_name,
        dimensions_map={"service": function_id},
        statistic="Sum",
    )


def grant_invoke_model(
    grantee: iam.IGrantable, model_id: str, *, streaming: bool = False, guardrail_id: str | None = None
) -> iam.Grant:
    """Calling exactly this model or inference profile: ``bedrock:InvokeModel`` (Converse), or
    ``bedrock:InvokeModelWithResponseStream`` with ``streaming`` (ConverseStream).

    An inference profile routes a request to its foundation model in any of several regions,
    and Bedrock checks the permission on the profile and on the model in the region that
    answers, so a profile id grants the profile and the model in every region (the profile
    itself bounds where requests go). ``guardrail_id`` (an id in the stack's account and region,
    or an ARN) adds ``bedrock:ApplyGuardrail`` on that guardrail alone, which a call that names
    it needs; defaults to none.
    """
    stack = Stack.of(grantee)  # type: ignore[arg-type]
    action = "bedrock:InvokeModelWithResponseStream" if streaming else "bedrock:InvokeModel"
    profile = model_id.startswith(INFERENCE_PROFILE_PREFIXES)
    if profile:
        base = foundation_model_of(model_id)
        resources = [
            stack.format_arn(service="bedrock", resource="inference-profile", resource_name=model_id),
            stack.format_arn(
                service="bedrock", region="*", account="", resource="foundation-model", resource_name=base
            ),
        ]
    else:
        resources = [
            stack.format_arn(service="bedrock", account="", resource="foundation-model", resource_name=model_id)
        ]
    grant = iam.Grant.add_to_principal(grantee=grantee, actions=[action], resource_arns=resources)
    principal = grantee.grant_principal
    if profile and isinstance(principal, iam.Role):
        acknowledge_policy(
            principal,
            {
                f"Resource::arn:<AWS::Partition>:bedrock:*::foundation-model/{base}": (
                    "One foundation model in any region: the region a cross-region inference profile routes a "
                    "call to is Bedrock's choice among the profile's regions, and Bedrock authorizes the model "
                    "there; the profile, granted beside it, bounds where calls go."
                )
            },
        )
    if guardrail_id is None:
        return grant
    guardrail_arn = (
        guardrail_id
        if guardrail_id.startswith("arn:")
        else stack.format_arn(service="bedrock", resource="guardrail", resource_name=guardrail_id)
    )
    return grant.combine(
        iam.Grant.add_to_principal(grantee=grantee, actions=["bedrock:ApplyGuardrail"], resource_arns=[guardrail_arn])
    )


def grant_stage_models(
    grantee: iam.IGrantable, config: StageConfig, *, streaming: bool = False, guardrail_id: str | None = None
) -> None:
    """:func:`grant_invoke_model` for the stage's model and its fallback model; none for a stage without a model."""
    if config.bedrock_model_id is None:
        return
    grant_invoke_model(grantee, config.bedrock_model_id, streaming=streaming, guardrail_id=guardrail_id)
    fallback = config.model_resilience.fallback_model_id
    if fallback is not None:
        grant_invoke_model(grantee, fallback, streaming=streaming)
