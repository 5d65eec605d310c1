"""Every policy of a deployed stage, and the decisions taken against them.

Built once from the deployed stacks (``Authority.of(region, account, stacks)``): each role's
trust policy and identity policies (inline, attached through ``AWS::IAM::Policy`` and
``AWS::IAM::ManagedPolicy``, and the AWS managed policies the templates name), the resource
policies (queue, topic, bucket, event bus, Lambda permissions, CloudWatch Logs), every KMS key's
policy and aliases, and which key encrypts which resource. :meth:`Authority.authorize` decides one
:class:`~embedded.iam.access.Access` for a role or a service principal with the evaluator of
:mod:`embedded.iam.policy`: the same-account rule for a resource, KMS's rule for a key.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from embedded.iam.access import Access, Resolver, state_machine_of
from embedded.iam.policy import ContextValue, Decision, Outcome, Policy, Principal, Request, decide, decide_kms

if TYPE_CHECKING:
    from embedded.cloudformation.deploy import DeployedStack

#: The AWS managed policies the templates attach, as AWS publishes them (IAM console, policy versions
#: current on 2026-11-27). A template naming another one fails the deployment: add it here.
AWS_MANAGED_POLICIES: Final[dict[str, dict[str, Any]]] = {
    "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole": {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": ["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents"],
                "Resource": "*",
            }
        ],
    },
    "arn:aws:iam::aws:policy/service-role/AmazonAPIGatewayPushToCloudWatchLogs": {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": [
                    "logs:CreateLogGroup",
                    "logs:CreateLogStream",
                    "logs:DescribeLogGroups",
                    "logs:DescribeLogStreams",
                    "logs:PutLogEvents",
                    "logs:GetLogEvents",
                    "logs:FilterLogEvents",
                ],
                "Resource": "*",
            }
        ],
    },
    # AWS Backup's service role policies, their DynamoDB, KMS and tagging statements (the others are for
    # services the stage does not have). AWS Backup acts on its schedule, outside any call the stage
    # makes; the documents are here so the role that names them is a role the stage knows.
    "arn:aws:iam::aws:policy/service-role/AWSBackupServiceRolePolicyForBackup": {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": ["dynamodb:DescribeTable", "dynamodb:CreateBackup", "dynamodb:StartAwsBackupJob"],
                "Resource": "arn:aws:dynamodb:*:*:table/*",
            },
            {
                "Effect": "Allow",
                "Action": ["dynamodb:DescribeBackup", "dynamodb:DeleteBackup"],
                "Resource": "arn:aws:dynamodb:*:*:table/*/backup/*",
            },
            {"Effect": "Allow", "Action": ["dynamodb:ListTagsOfResource"], "Resource": "*"},
            {"Effect": "Allow", "Action": ["kms:DescribeKey", "tag:GetResources"], "Resource": "*"},
            {
                "Effect": "Allow",
                "Action": "kms:CreateGrant",
                "Resource": "*",
                "Condition": {"Bool": {"kms:GrantIsForAWSResource": "true"}},
            },
            {"Effect": "Allow", "Action": ["kms:GenerateDataKeyWithoutPlaintext"], "Resource": "arn:aws:kms:*:*:key/*"},
        ],
    },
    "arn:aws:iam::aws:policy/service-role/AWSBackupServiceRolePolicyForRestores": {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": [
                    "dynamodb:Scan",
                    "dynamodb:Query",
                    "dynamodb:UpdateItem",
                    "dynamodb:PutItem",
                    "dynamodb:GetItem",
                    "dynamodb:DeleteItem",
                    "dynamodb:BatchWriteItem",
                    "dynamodb:DescribeTable",
                ],
                "Resource": "arn:aws:dynamodb:*:*:table/*",
            },
            {
                "Effect": "Allow",
                "Action": ["dynamodb:RestoreTableFromBackup", "dynamodb:RestoreTableFromAwsBackup"],
                "Resource": "arn:aws:dynamodb:*:*:table/*/backup/*",
            },
            {"Effect": "Allow", "Action": ["kms:DescribeKey"], "Resource": "*"},
            {
                "Effect": "Allow",
                "Action": "kms:CreateGrant",
                "Resource": "*",
                "Condition": {"Bool": {"kms:GrantIsForAWSResource": "true"}},
            },
        ],
    },
}


class PolicySetupError(ValueError):
    """A policy resource the stage cannot read (an unknown managed policy, a malformed document)."""


@dataclass
class Role:
    """An IAM role of the stage."""

    arn: str
    name: str
    trust: Policy
    inline: list[Policy] = field(default_factory=list)
    managed: list[str] = field(default_factory=list)


@dataclass
class Key:
    """A KMS key of the stage."""

    arn: str
    key_id: str
    policy: Policy


@dataclass
class Authority(Resolver):
    """The stage's policies and what they decide (see the module docstring)."""

    region: str
    account: str
    clock: Callable[[], float] = time.time
    roles: dict[str, Role] = field(default_factory=dict)
    managed: dict[str, Policy] = field(default_factory=dict)
    attached: dict[str, list[Policy]] = field(default_factory=dict)  # role name -> policies
    resource_policies: dict[str, list[Policy]] = field(default_factory=dict)  # resource ARN -> policies
    keys: dict[str, Key] = field(default_factory=dict)  # key ARN -> key
    key_names: dict[str, str] = field(default_factory=dict)  # key id, ARN or alias -> key ARN
    encrypted_by: dict[str, str] = field(default_factory=dict)  # resource ARN -> key identifier as given
    queues: dict[str, str] = field(default_factory=dict)  # queue URL -> ARN
    secrets: dict[str, str] = field(default_factory=dict)  # secret name or ARN -> ARN
    email_identities: set[str] = field(default_factory=set)
    function_roles: dict[str, str] = field(default_factory=dict)  # function name -> role ARN
    function_logs: dict[str, str] = field(default_factory=dict)  # function name -> its log group's name
    machine_roles: dict[str, str] = field(default_factory=dict)  # state machine ARN -> its execution role ARN

    # ------------------------------------------------------------------ building

    @classmethod
    def of(cls, region: str, account: str, stacks: Iterable[DeployedStack], clock: Callable[[], float]) -> Authority:
        """The authority of the deployed ``stacks``."""
        authority = cls(region, account, clock)
        for arn, document in AWS_MANAGED_POLICIES.items():
            authority.managed[arn] = authority._policy(document, f"AWS managed policy {arn.rsplit('/', 1)[-1]}")
        deployed = [(s.name, r) for s in stacks for r in s.resources.values()]
        for stack, resource in deployed:
            reader = _READERS.get(resource.type)
            if reader is not None:
                reader(
                    authority, f"{stack}/{resource.logical_id}", resource.ref, resource.attributes, resource.properties
                )
        for name, documents in authority.attached.items():
            if not any(r.name == name for r in authority.roles.values()):
                sources = ", ".join(p.source for p in documents)
                raise PolicySetupError(f"{sources} attaches to role {name}, which the stage does not have")
        for role in authority.roles.values():
            for arn in role.managed:
                if arn not in authority.managed:
                    raise PolicySetupError(
                        f"role {role.name} names the managed policy {arn}, which the embedded stage does not know; "
                        "add its document to embedded/iam/authority.py AWS_MANAGED_POLICIES"
                    )
        return authority

    def _policy(self, document: Any, source: str) -> Policy:
        try:
            return Policy.parse(document if isinstance(document, (str, Mapping)) else json.dumps(document), source)
        except ValueError as error:
            raise PolicySetupError(f"{source}: {error}") from error

    def add_resource_policy(self, resource_arn: str, document: Any, source: str) -> None:
        self.resource_policies.setdefault(resource_arn, []).append(self._policy(document, source))

    # ------------------------------------------------------------------ Resolver

    def queue_arn(self, queue_url: str) -> str:
        if queue_url.startswith("arn:"):
            return queue_url
        if queue_url in self.queues:
            return self.queues[queue_url]
        name = queue_url.rstrip("/").rsplit("/", 1)[-1]
        account = queue_url.rstrip("/").rsplit("/", 2)[-2]
        return f"arn:aws:sqs:{self.region}:{account}:{name}"

    def state_machine_of_token(self, task_token: str) -> str | None:
        from moto.stepfunctions.parser.models import stepfunctions_parser_backends

        backend = stepfunctions_parser_backends[self.account][self.region]
        for machine in list(backend.state_machines):
            for execution in list(machine.executions):
                worker = getattr(execution, "exec_worker", None)
                env = getattr(worker, "env", None)
                pool = getattr(getattr(env, "callback_pool_manager", None), "_pool", {})
                if task_token in pool:
                    return str(machine.arn)
        return None

    def email_identity_arn(self, from_address: str, region: str, account: str) -> str:
        address = from_address.rsplit("<", 1)[-1].rstrip(">").strip()
        domain = address.rsplit("@", 1)[-1]
        identity = address if address in self.email_identities or domain not in self.email_identities else domain
        return f"arn:aws:ses:{region}:{account}:identity/{identity}"

    def secret_arn(self, secret_id: str) -> str:
        return self.secrets.get(secret_id, secret_id)

    # ------------------------------------------------------------------ lookups

    def role(self, arn: str) -> Role:
        if arn not in self.roles:
            raise PolicySetupError(f"no role {arn} on the stage")
        return self.roles[arn]

    def identity(self, role_arn: str) -> list[Policy]:
        """The identity policies of a role: inline, attached and managed."""
        role = self.role(role_arn)
        return [*role.inline, *self.attached.get(role.name, []), *(self.managed[a] for a in role.managed)]

    def key_arn(self, identifier: str) -> str | None:
        """The ARN of the stage's customer managed key ``identifier`` names (None: an AWS managed key)."""
        if identifier in self.key_names:
            return self.key_names[identifier]
        if identifier.startswith(("alias/aws/", f"arn:aws:kms:{self.region}:{self.account}:alias/aws/")):
            return None
        raise PolicySetupError(f"the stage has no KMS key {identifier}")

    def key_of(self, resource_arn: str) -> str | None:
        """The customer managed key that encrypts ``resource_arn`` (a queue, topic, table, bucket, ...)."""
        if resource_arn.startswith("arn:aws:s3:::"):
            resource_arn = resource_arn.split("/", 1)[0]
        elif ":dynamodb:" in resource_arn:
            resource_arn = "/".join(resource_arn.split("/")[:2])
        elif ":states:" in resource_arn:
            resource_arn = state_machine_of(resource_arn)
        identifier = self.encrypted_by.get(resource_arn)
        return self.key_arn(identifier) if identifier else None

    def resource_policies_of(self, resource_arn: str) -> list[Policy]:
        """The resource-based policies that apply to a request on ``resource_arn``."""
        if resource_arn.startswith("arn:aws:s3:::"):
            return self.resource_policies.get(resource_arn.split("/", 1)[0], [])
        if ":lambda:" in resource_arn:
            return self.resource_policies.get(":".join(resource_arn.split(":")[:7]), [])
        if ":logs:" in resource_arn:
            return self.resource_policies.get("logs", [])
        return self.resource_policies.get(resource_arn, [])

    # ------------------------------------------------------------------ decisions

    def base_context(self, access: Access) -> dict[str, ContextValue]:
        now = self.clock()
        context: dict[str, ContextValue] = {
            "aws:SecureTransport": True,
            "aws:RequestedRegion": self.region,
            "aws:CurrentTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
            "aws:EpochTime": int(now),
        }
        if access.action.startswith("s3:"):
            context["s3:TlsVersion"] = 1.3
        return context

    def authorize_role(self, role_arn: str, access: Access) -> Decision:
        """Whether the role may perform ``access``."""
        principal = Principal.role(role_arn)
        context = {
            **self.base_context(access),
            "aws:PrincipalArn": role_arn,
            "aws:PrincipalAccount": self.account,
            "aws:PrincipalType": "AssumedRole",
            **access.context,
        }
        request = Request(access.action, access.resource, principal, context)
        if access.action.startswith("kms:"):
            return decide_kms(request, key_policy=self._key(access.resource).policy, identity=self.identity(role_arn))
        return decide(request, identity=self.identity(role_arn), resource=self.resource_policies_of(access.resource))

    def authorize_service(self, service: str, access: Access) -> Decision:
        """Whether the service principal (``sns.amazonaws.com``) may perform ``access``."""
        context = {**self.base_context(access), "aws:PrincipalServiceName": service, **access.context}
        request = Request(access.action, access.resource, Principal.service(service), context)
        if access.action.startswith("kms:"):
            return decide_kms(request, key_policy=self._key(access.resource).policy)
        return decide(request, resource=self.resource_policies_of(access.resource))

    def _key(self, arn: str) -> Key:
        if arn not in self.keys:
            raise PolicySetupError(f"the stage has no KMS key {arn}")
        return self.keys[arn]


