"""stacks/pipeline/nag.py: CDK Pipelines' wildcards are acknowledged by rule, and an unexplained one stops synth."""

from __future__ import annotations

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_iam as iam

from stacks.pipeline.nag import Rule, UnexplainedFinding, acknowledge_wildcards, flatten, wildcard_findings


def test_flatten_prints_references_as_cdk_nag_does() -> None:
    assert flatten({"Fn::GetAtt": ["Bucket1234", "Arn"]}) == "<Bucket1234.Arn>"
    assert flatten({"Fn::Join": ["", [{"Fn::GetAtt": ["Bucket1234", "Arn"]}, "/*"]]}) == "<Bucket1234.Arn>/*"
    assert flatten({"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":logs:*"]]}) == "arn:<AWS::Partition>:logs:*"
    assert flatten({"Fn::Sub": "arn:${AWS::Partition}:iam::*"}) == "arn:<AWS::Partition>:iam::*"


def test_findings_are_wildcard_actions_and_resources_of_allow_statements_only() -> None:
    document = {
        "Statement": [
            {"Effect": "Allow", "Action": ["s3:GetObject*", "s3:PutObject"], "Resource": "arn:aws:s3:::b/*"},
            {"Effect": "Allow", "Action": "sts:AssumeRole", "Resource": "arn:aws:iam::111111111111:role/exact"},
            {"Effect": "Deny", "Action": "*", "Resource": "*"},
        ]
    }
    assert wildcard_findings(document) == ["Action::s3:GetObject*", "Resource::arn:aws:s3:::b/*"]


def _stack_with_policy(resource: str) -> Stack:
    stack = Stack(App(), "Probe")
    role = iam.Role(stack, "Role", assumed_by=iam.ServicePrincipal("codebuild.amazonaws.com"))
    role.add_to_policy(iam.PolicyStatement(actions=["codebuild:StartBuild"], resources=[resource]))
    return stack


def test_fails_on_a_wildcard_no_rule_explains() -> None:
    # Given a policy on every resource and rules that explain only another path's
    stack = _stack_with_policy("*")
    rules = [Rule(r"Resource::\*", "explained elsewhere", path=r".*/Assets/FileRole/.*")]
    # When / Then the acknowledgement refuses it, naming the policy and the finding
    with pytest.raises(
        UnexplainedFinding, match=r"Probe/Role/DefaultPolicy/Resource: AwsSolutions-IAM5\[Resource::\*\]"
    ):
        acknowledge_wildcards(stack, rules)


def test_acknowledges_each_finding_a_rule_explains() -> None:
    stack = _stack_with_policy("*")
    assert acknowledge_wildcards(stack, [Rule(r"Resource::\*", "runs its own builds")]) == 1
