"""Every key policy of a stage: grants only for AWS resources, service principals tied to their sources."""

from __future__ import annotations

from collections.abc import Iterator
from fnmatch import fnmatchcase
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk.assertions import Template

from constructs_lib import EncryptionKey
from embedded.synth import SynthesizedStage

SOURCE_KEYS = ("aws:sourcearn", "aws:sourceaccount", "kms:encryptioncontext:")
GRANT_GUARD = {
    "Sid": "DenyGrantsNotForAwsResources",
    "Effect": "Deny",
    "Principal": {"AWS": "*"},
    "Action": "kms:CreateGrant",
    "Resource": "*",
    "Condition": {"BoolIfExists": {"kms:GrantIsForAWSResource": "false"}},
}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _condition_keys(statement: dict[str, Any]) -> set[str]:
    return {key.lower() for block in (statement.get("Condition") or {}).values() for key in block}


def _policies(template: dict[str, Any]) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    for logical_id, resource in template["Resources"].items():
        if resource["Type"] == "AWS::KMS::Key":
            yield logical_id, resource["Properties"]["KeyPolicy"]["Statement"]


def key_policy_problems(template: dict[str, Any]) -> list[str]:
    """Statements that let anyone create a grant not for an AWS resource, or a service act for any source."""
    problems = []
    for key, statements in _policies(template):
        guarded = GRANT_GUARD in statements
        for statement in statements:
            if statement["Effect"] != "Allow":
                continue
            where = f"{key} {statement.get('Sid') or statement['Principal']}"
            keys = _condition_keys(statement)
            grants = any(fnmatchcase("kms:CreateGrant", action) for action in _list(statement["Action"]))
            if grants and "kms:grantisforawsresource" not in keys and not guarded:
                problems.append(f"{where}: kms:CreateGrant without kms:GrantIsForAWSResource")
            principal = statement["Principal"]
            sourced = any(k.startswith(SOURCE_KEYS) for k in keys)
            if isinstance(principal, dict) and "Service" in principal and not sourced:
                problems.append(f"{where}: service principal without a source condition")
    return problems


def test_every_key_of_the_stage_passes(any_stage: SynthesizedStage) -> None:
    keys = [key for template in any_stage.templates.values() for key, _ in _policies(template)]
    assert len(keys) >= 5  # the data key, the events, queues and archive keys, the approval gate's ...
    for part, template in any_stage.templates.items():
        assert key_policy_problems(template) == [], part


def test_every_key_refuses_grants_that_are_not_for_an_aws_resource(any_stage: SynthesizedStage) -> None:
    for template in any_stage.templates.values():
        for key, statements in _policies(template):
            assert GRANT_GUARD in statements, key


def test_an_explicit_create_grant_carries_the_condition_itself(any_stage: SynthesizedStage) -> None:
    # The approval gate's secret lets the account create grants through Secrets Manager.
    statements = [
        statement
        for template in any_stage.templates.values()
        for _, policy in _policies(template)
        for statement in policy
        if statement["Effect"] == "Allow" and "kms:CreateGrant" in _list(statement["Action"])
    ]
    assert statements
    for statement in statements:
        assert statement["Condition"]["Bool"] == {"kms:GrantIsForAWSResource": "true"}


def _data_key_statements(stage: SynthesizedStage) -> dict[str, dict[str, Any]]:
    (statements,) = [policy for _, policy in _policies(stage.templates["Storage"])]
    named = {}
    for statement in statements:
        principal = next(iter(statement["Principal"].values()))
        named[statement.get("Sid") or (principal if isinstance(principal, str) else str(principal))] = statement
    return named


def _joined(value: Any) -> str:
    """An Fn::Join of literals and Refs as text, e.g. ``arn:${AWS::Partition}:sns:...``."""
    parts = value["Fn::Join"][1]
    return "".join(p if isinstance(p, str) else "${" + p["Ref"] + "}" for p in parts)