def allowed(decision: Decision) -> bool:
    return decision.outcome is Outcome.ALLOW


# ---------------------------------------------------------------------- readers, one per resource type

Reader = Callable[[Authority, str, str, Mapping[str, Any], Mapping[str, Any]], None]


def _role(a: Authority, source: str, ref: str, attributes: Mapping[str, Any], props: Mapping[str, Any]) -> None:
    arn = str(attributes["Arn"])
    role = Role(arn, ref, a._policy(props["AssumeRolePolicyDocument"], f"{source} (trust policy)"))
    for inline in props.get("Policies") or []:
        role.inline.append(a._policy(inline["PolicyDocument"], f"{source}/{inline.get('PolicyName', 'inline')}"))
    role.managed = [str(m) for m in props.get("ManagedPolicyArns") or []]
    a.roles[arn] = role


def _policy(a: Authority, source: str, ref: str, attributes: Mapping[str, Any], props: Mapping[str, Any]) -> None:
    document = a._policy(props["PolicyDocument"], source)
    for role in props.get("Roles") or []:
        a.attached.setdefault(str(role), []).append(document)
    if props.get("Users") or props.get("Groups"):
        raise PolicySetupError(f"{source}: policies attached to users or groups are not emulated")


def _managed_policy(
    a: Authority, source: str, ref: str, attributes: Mapping[str, Any], props: Mapping[str, Any]
) -> None:
    a.managed[ref] = a._policy(props["PolicyDocument"], source)
    for role in props.get("Roles") or []:
        a.attached.setdefault(str(role), []).append(a.managed[ref])


