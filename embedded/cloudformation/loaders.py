"""One small typed loader per CloudFormation resource type: template properties -> moto API calls.

Each loader receives the resource's *resolved* properties and returns a ``Deployed`` with the
physical id (what ``Ref`` returns) and the ``Fn::GetAtt`` attributes. Physical names that the
template leaves to CloudFormation are generated the way CloudFormation does
(``<stack>-<LogicalId>-<SUFFIX>``), deterministically so that runs are comparable.

Why not moto's CloudFormation ``create_stack``: moto's CloudFormation parser skips resource types
it does not know without an error, needs the CDK asset bucket and the Powertools SSM parameter
to exist, validates Lambda layers it cannot have, and creates event source mappings that make
moto invoke functions synchronously on every write (bypassing the batching, partial-failure and
DLQ semantics the pumps emulate). The loaders below are small and explicit instead; a resource
type with behaviour and no loader fails the deployment with its name.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import string
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import boto3

from embedded.cloudformation.intrinsics import Deployed, Pseudo

if TYPE_CHECKING:
    from embedded.iam.guard import Guard

#: Types with no runtime behaviour to emulate on moto (alarms, metadata, logs plumbing, CDK's own
#: custom resources). They are recorded, never silently dropped. Policies are not among them: the
#: loaders below give them their physical ids and ``embedded.iam`` enforces them on every call.
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


def _json(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _tags(props: dict[str, Any]) -> list[dict[str, str]]:
    return [{"Key": str(t["Key"]), "Value": str(t["Value"])} for t in props.get("Tags", [])]


# ---------------------------------------------------------------------- KMS, IAM, SSM, logs


@loader("AWS::KMS::Key")
def _kms_key(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    kms = cloud.client("kms")
    args: dict[str, Any] = {"Description": str(props.get("Description", lid))}
    for prop, arg in (("KeyUsage", "KeyUsage"), ("KeySpec", "KeySpec")):
        if prop in props:
            args[arg] = props[prop]
    if "KeyPolicy" in props:
        args["Policy"] = _json(props["KeyPolicy"])
    meta = kms.create_key(**args)["KeyMetadata"]
    if props.get("EnableKeyRotation"):
        kms.enable_key_rotation(KeyId=meta["KeyId"])
    return Deployed(lid, "AWS::KMS::Key", meta["KeyId"], {"Arn": meta["Arn"], "KeyId": meta["KeyId"]})


@loader("AWS::IAM::Role")
def _iam_role(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    name = str(props.get("RoleName") or physical_name(pseudo.stack_name, lid, max_length=64))
    role = cloud.client("iam").create_role(
        RoleName=name,
        Path=str(props.get("Path", "/")),
        AssumeRolePolicyDocument=_json(props["AssumeRolePolicyDocument"]),
    )["Role"]
    return Deployed(lid, "AWS::IAM::Role", name, {"Arn": role["Arn"], "RoleId": role["RoleId"]})


def _policy_only(resource_type: str, ref: Callable[[Cloud, Pseudo, str, dict[str, Any]], str]) -> Loader:
    """A policy resource: nothing to create on moto (whose IAM does not enforce), its id for ``Ref``.

    ``embedded.iam.authority`` reads every policy of the deployed stacks and enforces them.
    """

    def load(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
        return Deployed(lid, resource_type, ref(cloud, pseudo, lid, props), {}, dict(props))

    return load


def _managed_policy_arn(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> str:
    name = str(props.get("ManagedPolicyName") or physical_name(pseudo.stack_name, lid, max_length=128))
    return f"arn:aws:iam::{cloud.account}:policy{props.get('Path', '/')}{name}"


def _generated_id(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> str:
    return physical_name(pseudo.stack_name, lid)


LOADERS["AWS::IAM::Policy"] = _policy_only(
    "AWS::IAM::Policy", lambda c, p, lid, props: str(props.get("PolicyName") or physical_name(p.stack_name, lid))
)
LOADERS["AWS::IAM::ManagedPolicy"] = _policy_only("AWS::IAM::ManagedPolicy", _managed_policy_arn)
LOADERS["AWS::KMS::Alias"] = _policy_only("AWS::KMS::Alias", lambda c, p, lid, props: str(props["AliasName"]))
for _policy_type in (
    "AWS::S3::BucketPolicy",
    "AWS::SQS::QueuePolicy",
    "AWS::SNS::TopicPolicy",
    "AWS::Events::EventBusPolicy",
    "AWS::Lambda::Permission",
    "AWS::Logs::ResourcePolicy",
):
    LOADERS[_policy_type] = _policy_only(_policy_type, _generated_id)


@loader("AWS::SSM::Parameter")
def _ssm_parameter(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    name = str(props.get("Name") or "/" + physical_name(pseudo.stack_name, lid))
    cloud.client("ssm").put_parameter(Name=name, Value=str(props["Value"]), Type=str(props.get("Type", "String")))
    return Deployed(lid, "AWS::SSM::Parameter", name, {"Type": props.get("Type", "String"), "Value": props["Value"]})


@loader("AWS::Logs::LogGroup")
def _log_group(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    name = str(props.get("LogGroupName") or physical_name(pseudo.stack_name, lid, max_length=512))
    cloud.client("logs").create_log_group(logGroupName=name)
    return Deployed(lid, "AWS::Logs::LogGroup", name, {"Arn": cloud.arn("logs", f"log-group:{name}:*")})


@loader("AWS::SecretsManager::Secret")
def _secret(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    name = str(props.get("Name") or physical_name(pseudo.stack_name, lid, max_length=256))
    value = props.get("SecretString")
    spec = props.get("GenerateSecretString")
    if value is None and spec is not None:
        value = _generate_secret(spec)
    args: dict[str, Any] = {"Name": name, "SecretString": str(value if value is not None else "")}
    if "KmsKeyId" in props:
        args["KmsKeyId"] = str(props["KmsKeyId"])
    arn = cloud.client("secretsmanager").create_secret(**args)["ARN"]
    return Deployed(lid, "AWS::SecretsManager::Secret", arn, {"Id": arn, "Arn": arn})


def _generate_secret(spec: dict[str, Any]) -> str:
    alphabet = string.ascii_letters + string.digits
    if not spec.get("ExcludePunctuation") and not spec.get("ExcludeCharacters"):
        alphabet += "!#$%&()*+,-.:;<=>?[]^_{|}~"
    excluded = str(spec.get("ExcludeCharacters", ""))
    alphabet = "".join(c for c in alphabet if c not in excluded)
    if spec.get("ExcludeUppercase"):
        alphabet = "".join(c for c in alphabet if not c.isupper())
    if spec.get("ExcludeLowercase"):
        alphabet = "".join(c for c in alphabet if not c.islower())
    if spec.get("ExcludeNumbers"):
        alphabet = "".join(c for c in alphabet if not c.isdigit())
    generated = "".join(secrets.choice(alphabet) for _ in range(int(spec.get("PasswordLength", 32))))
    if "SecretStringTemplate" in spec and "GenerateStringKey" in spec:
        document = json.loads(str(spec["SecretStringTemplate"]))
        document[str(spec["GenerateStringKey"])] = generated
        return json.dumps(document)
    return generated


# ---------------------------------------------------------------------- DynamoDB, S3


@loader("AWS::DynamoDB::Table")
def _dynamodb_table(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    ddb = cloud.client("dynamodb")
    name = str(props.get("TableName") or physical_name(pseudo.stack_name, lid, max_length=255))
    args: dict[str, Any] = {
        "TableName": name,
        "KeySchema": props["KeySchema"],
        "AttributeDefinitions": props["AttributeDefinitions"],
        "BillingMode": props.get("BillingMode", "PROVISIONED"),
    }
    if "ProvisionedThroughput" in props:
        args["ProvisionedThroughput"] = {k: int(v) for k, v in props["ProvisionedThroughput"].items()}
    for key in ("GlobalSecondaryIndexes", "LocalSecondaryIndexes"):
        if key in props:
            args[key] = props[key]
    stream = props.get("StreamSpecification")
    if stream:
        args["StreamSpecification"] = {"StreamEnabled": True, "StreamViewType": stream["StreamViewType"]}
    sse = props.get("SSESpecification")
    if sse:
        args["SSESpecification"] = {
            "Enabled": bool(sse.get("SSEEnabled", False)),
            **({"SSEType": sse["SSEType"]} if "SSEType" in sse else {}),
            **({"KMSMasterKeyId": sse["KMSMasterKeyId"]} if "KMSMasterKeyId" in sse else {}),
        }
    if "DeletionProtectionEnabled" in props:
        args["DeletionProtectionEnabled"] = bool(props["DeletionProtectionEnabled"])
    description = ddb.create_table(**args)["TableDescription"]
    ttl = props.get("TimeToLiveSpecification")
    if ttl and ttl.get("Enabled"):
        ddb.update_time_to_live(
            TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": ttl["AttributeName"]}
        )
    pitr = props.get("PointInTimeRecoverySpecification") or {}
    if pitr.get("PointInTimeRecoveryEnabled"):
        ddb.update_continuous_backups(
            TableName=name, PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True}
        )
    attributes = {"Arn": description["TableArn"]}
    if "LatestStreamArn" in description:
        attributes["StreamArn"] = description["LatestStreamArn"]
    return Deployed(lid, "AWS::DynamoDB::Table", name, attributes)


@loader("AWS::S3::Bucket")
def _s3_bucket(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    s3 = cloud.client("s3")
    name = str(props.get("BucketName") or physical_name(pseudo.stack_name, lid, max_length=63, lower=True))
    args: dict[str, Any] = {"Bucket": name}
    if cloud.region != "us-east-1":
        args["CreateBucketConfiguration"] = {"LocationConstraint": cloud.region}
    if props.get("ObjectLockEnabled"):
        args["ObjectLockEnabledForBucket"] = True
    s3.create_bucket(**args)
    versioning = props.get("VersioningConfiguration")
    if versioning:
        s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": versioning["Status"]})
    encryption = props.get("BucketEncryption")
    if encryption:
        rules = [
            {
                **({"BucketKeyEnabled": bool(r["BucketKeyEnabled"])} if "BucketKeyEnabled" in r else {}),
                "ApplyServerSideEncryptionByDefault": r["ServerSideEncryptionByDefault"],
            }
            for r in encryption["ServerSideEncryptionConfiguration"]
        ]
        s3.put_bucket_encryption(Bucket=name, ServerSideEncryptionConfiguration={"Rules": rules})
    lock = props.get("ObjectLockConfiguration")
    if lock and lock.get("Rule"):
        s3.put_object_lock_configuration(
            Bucket=name, ObjectLockConfiguration={"ObjectLockEnabled": "Enabled", "Rule": lock["Rule"]}
        )
    notification = props.get("NotificationConfiguration", {})
    if notification.get("EventBridgeConfiguration", {}).get("EventBridgeEnabled"):
        s3.put_bucket_notification_configuration(
            Bucket=name, NotificationConfiguration={"EventBridgeConfiguration": {}}
        )
    domain = f"{name}.s3.{pseudo.url_suffix}"
    return Deployed(
        lid,
        "AWS::S3::Bucket",
        name,
        {
            "Arn": f"arn:aws:s3:::{name}",
            "DomainName": domain,
            "RegionalDomainName": f"{name}.s3.{cloud.region}.{pseudo.url_suffix}",
            "WebsiteURL": f"http://{name}.s3-website-{cloud.region}.{pseudo.url_suffix}",
        },
    )


# ---------------------------------------------------------------------- SQS, SNS


@loader("AWS::SQS::Queue")
def _sqs_queue(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    fifo = bool(props.get("FifoQueue"))
    name = str(
        props.get("QueueName") or physical_name(pseudo.stack_name, lid, max_length=80, suffix=".fifo" if fifo else "")
    )
    attributes: dict[str, str] = {}
    for key in (
        "DelaySeconds",
        "MaximumMessageSize",
        "MessageRetentionPeriod",
        "ReceiveMessageWaitTimeSeconds",
        "VisibilityTimeout",
        "KmsMasterKeyId",
        "KmsDataKeyReusePeriodSeconds",
        "SqsManagedSseEnabled",
        "DeduplicationScope",
        "FifoThroughputLimit",
    ):
        if key in props:
            attributes[key] = str(props[key]).lower() if isinstance(props[key], bool) else str(props[key])
    if fifo:
        attributes["FifoQueue"] = "true"
        if props.get("ContentBasedDeduplication"):
            attributes["ContentBasedDeduplication"] = "true"
    for key in ("RedrivePolicy", "RedriveAllowPolicy"):
        if key in props:
            attributes[key] = _json(props[key])
    sqs = cloud.client("sqs")
    url = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return Deployed(lid, "AWS::SQS::Queue", url, {"Arn": arn, "QueueName": name, "QueueUrl": url})


@loader("AWS::SNS::Topic")
def _sns_topic(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    fifo = bool(props.get("FifoTopic"))
    name = str(
        props.get("TopicName") or physical_name(pseudo.stack_name, lid, max_length=256, suffix=".fifo" if fifo else "")
    )
    attributes: dict[str, str] = {}
    if "KmsMasterKeyId" in props:
        attributes["KmsMasterKeyId"] = str(props["KmsMasterKeyId"])
    if fifo:
        attributes["FifoTopic"] = "true"
        if props.get("ContentBasedDeduplication"):
            attributes["ContentBasedDeduplication"] = "true"
    sns = cloud.client("sns")
    arn = sns.create_topic(Name=name, Attributes=attributes)["TopicArn"]
    for subscription in props.get("Subscription", []):
        sns.subscribe(TopicArn=arn, Protocol=subscription["Protocol"], Endpoint=subscription["Endpoint"])
    return Deployed(lid, "AWS::SNS::Topic", arn, {"TopicArn": arn, "TopicName": name})


@loader("AWS::SNS::Subscription")
def _sns_subscription(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    attributes: dict[str, str] = {}
    if "FilterPolicy" in props:
        attributes["FilterPolicy"] = _json(props["FilterPolicy"])
    if "FilterPolicyScope" in props:
        attributes["FilterPolicyScope"] = str(props["FilterPolicyScope"])
    if props.get("RawMessageDelivery"):
        attributes["RawMessageDelivery"] = "true"
    if "RedrivePolicy" in props:
        attributes["RedrivePolicy"] = _json(props["RedrivePolicy"])
    arn = cloud.client("sns").subscribe(
        TopicArn=props["TopicArn"],
        Protocol=props["Protocol"],
        Endpoint=props["Endpoint"],
        Attributes=attributes,
        ReturnSubscriptionArn=True,
    )["SubscriptionArn"]
    return Deployed(lid, "AWS::SNS::Subscription", arn, {"Arn": arn})


# ---------------------------------------------------------------------- SES


@loader("AWS::SES::ConfigurationSet")
def _ses_configuration_set(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    name = str(props.get("Name") or physical_name(pseudo.stack_name, lid, max_length=64))
    cloud.client("sesv2").create_configuration_set(ConfigurationSetName=name)
    return Deployed(lid, "AWS::SES::ConfigurationSet", name, {})


@loader("AWS::SES::EmailIdentity")
def _ses_email_identity(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    """The sender, verified at once: on AWS its owner confirms SES's verification mail first."""
    identity = str(props["EmailIdentity"])
    args: dict[str, Any] = {"EmailIdentity": identity}
    if "ConfigurationSetAttributes" in props:
        args["ConfigurationSetName"] = str(props["ConfigurationSetAttributes"]["ConfigurationSetName"])
    cloud.client("sesv2").create_email_identity(**args)
    cloud.client("ses").verify_email_identity(EmailAddress=identity)
    return Deployed(lid, "AWS::SES::EmailIdentity", identity, {})


