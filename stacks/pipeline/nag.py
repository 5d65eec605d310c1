"""cdk-nag IAM5 findings of the policies CDK Pipelines writes, acknowledged by rule, each with its reason.

CDK Pipelines creates a role per CodeBuild step, one for the pipeline and one per action, and
grants them what its steps need; their wildcards (artifact objects, action variants, a project's
own log streams) are CDK's, not ours. :func:`acknowledge_wildcards` finds every IAM5 finding of
every policy below a construct the way cdk-nag does (:func:`wildcard_findings`) and acknowledges
it with the reason of the first :class:`Rule` that matches the policy's path and the finding. A
finding no rule explains raises :class:`UnexplainedFinding` at construction, so a wildcard CDK adds
in a later release is read and explained before it is accepted, never waved through.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from aws_cdk import Acknowledgment, Stack, Validations
from aws_cdk import aws_iam as iam
from constructs import Construct


class UnexplainedFinding(LookupError):
    """A wildcard in a policy that no rule gives a reason for."""


@dataclass(frozen=True)
class Rule:
    """Findings matching ``finding`` (a regular expression) on policies whose path matches ``path``."""

    finding: str
    reason: str
    path: str = ".*"

    def matches(self, policy_path: str, finding: str) -> bool:
        return re.fullmatch(self.path, policy_path) is not None and re.fullmatch(self.finding, finding) is not None


def flatten(reference: Any) -> str:
    """A resource as cdk-nag prints it: ``<Logical.Attr>`` for GetAtt, ``<Logical>`` for Ref, joins joined."""
    if reference is None:
        return ""
    if isinstance(reference, str):
        return reference.replace("${", "<").replace("}", ">")
    if isinstance(reference, dict):
        if "Fn::Join" in reference:
            delimiter, items = reference["Fn::Join"]
            return str(delimiter).join(flatten(item) for item in items)
        if "Fn::Sub" in reference:
            return flatten(reference["Fn::Sub"])
        if "Fn::GetAtt" in reference:
            resource, attribute = reference["Fn::GetAtt"]
            return f"<{flatten(resource)}.{flatten(attribute)}>"
        if "Fn::ImportValue" in reference:
            return flatten(reference["Fn::ImportValue"])
        if "Ref" in reference:
            return f"<{flatten(reference['Ref'])}>"
    return json.dumps(reference, separators=(",", ":"))


def wildcard_findings(document: Any) -> list[str]:
    """The IAM5 findings of a resolved policy document: ``Action::<action>``, ``Resource::<resource>``."""
    found: dict[str, None] = {}
    for statement in document.get("Statement", []) if isinstance(document, dict) else []:
        if statement.get("Effect") != "Allow":
            continue
        for action in _as_list(statement.get("Action")):
            if isinstance(action, str) and "*" in action:
                found[f"Action::{action}"] = None
        for resource in _as_list(statement.get("Resource")):
            flat = flatten(resource)
            if "*" in flat:
                found[f"Resource::{flat}"] = None
    return list(found)


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _policies(scope: Construct) -> Iterator[iam.CfnPolicy]:
    for construct in scope.node.find_all():
        if isinstance(construct, iam.CfnPolicy):
            yield construct


def acknowledge_wildcards(scope: Construct, rules: Sequence[Rule]) -> int:
    """Acknowledge every IAM5 finding of the policies below ``scope`` with its rule's reason.

    Returns how many findings were acknowledged. Raises :class:`UnexplainedFinding` naming the
    policy and the finding when no rule matches one.
    """
    count = 0
    for policy in _policies(scope):
        stack = Stack.of(policy)
        path = policy.node.path
        document = stack.resolve(policy.policy_document)
        validations = Validations.of(policy)
        for finding in wildcard_findings(document):
            rule = next((r for r in rules if r.matches(path, finding)), None)
            if rule is None:
                raise UnexplainedFinding(f"{path}: AwsSolutions-IAM5[{finding}] has no rule that explains it")
            validations.acknowledge(Acknowledgment(id=f"AwsSolutions-IAM5[{finding}]", reason=rule.reason))
            count += 1
    return count