def _queue_policy(a: Authority, source: str, ref: str, attributes: Mapping[str, Any], props: Mapping[str, Any]) -> None:
    for url in props["Queues"]:
        a.add_resource_policy(a.queue_arn(str(url)), props["PolicyDocument"], source)


def _topic_policy(a: Authority, source: str, ref: str, attributes: Mapping[str, Any], props: Mapping[str, Any]) -> None:
    for topic in props["Topics"]:
        a.add_resource_policy(str(topic), props["PolicyDocument"], source)


def _bucket_policy(
    a: Authority, source: str, ref: str, attributes: Mapping[str, Any], props: Mapping[str, Any]
) -> None:
    a.add_resource_policy(f"arn:aws:s3:::{props['Bucket']}", props["PolicyDocument"], source)


def _lambda_permission(
    a: Authority, source: str, ref: str, attributes: Mapping[str, Any], props: Mapping[str, Any]
) -> None:
    name = str(props["FunctionName"])
    arn = name if name.startswith("arn:") else f"arn:aws:lambda:{a.region}:{a.account}:function:{name}"
    principal = str(props["Principal"])
    statement: dict[str, Any] = {
        "Sid": ref,
        "Effect": "Allow",
        "Principal": {"Service": principal} if principal.endswith(".amazonaws.com") else {"AWS": principal},
        "Action": str(props["Action"]),
        "Resource": arn,
    }
    condition: dict[str, Any] = {}
    if props.get("SourceArn"):
        condition["ArnLike"] = {"aws:SourceArn": str(props["SourceArn"])}
    if props.get("SourceAccount"):
        condition["StringEquals"] = {"aws:SourceAccount": str(props["SourceAccount"])}
    if condition:
        statement["Condition"] = condition
    a.add_resource_policy(":".join(arn.split(":")[:7]), {"Version": "2012-10-17", "Statement": [statement]}, source)


