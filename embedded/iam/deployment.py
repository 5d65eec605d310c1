"""What CloudFormation would refuse to create because a policy does not allow it.

Some services check a policy when a resource is created, not when it is used: Lambda refuses a
function whose role it cannot assume, Step Functions a state machine whose role it cannot
assume, CloudWatch Logs a log group whose KMS key it may not use. :func:`problems` finds each of
them in a deployed stage, so the embedded deployment fails where the real one would.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from embedded.cloudformation.deploy import DeployedStack
from embedded.iam.access import Access
from embedded.iam.guard import Guard
from embedded.iam.policy import ContextValue, decide_assume_role

#: The service that assumes the role of each resource type, and the role property.
_ASSUMED_BY: Final = {
    "AWS::Lambda::Function": ("lambda.amazonaws.com", "Role"),
    "AWS::StepFunctions::StateMachine": ("states.amazonaws.com", "RoleArn"),
}
#: What CloudWatch Logs does with a log group's key (CloudWatch Logs user guide, "Encrypt log data
#: in CloudWatch Logs using AWS KMS": the key policy statement for logs.<region>.amazonaws.com).
_LOGS_KMS_ACTIONS: Final = ("kms:Encrypt", "kms:Decrypt", "kms:ReEncryptFrom", "kms:GenerateDataKey", "kms:DescribeKey")


def problems(guard: Guard, stacks: Iterable[DeployedStack]) -> list[str]:
    """Every resource of ``stacks`` whose creation AWS would refuse, with the reason."""
    authority = guard.authority
    found: list[str] = []
    for stack in stacks:
        for resource in stack.resources.values():
            where = f"{stack.name}/{resource.logical_id} ({resource.type})"
            if resource.type in _ASSUMED_BY:
                service, prop = _ASSUMED_BY[resource.type]
                role = authority.role(str(resource.properties[prop]))
                # The service assumes the role on behalf of the resource: its ARN is the source.
                source: dict[str, ContextValue] = {
                    "aws:SourceAccount": authority.account,
                    "aws:SourceArn": str(resource.attributes["Arn"]),
                    "aws:SecureTransport": True,
                }
                decision = decide_assume_role(service, role.arn, role.trust, source)
                if not decision.allowed:
                    found.append(f"{where}: {service} cannot assume {role.arn}: {decision.reason}")
            if resource.type == "AWS::Logs::LogGroup" and resource.properties.get("KmsKeyId"):
                key = authority.key_arn(str(resource.properties["KmsKeyId"]))
                group = f"arn:aws:logs:{authority.region}:{authority.account}:log-group:{resource.ref}"
                context = {"kms:EncryptionContext:aws:logs:arn": group, "aws:SourceAccount": authority.account}
                service = f"logs.{authority.region}.amazonaws.com"
                for action in _LOGS_KMS_ACTIONS if key else ():
                    decision = authority.authorize_service(service, Access(action, str(key), context))
                    if not decision.allowed:
                        found.append(f"{where}: CloudWatch Logs may not use its key ({action}): {decision.reason}")
                        break
    return found
