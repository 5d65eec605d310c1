"""Key-policy hardening every EncryptionKey applies: sources of service principals, grants only for AWS resources.

CDK's own constructs write key-policy statements the key's owner does not see: a state machine
with logging gives ``delivery.logs.amazonaws.com`` ``kms:Decrypt*`` without a condition, an
event archive lets ``events.amazonaws.com`` describe the key unconditioned, a secret gives the
account ``kms:CreateGrant`` through Secrets Manager. ``ServiceStatementGuard`` conditions such
statements when the app is synthesized, whoever wrote them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jsii
from aws_cdk import IAspect, Stack
from aws_cdk import aws_kms as kms
from constructs import IConstruct

#: The condition key that is true only when an AWS service creates the grant for one of its resources.
GRANT_FOR_AWS_RESOURCE = "kms:GrantIsForAWSResource"
#: Condition keys that tie a service principal to the resources (or the account) it acts for.
SOURCE_KEYS = ("aws:sourcearn", "aws:sourceaccount", "kms:encryptioncontext:")

#: ARN resource parts (after ``arn:<partition>:<service>:<region>:<account>:``) of the resources a
#: service principal uses a key for, named ``<prefix>-...`` (CloudFormation's generated names start
#: with the stack name, and the app's explicit names with the stage's prefix).
_SOURCE_RESOURCES: dict[str, tuple[str, ...]] = {
    "sns": ("{prefix}-*",),
    "sqs": ("{prefix}-*",),
    "events": ("rule/{prefix}-*", "event-bus/{prefix}-*"),
    "firehose": ("deliverystream/{prefix}-*",),
    # CloudFormation names a state machine after its logical id alone: any state machine of the account.
    "states": ("stateMachine:*",),
    "cloudwatch": ("alarm:{prefix}-*",),
}


def source_arn_patterns(stack: Stack, service: str, prefix: str | None, log_groups: Sequence[str]) -> list[str]:
    """The ARNs (``ArnLike`` patterns) of the resources ``service`` may use the key for.

    Without a prefix: anything of the service in this account and region (the account is the limit).
    """
    head = f"arn:{stack.partition}:{service}:{stack.region}:{stack.account}:"
    if service == "logs":
        groups = [f"{prefix}-*", *log_groups] if prefix is not None else ["*"]
        return [f"{head}log-group:{group}" if group != "*" else f"{head}*" for group in groups]
    if prefix is None:
        return [f"{head}*"]
    return [head + part.format(prefix=prefix) for part in _SOURCE_RESOURCES.get(service, ("*{prefix}-*",))]


@jsii.implements(IAspect)
class ServiceStatementGuard:
    """Conditions the statements CDK adds to a key policy that the app's own statements would not pass.

    An ``Allow`` for a service principal with no source condition is limited to this account
    (``delivery.logs.amazonaws.com`` also to its log deliveries); an ``Allow`` of
    ``kms:CreateGrant`` gets ``kms:GrantIsForAWSResource``. Applied through property overrides, so
    the statements CDK renders keep their tokens.
    """

    def visit(self, node: IConstruct) -> None:
        if not isinstance(node, kms.CfnKey):
            return
        stack = Stack.of(node)
        policy = stack.resolve(node.key_policy)
        if not isinstance(policy, dict):
            return
        for index, statement in enumerate(policy.get("Statement", [])):
            for key, value in _missing_conditions(stack, statement).items():
                node.add_property_override(f"KeyPolicy.Statement.{index}.Condition.{key}", value)


def _missing_conditions(stack: Stack, statement: dict[str, Any]) -> dict[str, Any]:
    """``<operator>.<key>`` -> value for each condition the statement lacks."""
    if statement.get("Effect") != "Allow":
        return {}
    conditions: dict[str, Any] = statement.get("Condition") or {}
    keys = {key.lower() for block in conditions.values() for key in block}
    missing: dict[str, Any] = {}
    actions = statement.get("Action")
    actions = [actions] if isinstance(actions, str) else list(actions or [])
    if "kms:CreateGrant" in actions and GRANT_FOR_AWS_RESOURCE.lower() not in keys:
        missing[f"Bool.{GRANT_FOR_AWS_RESOURCE}"] = "true"
    principal = statement.get("Principal")
    service = principal.get("Service") if isinstance(principal, dict) else None
    if service is not None and not any(key.startswith(SOURCE_KEYS) for key in keys):
        missing["StringEquals.aws:SourceAccount"] = stack.account
        if service == "delivery.logs.amazonaws.com":
            # Log delivery (a state machine's logs) acts for the account's log groups.
            missing["ArnLike.aws:SourceArn"] = f"arn:{stack.partition}:logs:{stack.region}:{stack.account}:*"
    return missing