def _bus_policy(a: Authority, source: str, ref: str, attributes: Mapping[str, Any], props: Mapping[str, Any]) -> None:
    bus = str(props.get("EventBusName") or "default")
    arn = bus if bus.startswith("arn:") else f"arn:aws:events:{a.region}:{a.account}:event-bus/{bus}"
    if "Policy" in props:
        a.add_resource_policy(arn, props["Policy"], source)
    else:
        statement = {"Sid": props.get("StatementId"), **dict(props["Statement"])}
        a.add_resource_policy(arn, {"Version": "2012-10-17", "Statement": [statement]}, source)


def _logs_policy(a: Authority, source: str, ref: str, attributes: Mapping[str, Any], props: Mapping[str, Any]) -> None:
    a.add_resource_policy("logs", props["PolicyDocument"], source)


def _key(a: Authority, source: str, ref: str, attributes: Mapping[str, Any], props: Mapping[str, Any]) -> None:
    arn = str(attributes["Arn"])
    a.keys[arn] = Key(arn, ref, a._policy(props.get("KeyPolicy") or _default_key_policy(a.account), source))
    a.key_names.update({arn: arn, ref: arn})


def _default_key_policy(account: str) -> dict[str, Any]:
    return {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"AWS": f"arn:aws:iam::{account}:root"}, "Action": "kms:*"}],
    }


def _alias(a: Authority, source: str, ref: str, attributes: Mapping[str, Any], props: Mapping[str, Any]) -> None:
    target = a.key_arn(str(props["TargetKeyId"]))
    if target is not None:
        alias = str(props["AliasName"])
        a.key_names[alias] = target
        a.key_names[f"arn:aws:kms:{a.region}:{a.account}:{alias}"] = target