@pytest.mark.parametrize(
    ("sid", "resource"),
    [
        ("AllowSnsService", ":sns:${AWS::Region}:${AWS::AccountId}:MangaAssist-{stage}-*"),
        ("AllowEventsService", ":events:${AWS::Region}:${AWS::AccountId}:rule/MangaAssist-{stage}-*"),
        ("AllowFirehoseService", ":firehose:${AWS::Region}:${AWS::AccountId}:deliverystream/MangaAssist-{stage}-*"),
        ("AllowCloudwatchService", ":cloudwatch:${AWS::Region}:${AWS::AccountId}:alarm:MangaAssist-{stage}-*"),
    ],
)
def test_the_data_key_names_the_stage_resources_a_service_acts_for(
    any_stage: SynthesizedStage, sid: str, resource: str
) -> None:
    statement = _data_key_statements(any_stage)[sid]
    assert statement["Condition"]["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
    arns = [_joined(arn) for arn in statement["Condition"]["ArnLike"]["aws:SourceArn"]]
    assert "arn:${AWS::Partition}" + resource.replace("{stage}", any_stage.stage.config.name) in arns


def test_the_data_key_lets_cloudwatch_logs_encrypt_only_the_stage_log_groups(any_stage: SynthesizedStage) -> None:
    name = any_stage.stage.config.name
    statement = _data_key_statements(any_stage)["AllowLogsService"]
    groups = [_joined(arn) for arn in statement["Condition"]["ArnLike"]["kms:EncryptionContext:aws:logs:arn"]]
    head = "arn:${AWS::Partition}:logs:${AWS::Region}:${AWS::AccountId}:log-group:"
    assert groups == [
        f"{head}MangaAssist-{name}-*",
        f"{head}API-Gateway-Execution-Logs_*/{name}",
        f"{head}aws-waf-logs-MangaAssist{name}*",
    ]


def test_log_delivery_for_a_state_machine_is_limited_to_the_account(any_stage: SynthesizedStage) -> None:
    statement = _data_key_statements(any_stage)["delivery.logs.amazonaws.com"]
    assert statement["Action"] == "kms:Decrypt*"
    assert statement["Condition"]["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
    assert _joined(statement["Condition"]["ArnLike"]["aws:SourceArn"]) == (
        "arn:${AWS::Partition}:logs:${AWS::Region}:${AWS::AccountId}:*"
    )


def test_the_walker_catches_what_cdk_writes_without_the_guard() -> None:
    """A bare kms.Key with a logging state machine: the statements the guard exists for are found."""
    stack = Stack(App(), "Bare")
    key = kms.Key(stack, "Key")
    sfn.StateMachine(
        stack,
        "Machine",
        definition_body=sfn.DefinitionBody.from_chainable(sfn.Pass(stack, "Pass")),
        encryption_configuration=sfn.CustomerManagedEncryptionConfiguration(key),
        logs=sfn.LogOptions(destination=logs.LogGroup(stack, "Logs"), level=sfn.LogLevel.ALL),
    )
    problems = key_policy_problems(Template.from_stack(stack).to_json())
    assert len(problems) == 2, problems
    assert problems[0].endswith("kms:CreateGrant without kms:GrantIsForAWSResource")  # the account's kms:*
    assert problems[1].endswith("'delivery.logs.amazonaws.com'}: service principal without a source condition")


def test_an_encryption_key_with_the_same_state_machine_passes() -> None:
    stack = Stack(App(), "Guarded")
    key = EncryptionKey(stack, "Key", service_principals=["sns", "logs"], source_prefix="App-dev").key
    sfn.StateMachine(
        stack,
        "Machine",
        definition_body=sfn.DefinitionBody.from_chainable(sfn.Pass(stack, "Pass")),
        encryption_configuration=sfn.CustomerManagedEncryptionConfiguration(key),
        logs=sfn.LogOptions(destination=logs.LogGroup(stack, "Logs"), level=sfn.LogLevel.ALL),
    )
    assert key_policy_problems(Template.from_stack(stack).to_json()) == []
