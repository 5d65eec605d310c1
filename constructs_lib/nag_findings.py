"""Helpers to acknowledge cdk-nag IAM5 findings of CDK's own grants, one finding at a time.

cdk-nag 3 matches an acknowledgement by its exact id, e.g.
``AwsSolutions-IAM5[Resource::<Table1234.Arn>/index/*]``; :func:`resource_finding` builds the
``Resource::...`` part from the ARN token the way cdk-nag prints it, so no id is copied by hand.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping

from aws_cdk import Acknowledgment, Stack, Validations
from aws_cdk import aws_iam as iam
from constructs import Construct, IConstruct


def resource_finding(scope: Construct, arn: str, suffix: str = "", *, owner: IConstruct | None = None) -> str:
    """The ``Resource::...`` part of an IAM5 finding for ``arn + suffix``, as cdk-nag prints it.

    ``owner`` is the construct the ARN belongs to. When it lives in another stack, the
    template holds a weak cross-stack reference (``Fn::GetStackOutput`` of the output CDK
    publishes in the owner's stack, with the ``defaultCrossStackReferences: weak`` context), and so does
    the finding; the output's logical id is computed the way CDK computes it.
    """
    consumer = Stack.of(scope)
    producer = Stack.of(owner) if owner is not None else consumer
    if producer.node.path != consumer.node.path:
        reference = producer.resolve(arn)
        output_id = _unique_id(["Publish", "Output" + json.dumps(reference, separators=(",", ":"))])
        body = json.dumps(
            {
                "Fn::GetStackOutput": {
                    "StackName": producer.stack_name,
                    "Region": producer.resolve(producer.region),
                    "OutputName": output_id,
                }
            },
            separators=(",", ":"),
        )
        return f"Resource::{body}{suffix}"
    resolved = consumer.resolve(arn)
    if isinstance(resolved, str):
        body = resolved
    elif isinstance(resolved, dict) and "Fn::GetAtt" in resolved:
        logical_id, attribute = resolved["Fn::GetAtt"]
        body = f"<{logical_id}.{attribute}>"
    elif isinstance(resolved, dict) and "Ref" in resolved:
        body = f"<{resolved['Ref']}>"
    else:
        body = json.dumps(resolved, separators=(",", ":"))
    return f"Resource::{body}{suffix}"


def _unique_id(components: list[str]) -> str:
    """CDK's makeUniqueId for components without Default/Resource/duplicates: human part + md5 hash."""
    digest = hashlib.md5("/".join(components).encode(), usedforsecurity=False).hexdigest()[:8].upper()
    human = "".join(re.sub(r"[^A-Za-z0-9]", "", c) for c in components)[:240]
    return human + digest


def acknowledge_policy(role: iam.IRole, findings: Mapping[str, str]) -> None:
    """Acknowledge IAM5 findings (``Action::...``/``Resource::...`` -> reason) on a role's default policy."""
    policy = role.node.try_find_child("DefaultPolicy")
    if policy is None:
        raise LookupError(f"{role.node.path} has no default policy to acknowledge findings on")
    validations = Validations.of(policy)  # once: every jsii call is a round trip to Node
    for finding, reason in findings.items():
        validations.acknowledge(Acknowledgment(id=f"AwsSolutions-IAM5[{finding}]", reason=reason))


#: CDK's KMS grants for an encrypted queue, topic, bucket or stream name these two wildcards.
KMS_GRANT_ACTIONS = ("Action::kms:GenerateDataKey*", "Action::kms:ReEncrypt*")


def acknowledge_grant(grantee: iam.IGrantable, findings: Mapping[str, str]) -> None:
    """Acknowledge IAM5 findings a grant just caused, on the grantee's role, when it is a role of this app.

    For a grant method of a library construct: it acknowledges the wildcards of its own grant
    beside the grant, so a caller never copies a finding id. A grantee that is no role defined in
    the app (an imported role, a service principal) has no default policy here; nothing is done.
    """
    principal = grantee.grant_principal
    if isinstance(principal, iam.Role) and principal.node.try_find_child("DefaultPolicy") is not None:
        acknowledge_policy(principal, findings)


def kms_grant_findings(what: str) -> dict[str, str]:
    """The two KMS findings of CDK's grant on the customer key of ``what`` (one key, named by its ARN)."""
    reason = (
        f"CDK's KMS grant for {what}: GenerateDataKey*/ReEncrypt* on that one customer key, named by its ARN; "
        "no resource wildcard."
    )
    return dict.fromkeys(KMS_GRANT_ACTIONS, reason)