def _encrypted(*path: str) -> Reader:
    def read(a: Authority, source: str, ref: str, attributes: Mapping[str, Any], props: Mapping[str, Any]) -> None:
        value: Any = props
        for part in path:
            value = value.get(part) if isinstance(value, Mapping) else None
        if value:
            a.encrypted_by[_arn_of(a, attributes, ref)] = str(value)

    return read


def _arn_of(a: Authority, attributes: Mapping[str, Any], ref: str) -> str:
    arn = str(attributes.get("Arn") or attributes.get("TopicArn") or ref)
    return arn.removesuffix(":*")  # a log group's Arn attribute ends in ":*"; KMS sees the group's ARN


def _queue(a: Authority, source: str, ref: str, attributes: Mapping[str, Any], props: Mapping[str, Any]) -> None:
    a.queues[ref] = str(attributes["Arn"])
    if props.get("KmsMasterKeyId"):
        a.encrypted_by[str(attributes["Arn"])] = str(props["KmsMasterKeyId"])


def _bucket(a: Authority, source: str, ref: str, attributes: Mapping[str, Any], props: Mapping[str, Any]) -> None:
    for rule in (props.get("BucketEncryption") or {}).get("ServerSideEncryptionConfiguration", []):
        default = rule.get("ServerSideEncryptionByDefault") or {}
        if default.get("SSEAlgorithm") in ("aws:kms", "aws:kms:dsse") and default.get("KMSMasterKeyID"):
            a.encrypted_by[str(attributes["Arn"])] = str(default["KMSMasterKeyID"])


def _secret(a: Authority, source: str, ref: str, attributes: Mapping[str, Any], props: Mapping[str, Any]) -> None:
    arn = str(attributes["Arn"])
    a.secrets[arn] = arn
    if props.get("Name"):
        a.secrets[str(props["Name"])] = arn
    if props.get("KmsKeyId"):
        a.encrypted_by[arn] = str(props["KmsKeyId"])


def _email_identity(
    a: Authority, source: str, ref: str, attributes: Mapping[str, Any], props: Mapping[str, Any]
) -> None:
    a.email_identities.add(str(props["EmailIdentity"]))


def _function(a: Authority, source: str, ref: str, attributes: Mapping[str, Any], props: Mapping[str, Any]) -> None:
    a.function_roles[ref] = str(props["Role"])
    a.function_logs[ref] = str((props.get("LoggingConfig") or {}).get("LogGroup") or f"/aws/lambda/{ref}")


def _state_machine(
    a: Authority, source: str, ref: str, attributes: Mapping[str, Any], props: Mapping[str, Any]
) -> None:
    arn = str(attributes.get("Arn") or ref)
    a.machine_roles[arn] = str(props["RoleArn"])
    encryption = props.get("EncryptionConfiguration") or {}
    if encryption.get("Type") == "CUSTOMER_MANAGED_KMS_KEY" and encryption.get("KmsKeyId"):
        a.encrypted_by[arn] = str(encryption["KmsKeyId"])


_READERS: Final[dict[str, Reader]] = {
    "AWS::IAM::Role": _role,
    "AWS::IAM::Policy": _policy,
    "AWS::IAM::ManagedPolicy": _managed_policy,
    "AWS::SQS::QueuePolicy": _queue_policy,
    "AWS::SNS::TopicPolicy": _topic_policy,
    "AWS::S3::BucketPolicy": _bucket_policy,
    "AWS::Lambda::Permission": _lambda_permission,
    "AWS::Events::EventBusPolicy": _bus_policy,
    "AWS::Logs::ResourcePolicy": _logs_policy,
    "AWS::KMS::Key": _key,
    "AWS::KMS::Alias": _alias,
    "AWS::SQS::Queue": _queue,
    "AWS::SNS::Topic": _encrypted("KmsMasterKeyId"),
    "AWS::DynamoDB::Table": _encrypted("SSESpecification", "KMSMasterKeyId"),
    "AWS::S3::Bucket": _bucket,
    "AWS::SecretsManager::Secret": _secret,
    "AWS::Events::EventBus": _encrypted("KmsKeyIdentifier"),
    "AWS::Logs::LogGroup": _encrypted("KmsKeyId"),
    "AWS::SES::EmailIdentity": _email_identity,
    "AWS::Lambda::Function": _function,
    "AWS::StepFunctions::StateMachine": _state_machine,
}
