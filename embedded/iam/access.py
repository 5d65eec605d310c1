"""What an AWS call asks IAM for: each action on each resource, with the request's condition keys.

AWS authorizes a call as one or more actions on resources: ``PutItem`` is ``dynamodb:PutItem`` on
the table, a ``TransactWriteItems`` of four items is four actions (one per item, on each item's
table), ``PublishBatch`` is ``sns:Publish``, ``ConverseStream`` is
``bedrock:InvokeModelWithResponseStream``, a ``Query`` on an index is authorized on the index's
ARN, ``CreateSchedule`` also needs ``iam:PassRole`` for the schedule's role. :func:`accesses`
turns a call into that list, for every operation the stage's code makes (the Service
Authorization Reference of each service gives the action and resource type). An operation this
table does not know raises :class:`UnmappedOperation`: the embedded stage never lets a call
through that it cannot authorize.

The KMS actions a service performs with the caller's credentials (an SSE-KMS queue, topic,
table, bucket, secret or parameter) are added by :mod:`embedded.iam.guard` from the resource's
key, through :func:`kms_accesses`.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from embedded.iam.policy import ContextValue


class UnmappedOperation(RuntimeError):
    """A call the embedded stage cannot authorize: add the operation to ``embedded/iam/access.py``."""


@dataclass(frozen=True)
class Access:
    """One action on one resource that a call needs."""

    action: str
    resource: str
    context: Mapping[str, ContextValue] = field(default_factory=dict)


@dataclass(frozen=True)
class Call:
    """An AWS API call as the SDK makes it."""

    service: str  # botocore's service name: "dynamodb", "sqs", "stepfunctions", ...
    operation: str  # "PutItem"
    params: Mapping[str, Any]
    region: str
    account: str
    url: str = ""  # the endpoint the client calls (the management API's names its API and stage)


class Resolver:
    """What the accesses of a call need to know about the stage (implemented by the stage's authority)."""

    def queue_arn(self, queue_url: str) -> str:
        raise NotImplementedError

    def state_machine_of_token(self, task_token: str) -> str | None:
        raise NotImplementedError

    def email_identity_arn(self, from_address: str, region: str, account: str) -> str:
        raise NotImplementedError

    def secret_arn(self, secret_id: str) -> str:
        raise NotImplementedError


Mapper = Callable[[Call, Resolver], list[Access]]
_MAPPERS: dict[tuple[str, str], Mapper] = {}


def _maps(service: str, *operations: str) -> Callable[[Mapper], Mapper]:
    def register(function: Mapper) -> Mapper:
        for operation in operations:
            _MAPPERS[(service, operation)] = function
        return function

    return register


def known_operations() -> frozenset[tuple[str, str]]:
    """Every (service, operation) the stage can authorize."""
    return frozenset(_MAPPERS)


def accesses(call: Call, resolver: Resolver) -> list[Access]:
    """The actions on resources ``call`` needs (see the module docstring)."""
    mapper = _MAPPERS.get((call.service, call.operation))
    if mapper is None:
        raise UnmappedOperation(
            f"{call.service}:{call.operation} is not in the embedded stage's table of operations, so it cannot be "
            "authorized; add it to embedded/iam/access.py with its action and resource from the service's "
            "Service Authorization Reference"
        )
    return mapper(call, resolver)


def _arn(service: str, call: Call, resource: str, *, region: bool = True, account: bool = True) -> str:
    return f"arn:aws:{service}:{call.region if region else ''}:{call.account if account else ''}:{resource}"


# ---------------------------------------------------------------------- DynamoDB


def table_arn(call: Call, name: str) -> str:
    return name if name.startswith("arn:") else _arn("dynamodb", call, f"table/{name}")


@_maps("dynamodb", "GetItem", "PutItem", "UpdateItem", "DeleteItem", "DescribeTable", "Scan", "Query")
def _dynamodb_item(call: Call, _: Resolver) -> list[Access]:
    table = table_arn(call, str(call.params["TableName"]))
    index = call.params.get("IndexName")
    resource = f"{table}/index/{index}" if index else table
    return [Access(f"dynamodb:{call.operation}", resource)]


_TRANSACT_ACTIONS: Final = {
    "Put": "dynamodb:PutItem",
    "Update": "dynamodb:UpdateItem",
    "Delete": "dynamodb:DeleteItem",
    "ConditionCheck": "dynamodb:ConditionCheckItem",
    "Get": "dynamodb:GetItem",
}


@_maps("dynamodb", "TransactWriteItems", "TransactGetItems")
def _dynamodb_transaction(call: Call, _: Resolver) -> list[Access]:
    # DynamoDB authorizes each item of a transaction as the single-item action on its table.
    found = []
    for item in call.params["TransactItems"]:
        ((kind, body),) = item.items()
        found.append(Access(_TRANSACT_ACTIONS[kind], table_arn(call, str(body["TableName"]))))
    return found


@_maps("dynamodb", "BatchGetItem", "BatchWriteItem")
def _dynamodb_batch(call: Call, _: Resolver) -> list[Access]:
    return [Access(f"dynamodb:{call.operation}", table_arn(call, str(table))) for table in call.params["RequestItems"]]


@_maps("dynamodb", "ExportTableToPointInTime")
def _dynamodb_export(call: Call, _: Resolver) -> list[Access]:
    # The export writes to the bucket with the caller's permissions (DynamoDB developer guide,
    # "Requesting a table export": s3:AbortMultipartUpload, s3:PutObject, s3:PutObjectAcl).
    bucket, prefix = str(call.params["S3Bucket"]), str(call.params.get("S3Prefix", "")).strip("/")
    objects = f"arn:aws:s3:::{bucket}/{prefix + '/' if prefix else ''}*"
    found = [Access("dynamodb:ExportTableToPointInTime", str(call.params["TableArn"]))]
    found += [Access(action, objects) for action in ("s3:AbortMultipartUpload", "s3:PutObject", "s3:PutObjectAcl")]
    return found


@_maps("dynamodb", "DescribeExport")
def _dynamodb_describe_export(call: Call, _: Resolver) -> list[Access]:
    return [Access("dynamodb:DescribeExport", str(call.params["ExportArn"]))]


@_maps("dynamodbstreams", "DescribeStream", "GetShardIterator")
def _stream(call: Call, _: Resolver) -> list[Access]:
    return [Access(f"dynamodb:{call.operation}", str(call.params["StreamArn"]))]


# ---------------------------------------------------------------------- SQS, SNS, EventBridge, Firehose


@_maps(
    "sqs",
    "SendMessage",
    "SendMessageBatch",
    "ReceiveMessage",
    "DeleteMessage",
    "DeleteMessageBatch",
    "ChangeMessageVisibility",
    "ChangeMessageVisibilityBatch",
    "GetQueueAttributes",
    "PurgeQueue",
)
def _sqs(call: Call, resolver: Resolver) -> list[Access]:
    action = call.operation.removesuffix("Batch")
    return [Access(f"sqs:{action}", resolver.queue_arn(str(call.params["QueueUrl"])))]


@_maps("sqs", "GetQueueUrl")
def _sqs_url(call: Call, _: Resolver) -> list[Access]:
    account = str(call.params.get("QueueOwnerAWSAccountId") or call.account)
    return [Access("sqs:GetQueueUrl", f"arn:aws:sqs:{call.region}:{account}:{call.params['QueueName']}")]


@_maps("sns", "Publish", "PublishBatch")
def _sns_publish(call: Call, _: Resolver) -> list[Access]:
    # PublishBatch is authorized as sns:Publish (SNS API reference, PublishBatch).
    target = call.params.get("TopicArn") or call.params.get("TargetArn")
    if not target:
        raise UnmappedOperation("sns:Publish to a phone number: not emulated")
    return [Access("sns:Publish", str(target))]


def bus_arn(call: Call, name: str | None) -> str:
    name = name or "default"
    return name if name.startswith("arn:") else _arn("events", call, f"event-bus/{name}")


@_maps("events", "PutEvents")
def _events_put(call: Call, _: Resolver) -> list[Access]:
    buses = sorted({bus_arn(call, entry.get("EventBusName")) for entry in call.params["Entries"]})
    return [Access("events:PutEvents", bus) for bus in buses]


@_maps("firehose", "PutRecord", "PutRecordBatch")
def _firehose(call: Call, _: Resolver) -> list[Access]:
    stream = _arn("firehose", call, f"deliverystream/{call.params['DeliveryStreamName']}")
    return [Access(f"firehose:{call.operation}", stream)]


# ---------------------------------------------------------------------- Lambda, Step Functions, Scheduler


def function_arn(call: Call, name: str, qualifier: str | None = None) -> str:
    """A function's ARN from a FunctionName (name, partial ARN ``account:function:name``, or ARN)."""
    if name.startswith("arn:"):
        return name if qualifier is None or name.count(":") > 6 else f"{name}:{qualifier}"
    parts = name.split(":")
    if len(parts) >= 3 and parts[1] == "function":
        account, function, rest = parts[0], parts[2], parts[3:]
        arn = f"arn:aws:lambda:{call.region}:{account}:function:{function}"
        return f"{arn}:{rest[0]}" if rest else arn
    arn = _arn("lambda", call, f"function:{parts[0]}")
    qualifier = parts[1] if len(parts) > 1 else qualifier
    return f"{arn}:{qualifier}" if qualifier else arn


@_maps("lambda", "Invoke", "InvokeAsync")
def _lambda_invoke(call: Call, _: Resolver) -> list[Access]:
    qualifier = call.params.get("Qualifier")
    return [Access("lambda:InvokeFunction", function_arn(call, str(call.params["FunctionName"]), qualifier))]


@_maps("stepfunctions", "StartExecution", "StartSyncExecution")
def _sfn_start(call: Call, _: Resolver) -> list[Access]:
    return [Access(f"states:{call.operation}", str(call.params["stateMachineArn"]))]


@_maps("stepfunctions", "DescribeExecution", "StopExecution", "RedriveExecution", "GetExecutionHistory")
def _sfn_execution(call: Call, _: Resolver) -> list[Access]:
    return [Access(f"states:{call.operation}", str(call.params["executionArn"]))]


@_maps("stepfunctions", "SendTaskSuccess", "SendTaskFailure", "SendTaskHeartbeat")
def _sfn_task(call: Call, resolver: Resolver) -> list[Access]:
    # Authorized on the state machine whose execution issued the token. A token no execution holds
    # is answered by the service (TaskDoesNotExist / InvalidToken) before any resource is known.
    machine = resolver.state_machine_of_token(str(call.params["taskToken"]))
    return [Access(f"states:{call.operation}", machine)] if machine else []


@_maps("scheduler", "CreateSchedule", "UpdateSchedule")
def _scheduler(call: Call, _: Resolver) -> list[Access]:
    group = str(call.params.get("GroupName") or "default")
    schedule = _arn("scheduler", call, f"schedule/{group}/{call.params['Name']}")
    role = str(call.params["Target"]["RoleArn"])
    return [
        Access(f"scheduler:{call.operation}", schedule),
        Access("iam:PassRole", role, {"iam:PassedToService": "scheduler.amazonaws.com"}),
    ]


@_maps("scheduler", "DeleteSchedule", "GetSchedule")
def _scheduler_read(call: Call, _: Resolver) -> list[Access]:
    group = str(call.params.get("GroupName") or "default")
    return [Access(f"scheduler:{call.operation}", _arn("scheduler", call, f"schedule/{group}/{call.params['Name']}"))]


# ---------------------------------------------------------------------- S3


def _object(params: Mapping[str, Any]) -> str:
    return f"arn:aws:s3:::{params['Bucket']}/{params['Key']}"


@_maps("s3", "GetObject", "HeadObject")
def _s3_get(call: Call, _: Resolver) -> list[Access]:
    action = "s3:GetObjectVersion" if call.params.get("VersionId") else "s3:GetObject"
    return [Access(action, _object(call.params))]


@_maps("s3", "PutObject")
def _s3_put(call: Call, _: Resolver) -> list[Access]:
    return [Access("s3:PutObject", _object(call.params))]


@_maps("s3", "DeleteObject")
def _s3_delete(call: Call, _: Resolver) -> list[Access]:
    action = "s3:DeleteObjectVersion" if call.params.get("VersionId") else "s3:DeleteObject"
    found = [Access(action, _object(call.params))]
    if call.params.get("BypassGovernanceRetention"):
        found.append(Access("s3:BypassGovernanceRetention", _object(call.params)))
    return found


@_maps("s3", "PutObjectRetention", "GetObjectRetention", "PutObjectLegalHold", "GetObjectLegalHold")
def _s3_lock(call: Call, _: Resolver) -> list[Access]:
    found = [Access(f"s3:{call.operation}", _object(call.params))]
    if call.params.get("BypassGovernanceRetention"):
        found.append(Access("s3:BypassGovernanceRetention", _object(call.params)))
    return found


@_maps("s3", "ListObjectsV2", "ListObjects")
def _s3_list(call: Call, _: Resolver) -> list[Access]:
    prefix = call.params.get("Prefix")
    return [Access("s3:ListBucket", f"arn:aws:s3:::{call.params['Bucket']}", {"s3:prefix": prefix} if prefix else {})]


@_maps("s3", "ListObjectVersions")
def _s3_versions(call: Call, _: Resolver) -> list[Access]:
    return [Access("s3:ListBucketVersions", f"arn:aws:s3:::{call.params['Bucket']}")]


# ---------------------------------------------------------------------- SES, Secrets Manager, SSM


@_maps("sesv2", "SendEmail")
def _ses_send(call: Call, resolver: Resolver) -> list[Access]:
    # SES authorizes a send on the sending identity and on the configuration set it uses.
    sender = str(call.params["FromEmailAddress"])
    found = [Access("ses:SendEmail", resolver.email_identity_arn(sender, call.region, call.account))]
    if call.params.get("ConfigurationSetName"):
        found.append(
            Access("ses:SendEmail", _arn("ses", call, f"configuration-set/{call.params['ConfigurationSetName']}"))
        )
    return found


@_maps("secretsmanager", "GetSecretValue", "DescribeSecret")
def _secret(call: Call, resolver: Resolver) -> list[Access]:
    return [Access(f"secretsmanager:{call.operation}", resolver.secret_arn(str(call.params["SecretId"])))]


@_maps("ssm", "GetParameter", "GetParameters")
def _ssm(call: Call, _: Resolver) -> list[Access]:
    names = [call.params["Name"]] if "Name" in call.params else list(call.params["Names"])
    return [Access(f"ssm:{call.operation}", _arn("ssm", call, f"parameter/{str(n).lstrip('/')}")) for n in names]


@_maps("cognito-idp", "AdminDeleteUser")
def _cognito_admin(call: Call, _: Resolver) -> list[Access]:
    return [Access(f"cognito-idp:{call.operation}", _arn("cognito-idp", call, f"userpool/{call.params['UserPoolId']}"))]


# ---------------------------------------------------------------------- API Gateway management, Bedrock

_MANAGEMENT_METHODS: Final = {"PostToConnection": "POST", "GetConnection": "GET", "DeleteConnection": "DELETE"}
_API_HOST = re.compile(r"^(?P<api>[a-z0-9]+)\.execute-api\.")


@_maps("apigatewaymanagementapi", "PostToConnection", "GetConnection", "DeleteConnection")
def _manage_connections(call: Call, _: Resolver) -> list[Access]:
    url = urllib.parse.urlsplit(call.url)
    match = _API_HOST.match(url.hostname or "")
    if match is None:
        raise UnmappedOperation(f"management API endpoint {call.url} does not name an execute-api host")
    stage = url.path.strip("/").split("/")[0]
    method = _MANAGEMENT_METHODS[call.operation]
    connection = call.params["ConnectionId"]
    resource = _arn("execute-api", call, f"{match.group('api')}/{stage}/{method}/@connections/{connection}")
    return [Access("execute-api:ManageConnections", resource)]


def model_resources(model_id: str, region: str, account: str) -> list[str]:
    """The ARNs Bedrock authorizes an invocation of ``model_id`` on.

    A foundation model id is its model ARN in the caller's region. A cross-region inference
    profile id (``us.``, ``eu.``, ``apac.``, ``global.`` + model id) is authorized on the profile
    and on the model in each region the profile routes to; the embedded stage checks the profile
    and the model in the caller's region (the other regions' ARNs are what the grant must name
    with a wildcard region, which ``embedded.iam`` cannot see from one region).
    """
    if model_id.startswith("arn:"):
        return [model_id]
    prefix, _, rest = model_id.partition(".")
    if prefix in ("us", "eu", "apac", "global", "us-gov", "ca", "jp", "au") and rest:
        return [
            f"arn:aws:bedrock:{region}:{account}:inference-profile/{model_id}",
            f"arn:aws:bedrock:{region}::foundation-model/{rest}",
        ]
    return [f"arn:aws:bedrock:{region}::foundation-model/{model_id}"]


_BEDROCK_ACTIONS: Final = {
    "Converse": "bedrock:InvokeModel",
    "InvokeModel": "bedrock:InvokeModel",
    "ConverseStream": "bedrock:InvokeModelWithResponseStream",
    "InvokeModelWithResponseStream": "bedrock:InvokeModelWithResponseStream",
}


@_maps("bedrock-runtime", *_BEDROCK_ACTIONS)
def _bedrock(call: Call, _: Resolver) -> list[Access]:
    action = _BEDROCK_ACTIONS[call.operation]
    accesses = [Access(action, arn) for arn in model_resources(str(call.params["modelId"]), call.region, call.account)]
    guardrail = call.params.get("guardrailConfig")
    if guardrail is not None:
        # A call that names a guardrail needs ApplyGuardrail on it ("Set up permissions to use Amazon
        # Bedrock Guardrails", Amazon Bedrock User Guide).
        identifier = str(guardrail["guardrailIdentifier"])
        arn = identifier if identifier.startswith("arn:") else _arn("bedrock", call, f"guardrail/{identifier}")
        accesses.append(Access("bedrock:ApplyGuardrail", arn))
    return accesses


# ---------------------------------------------------------------------- KMS on the caller's behalf

#: What each service asks KMS for with the caller's credentials, per operation kind (each
#: service's "key management" page: SQS producers GenerateDataKey + Decrypt, consumers Decrypt;
#: SNS publishers GenerateDataKey + Decrypt; S3 PutObject GenerateDataKey, GetObject Decrypt;
#: DynamoDB Decrypt of the table key; Secrets Manager and SSM Decrypt).
_KMS_FOR: Final[dict[str, Sequence[str]]] = {
    "sqs:SendMessage": ("kms:GenerateDataKey", "kms:Decrypt"),
    "sqs:ReceiveMessage": ("kms:Decrypt",),
    "sns:Publish": ("kms:GenerateDataKey", "kms:Decrypt"),
    "s3:PutObject": ("kms:GenerateDataKey",),
    "s3:GetObject": ("kms:Decrypt",),
    "s3:GetObjectVersion": ("kms:Decrypt",),
    "secretsmanager:GetSecretValue": ("kms:Decrypt",),
    "ssm:GetParameter": ("kms:Decrypt",),
    "ssm:GetParameters": ("kms:Decrypt",),
    # A state machine encrypted with a customer key (Step Functions developer guide, "Data at rest
    # encryption"): what a caller writes into an execution is encrypted with its credentials, what
    # it reads back decrypted.
    "states:StartExecution": ("kms:GenerateDataKey", "kms:Decrypt"),
    "states:StartSyncExecution": ("kms:GenerateDataKey", "kms:Decrypt"),
    "states:SendTaskSuccess": ("kms:GenerateDataKey", "kms:Decrypt"),
    "states:SendTaskFailure": ("kms:GenerateDataKey", "kms:Decrypt"),
    "states:SendTaskHeartbeat": ("kms:GenerateDataKey", "kms:Decrypt"),
    "states:RedriveExecution": ("kms:GenerateDataKey", "kms:Decrypt"),
    "states:DescribeExecution": ("kms:Decrypt",),
    "states:GetExecutionHistory": ("kms:Decrypt",),
    "states:StopExecution": ("kms:Decrypt",),
}
_DYNAMODB_DATA_ACTIONS: Final = frozenset(
    {
        "dynamodb:GetItem",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:DeleteItem",
        "dynamodb:ConditionCheckItem",
        "dynamodb:Query",
        "dynamodb:Scan",
        "dynamodb:BatchGetItem",
        "dynamodb:BatchWriteItem",
        "dynamodb:GetRecords",
    }
)
_VIA_SERVICE: Final = {
    "sqs": "sqs",
    "sns": "sns",
    "s3": "s3",
    "dynamodb": "dynamodb",
    "secretsmanager": "secretsmanager",
    "states": "states",
}


def state_machine_of(arn: str) -> str:
    """The state machine of an execution ARN (a state machine ARN is its own)."""
    parts = arn.split(":")
    if len(parts) >= 7 and parts[5] == "execution":
        return ":".join([*parts[:5], "stateMachine", parts[6]])
    return arn


def kms_actions(access: Access) -> Sequence[str]:
    """The KMS actions a service performs with the caller's credentials to carry out ``access``."""
    if access.action in _DYNAMODB_DATA_ACTIONS:
        return ("kms:Decrypt",)
    return _KMS_FOR.get(access.action, ())


def kms_accesses(access: Access, key_arn: str, region: str, account: str) -> list[Access]:
    """``access``'s KMS actions on ``key_arn``, with the condition keys KMS sees then."""
    service = access.action.split(":", 1)[0]
    context: dict[str, ContextValue] = {
        "kms:ViaService": f"{_VIA_SERVICE.get(service, service)}.{region}.amazonaws.com",
        "kms:CallerAccount": account,
    }
    if service == "sqs":
        context["kms:EncryptionContext:aws:sqs:arn"] = access.resource
    elif service == "s3":
        context["kms:EncryptionContext:aws:s3:arn"] = access.resource.split("/", 1)[0]
    elif service == "secretsmanager":
        context["kms:EncryptionContext:SecretARN"] = access.resource
    elif service == "ssm":
        context["kms:EncryptionContext:PARAMETER_ARN"] = access.resource
    elif service == "states":
        context["kms:EncryptionContext:aws:states:stateMachineArn"] = state_machine_of(access.resource)
    return [Access(action, key_arn, context) for action in kms_actions(access)]
