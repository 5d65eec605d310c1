"""What every loader shares: the registry of loaders by resource type (``LOADERS``, ``@loader``), the passive
types, the ``Cloud`` a deployment writes to with what the harness keeps beside moto (``Registry``), and the
names CloudFormation generates.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import boto3

from embedded.cloudformation.intrinsics import Deployed, Pseudo

if TYPE_CHECKING:
    from embedded.iam.guard import Guard
    from embedded.services.bedrock_guardrail import GuardrailPolicy

#: Types with no runtime behaviour to emulate on moto (alarms, metadata, logs plumbing, CDK's own
#: custom resources). They are recorded, never silently dropped. Policies are not among them: the
#: loaders give them their physical ids and ``embedded.iam`` enforces them on every call.
PASSIVE_TYPES = frozenset(
    {
        "AWS::CDK::Metadata",
        "AWS::Lambda::LayerVersion",
        "AWS::Lambda::Url",
        "AWS::CloudWatch::Alarm",
        "AWS::CloudWatch::CompositeAlarm",
        "AWS::CloudWatch::Dashboard",
        "AWS::Logs::LogStream",
        "AWS::Logs::MetricFilter",
        "AWS::Logs::SubscriptionFilter",
        "AWS::Logs::Destination",
        "AWS::SecretsManager::SecretTargetAttachment",
        "AWS::SecretsManager::RotationSchedule",
        "AWS::WAFv2::WebACL",
        "AWS::WAFv2::WebACLAssociation",
        "AWS::WAFv2::IPSet",
        "AWS::ApiGateway::Account",
        "AWS::ApiGateway::UsagePlan",
        "AWS::ApiGateway::UsagePlanKey",
        "AWS::ApiGateway::ApiKey",
        "AWS::ApiGateway::GatewayResponse",
        "AWS::ApiGatewayV2::Deployment",
        "AWS::ApiGatewayV2::RouteResponse",
        "AWS::ApiGatewayV2::IntegrationResponse",
        "AWS::SNS::Subscription#email",
        "AWS::CloudFormation::CustomResource",
        "AWS::CloudFormation::WaitConditionHandle",
        "AWS::XRay::Group",
        "AWS::XRay::SamplingRule",
        # AWS Backup acts on its schedule, outside any call the stage makes: nothing to emulate.
        "AWS::Backup::BackupVault",
        "AWS::Backup::BackupPlan",
        "AWS::Backup::BackupSelection",
    }
)


def is_passive(resource_type: str) -> bool:
    return resource_type in PASSIVE_TYPES or resource_type.startswith("Custom::")


@dataclass(frozen=True)
class EventSourceMapping:
    """An ``AWS::Lambda::EventSourceMapping`` kept by the harness (the pumps honour its settings)."""

    logical_id: str
    function_name: str
    event_source_arn: str
    batch_size: int
    batching_window_seconds: int
    starting_position: str | None
    report_batch_item_failures: bool
    bisect_on_error: bool
    maximum_retry_attempts: int | None
    maximum_record_age_seconds: int | None
    on_failure_arn: str | None
    filters: tuple[str, ...]
    enabled: bool
    properties: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RuleTarget:
    """One target of an EventBridge rule, as the template declares it."""

    rule_name: str
    bus_name: str
    target: dict[str, Any]


@dataclass(frozen=True)
class AsyncConfig:
    """``AWS::Lambda::EventInvokeConfig``: where failed async invocations of a function go."""

    function_name: str
    on_failure_arn: str | None
    on_success_arn: str | None
    maximum_retry_attempts: int | None


@dataclass
class Registry:
    """What the harness keeps beside moto: mappings, rule targets, async invoke configs."""

    mappings: list[EventSourceMapping] = field(default_factory=list)
    rule_targets: list[RuleTarget] = field(default_factory=list)
    async_configs: dict[str, AsyncConfig] = field(default_factory=dict)
    passive: list[tuple[str, str, str]] = field(default_factory=list)  # (stack, logical id, type)
    guardrails: dict[str, GuardrailPolicy] = field(default_factory=dict)  # Bedrock guardrails by id


@dataclass
class Cloud:
    """The moto clients and account a deployment writes to."""

    region: str
    account: str
    registry: Registry = field(default_factory=Registry)
    ssm_fallbacks: dict[str, str] = field(default_factory=dict)
    #: IAM, resource and key policies in force once the stage is deployed (None while deploying)
    guard: Guard | None = None
    _clients: dict[str, Any] = field(default_factory=dict)

    def client(self, service: str) -> Any:
        if service not in self._clients:
            options: dict[str, Any] = {}
            if service == "dynamodbstreams":
                # botocore >= 1.38 sends stream calls to <account>.streams-ddb.<region>, which
                # moto 5.2 does not route; the classic endpoint is the same API.
                options["endpoint_url"] = f"https://streams.dynamodb.{self.region}.amazonaws.com"
            self._clients[service] = boto3.client(service, region_name=self.region, **options)
        return self._clients[service]

    def arn(self, service: str, resource: str, *, region: bool = True, account: bool = True) -> str:
        return f"arn:aws:{service}:{self.region if region else ''}:{self.account if account else ''}:{resource}"


def physical_name(
    stack_name: str, logical_id: str, *, max_length: int = 64, lower: bool = False, suffix: str = ""
) -> str:
    """``<stack>-<LogicalId>-<SUFFIX>`` as CloudFormation generates names, deterministic here."""
    digest = hashlib.sha256(f"{stack_name}/{logical_id}".encode()).hexdigest()[:12].upper()
    room = max_length - len(digest) - 2 - len(suffix)
    head = f"{stack_name}-{logical_id}"[: max(room, 1)]
    name = f"{head}-{digest}{suffix}"
    return name.lower() if lower else name


Loader = Callable[[Cloud, Pseudo, str, dict[str, Any]], Deployed]
LOADERS: dict[str, Loader] = {}


def loader(resource_type: str) -> Callable[[Loader], Loader]:
    def register(function: Loader) -> Loader:
        LOADERS[resource_type] = function
        return function

    return register


def json_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)