# ---------------------------------------------------------------------- Cognito

#: UserPool properties moto's CreateUserPool takes as they are in the template.
_USER_POOL_KEYS = (
    "Policies",
    "AutoVerifiedAttributes",
    "UsernameAttributes",
    "AliasAttributes",
    "UsernameConfiguration",
    "MfaConfiguration",
    "AccountRecoverySetting",
    "AdminCreateUserConfig",
    "Schema",
    "DeletionProtection",
    "EmailVerificationMessage",
    "EmailVerificationSubject",
    "VerificationMessageTemplate",
)


@loader("AWS::Cognito::UserPool")
def _user_pool(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    """The pool as the template shapes it; moto signs its tokens (RS256) and serves its JWKS."""
    name = str(props.get("UserPoolName") or physical_name(pseudo.stack_name, lid, max_length=128))
    args = {key: props[key] for key in _USER_POOL_KEYS if key in props}
    pool = cloud.client("cognito-idp").create_user_pool(PoolName=name, **args)["UserPool"]
    pool_id = str(pool["Id"])
    provider = f"cognito-idp.{cloud.region}.amazonaws.com/{pool_id}"
    attributes = {"Arn": pool["Arn"], "ProviderName": provider, "ProviderURL": provider, "UserPoolId": pool_id}
    return Deployed(lid, "AWS::Cognito::UserPool", pool_id, attributes)


@loader("AWS::Cognito::UserPoolClient")
def _user_pool_client(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    keys = (
        "GenerateSecret",
        "ExplicitAuthFlows",
        "ReadAttributes",
        "WriteAttributes",
        "PreventUserExistenceErrors",
        "EnableTokenRevocation",
        "AccessTokenValidity",
        "IdTokenValidity",
        "RefreshTokenValidity",
        "TokenValidityUnits",
        "SupportedIdentityProviders",
        "AllowedOAuthFlowsUserPoolClient",
    )
    args = {key: props[key] for key in keys if key in props}
    name = str(props.get("ClientName") or lid)
    client = cloud.client("cognito-idp").create_user_pool_client(
        UserPoolId=str(props["UserPoolId"]), ClientName=name, **args
    )["UserPoolClient"]
    client_id = str(client["ClientId"])
    return Deployed(
        lid, "AWS::Cognito::UserPoolClient", client_id, {"ClientId": client_id, "Name": name, "ClientSecret": ""}
    )


@loader("AWS::Cognito::UserPoolGroup")
def _user_pool_group(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    name = str(props.get("GroupName") or physical_name(pseudo.stack_name, lid, max_length=128))
    args = {key: props[key] for key in ("Description", "Precedence", "RoleArn") if key in props}
    cloud.client("cognito-idp").create_group(GroupName=name, UserPoolId=str(props["UserPoolId"]), **args)
    return Deployed(lid, "AWS::Cognito::UserPoolGroup", name, {})


# ---------------------------------------------------------------------- EventBridge


@loader("AWS::Events::EventBus")
def _event_bus(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    name = str(props["Name"])
    arn = cloud.client("events").create_event_bus(Name=name)["EventBusArn"]
    return Deployed(lid, "AWS::Events::EventBus", name, {"Arn": arn, "Name": name})


@loader("AWS::Events::Rule")
def _event_rule(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    events = cloud.client("events")
    name = str(props.get("Name") or physical_name(pseudo.stack_name, lid, max_length=64))
    bus = str(props.get("EventBusName", "default"))
    bus_name = bus.rsplit("/", 1)[-1] if bus.startswith("arn:") else bus
    args: dict[str, Any] = {"Name": name, "EventBusName": bus_name, "State": str(props.get("State", "ENABLED"))}
    if "EventPattern" in props:
        args["EventPattern"] = _json(props["EventPattern"])
    if "ScheduleExpression" in props:
        args["ScheduleExpression"] = str(props["ScheduleExpression"])
    arn = events.put_rule(**args)["RuleArn"]
    for target in props.get("Targets", []):
        cloud.registry.rule_targets.append(RuleTarget(name, bus_name, dict(target)))
    targets = [
        {
            k: (_json(v) if k == "Input" else v)
            for k, v in t.items()
            if k
            in (
                "Id",
                "Arn",
                "RoleArn",
                "Input",
                "InputPath",
                "InputTransformer",
                "SqsParameters",
                "DeadLetterConfig",
                "RetryPolicy",
            )
        }
        for t in props.get("Targets", [])
    ]
    if targets:
        events.put_targets(Rule=name, EventBusName=bus_name, Targets=targets)
    return Deployed(lid, "AWS::Events::Rule", arn, {"Arn": arn})


@loader("AWS::Events::Archive")
def _event_archive(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    name = str(props.get("ArchiveName") or physical_name(pseudo.stack_name, lid, max_length=48))
    args: dict[str, Any] = {"ArchiveName": name, "EventSourceArn": str(props["SourceArn"])}
    if "EventPattern" in props:
        args["EventPattern"] = _json(props["EventPattern"])
    if "RetentionDays" in props:
        args["RetentionDays"] = int(props["RetentionDays"])
    arn = cloud.client("events").create_archive(**args)["ArchiveArn"]
    return Deployed(lid, "AWS::Events::Archive", name, {"Arn": arn, "ArchiveName": name})


# ---------------------------------------------------------------------- Firehose


@loader("AWS::KinesisFirehose::DeliveryStream")
def _delivery_stream(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    name = str(props.get("DeliveryStreamName") or physical_name(pseudo.stack_name, lid, max_length=64))
    destination = props.get("ExtendedS3DestinationConfiguration") or props.get("S3DestinationConfiguration")
    if destination is None or props.get("DeliveryStreamType", "DirectPut") != "DirectPut":
        raise NotImplementedError("only DirectPut delivery streams to S3 are emulated")
    s3 = {
        k: destination[k]
        for k in ("RoleARN", "BucketARN", "Prefix", "ErrorOutputPrefix", "BufferingHints", "CompressionFormat")
        if k in destination
    }
    # moto delivers each put to S3 at once (no buffering): what lands is what the consumer reads.
    arn = cloud.client("firehose").create_delivery_stream(
        DeliveryStreamName=name, DeliveryStreamType="DirectPut", ExtendedS3DestinationConfiguration=s3
    )["DeliveryStreamARN"]
    return Deployed(lid, "AWS::KinesisFirehose::DeliveryStream", name, {"Arn": arn})


# ---------------------------------------------------------------------- Glue Data Catalog, Athena


@loader("AWS::Glue::Database")
def _glue_database(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    database_input = dict(props.get("DatabaseInput") or {})
    name = str(database_input.get("Name") or physical_name(pseudo.stack_name, lid, max_length=255, lower=True))
    cloud.client("glue").create_database(DatabaseInput={**database_input, "Name": name})
    return Deployed(lid, "AWS::Glue::Database", name, {})


@loader("AWS::Glue::Table")
def _glue_table(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    """The table as the template describes it; readers find its columns and projection in the catalog."""
    table_input = dict(props["TableInput"])
    name = str(table_input.get("Name") or physical_name(pseudo.stack_name, lid, max_length=255, lower=True))
    cloud.client("glue").create_table(DatabaseName=str(props["DatabaseName"]), TableInput={**table_input, "Name": name})
    return Deployed(lid, "AWS::Glue::Table", name, {})


@loader("AWS::Athena::WorkGroup")
def _athena_workgroup(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    name = str(props["Name"])
    args: dict[str, Any] = {"Name": name, "Configuration": props.get("WorkGroupConfiguration") or {}}
    if "Description" in props:
        args["Description"] = str(props["Description"])
    if props.get("Tags"):
        args["Tags"] = _tags(props)
    cloud.client("athena").create_work_group(**args)
    return Deployed(lid, "AWS::Athena::WorkGroup", name, {"CreationTime": "0"})


@loader("AWS::Athena::NamedQuery")
def _athena_named_query(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    args: dict[str, Any] = {
        "Name": str(props.get("Name") or lid),
        "Database": str(props["Database"]),
        "QueryString": str(props["QueryString"]),
        "WorkGroup": str(props.get("WorkGroup", "primary")),
    }
    if "Description" in props:
        args["Description"] = str(props["Description"])
    query_id = cloud.client("athena").create_named_query(**args)["NamedQueryId"]
    return Deployed(lid, "AWS::Athena::NamedQuery", query_id, {"NamedQueryId": query_id})


# ---------------------------------------------------------------------- Step Functions


def state_machine_definition(props: dict[str, Any]) -> str:
    """The ASL of a state machine: DefinitionString/Definition with DefinitionSubstitutions applied."""
    if "DefinitionString" in props:
        definition = str(props["DefinitionString"])
    elif "Definition" in props:
        definition = json.dumps(props["Definition"])
    else:
        raise ValueError("AWS::StepFunctions::StateMachine without Definition/DefinitionString")
    for key, value in (props.get("DefinitionSubstitutions") or {}).items():
        definition = definition.replace("${" + key + "}", str(value))
    json.loads(definition)  # fail here, with the template at hand, on a definition that is not JSON
    return definition


@loader("AWS::StepFunctions::StateMachine")
def _state_machine(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    name = str(props.get("StateMachineName") or physical_name(pseudo.stack_name, lid, max_length=80))
    definition = state_machine_definition(props)
    arn = cloud.client("stepfunctions").create_state_machine(
        name=name,
        definition=definition,
        roleArn=str(props["RoleArn"]),
        type=str(props.get("StateMachineType", "STANDARD")),
    )["stateMachineArn"]
    return Deployed(lid, "AWS::StepFunctions::StateMachine", arn, {"Arn": arn, "Name": name})


# ---------------------------------------------------------------------- Lambda


def _placeholder_zip() -> bytes:
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("placeholder.py", "# the harness runs handlers in-process\n")
    return buffer.getvalue()


@loader("AWS::Lambda::Function")
def _lambda_function(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    name = str(props.get("FunctionName") or physical_name(pseudo.stack_name, lid, max_length=64))
    environment = {str(k): str(v) for k, v in (props.get("Environment") or {}).get("Variables", {}).items()}
    # Layers are not created on moto (moto validates them and has no public layers); the
    # handler runs in this process, where every dependency is installed.
    args: dict[str, Any] = {
        "FunctionName": name,
        "Runtime": str(props.get("Runtime", "python3.11")),
        "Role": str(props["Role"]),
        "Handler": str(props.get("Handler", "index.handler")),
        "Code": {"ZipFile": _placeholder_zip()},
        "Timeout": int(props.get("Timeout", 3)),
        "MemorySize": int(props.get("MemorySize", 128)),
        "Environment": {"Variables": environment},
    }
    if "Architectures" in props:
        args["Architectures"] = props["Architectures"]
    if "Description" in props:
        args["Description"] = str(props["Description"])[:256]
    arn = cloud.client("lambda").create_function(**args)["FunctionArn"]
    if props.get("ReservedConcurrentExecutions") is not None:
        reserved = int(props["ReservedConcurrentExecutions"])
        cloud.client("lambda").put_function_concurrency(FunctionName=name, ReservedConcurrentExecutions=reserved)
    return Deployed(lid, "AWS::Lambda::Function", name, {"Arn": arn})


@loader("AWS::Lambda::EventSourceMapping")
def _event_source_mapping(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    # Kept by the harness, not created on moto: moto would invoke the function synchronously,
    # one write at a time, ignoring batch size, partial failures, bisect and the DLQ.
    destination = (props.get("DestinationConfig") or {}).get("OnFailure", {}).get("Destination")
    function = str(props["FunctionName"])
    mapping = EventSourceMapping(
        logical_id=lid,
        function_name=function.rsplit(":", 1)[-1] if function.startswith("arn:") else function,
        event_source_arn=str(props["EventSourceArn"]),
        batch_size=int(props.get("BatchSize", 100 if ":dynamodb:" in str(props["EventSourceArn"]) else 10)),
        batching_window_seconds=int(props.get("MaximumBatchingWindowInSeconds", 0)),
        starting_position=props.get("StartingPosition"),
        report_batch_item_failures="ReportBatchItemFailures" in props.get("FunctionResponseTypes", []),
        bisect_on_error=bool(props.get("BisectBatchOnFunctionError", False)),
        maximum_retry_attempts=(
            int(props["MaximumRetryAttempts"]) if props.get("MaximumRetryAttempts") is not None else None
        ),
        maximum_record_age_seconds=(
            int(props["MaximumRecordAgeInSeconds"]) if props.get("MaximumRecordAgeInSeconds") is not None else None
        ),
        on_failure_arn=str(destination) if destination else None,
        filters=tuple(str(f["Pattern"]) for f in (props.get("FilterCriteria") or {}).get("Filters", [])),
        enabled=bool(props.get("Enabled", True)),
        properties=props,
    )
    cloud.registry.mappings.append(mapping)
    return Deployed(lid, "AWS::Lambda::EventSourceMapping", str(uuid.uuid4()), {"Id": lid})


@loader("AWS::Lambda::EventInvokeConfig")
def _event_invoke_config(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    destinations = props.get("DestinationConfig") or {}
    config = AsyncConfig(
        function_name=str(props["FunctionName"]),
        on_failure_arn=(destinations.get("OnFailure") or {}).get("Destination"),
        on_success_arn=(destinations.get("OnSuccess") or {}).get("Destination"),
        maximum_retry_attempts=props.get("MaximumRetryAttempts"),
    )
    cloud.registry.async_configs[config.function_name] = config
    return Deployed(lid, "AWS::Lambda::EventInvokeConfig", lid)


@loader("AWS::Lambda::Version")
def _lambda_version(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    function = str(props["FunctionName"])
    arn = cloud.arn("lambda", f"function:{function}:1")
    return Deployed(lid, "AWS::Lambda::Version", arn, {"Version": "1", "FunctionArn": arn})


@loader("AWS::Lambda::Alias")
def _lambda_alias(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    arn = cloud.arn("lambda", f"function:{props['FunctionName']}:{props['Name']}")
    return Deployed(lid, "AWS::Lambda::Alias", arn, {"AliasArn": arn})


# ---------------------------------------------------------------------- API Gateway (routers read the template)


def _api_id(pseudo: Pseudo, lid: str) -> str:
    return hashlib.sha256(f"{pseudo.stack_name}/{lid}".encode()).hexdigest()[:10]


@loader("AWS::ApiGateway::RestApi")
def _rest_api(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    api_id = _api_id(pseudo, lid)
    return Deployed(lid, "AWS::ApiGateway::RestApi", api_id, {"RootResourceId": f"{api_id}-root", "RestApiId": api_id})


def _api_child(resource_type: str) -> Loader:
    def load(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
        ref = (
            str(props.get("StageName") or _api_id(pseudo, lid))
            if resource_type.endswith("::Stage")
            else _api_id(pseudo, lid)
        )
        if resource_type == "AWS::ApiGateway::Model":
            ref = str(props.get("Name") or lid)
        attributes = {"ResourceId": ref, "AuthorizerId": ref, "RequestValidatorId": ref, "DeploymentId": ref}
        attributes.update({"IntegrationId": ref, "RouteId": ref, "StageName": ref, "Arn": ref})
        return Deployed(lid, resource_type, ref, attributes, dict(props))

    return load


for _type in (
    "AWS::ApiGateway::Resource",
    "AWS::ApiGateway::Method",
    "AWS::ApiGateway::Authorizer",
    "AWS::ApiGateway::RequestValidator",
    "AWS::ApiGateway::Model",
    "AWS::ApiGateway::Deployment",
    "AWS::ApiGateway::Stage",
    "AWS::ApiGatewayV2::Route",
    "AWS::ApiGatewayV2::Integration",
    "AWS::ApiGatewayV2::Authorizer",
    "AWS::ApiGatewayV2::Stage",
):
    LOADERS[_type] = _api_child(_type)


@loader("AWS::ApiGatewayV2::Api")
def _http_api(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    api_id = _api_id(pseudo, lid)
    scheme = "wss" if str(props.get("ProtocolType", "")).upper() == "WEBSOCKET" else "https"
    endpoint = f"{scheme}://{api_id}.execute-api.{cloud.region}.{pseudo.url_suffix}"
    return Deployed(lid, "AWS::ApiGatewayV2::Api", api_id, {"ApiId": api_id, "ApiEndpoint": endpoint})
