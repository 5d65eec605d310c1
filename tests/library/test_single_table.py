"""SingleTable's grants: each names the table, its indexes and its key, with the actions DynamoDB authorizes."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk.assertions import Template

from constructs_lib import GlobalIndex, SingleTable


def _granted(grant: str) -> set[str]:
    stack = Stack(App(), "Grants")
    key = kms.Key(stack, "Key", enable_key_rotation=True)
    table = SingleTable(stack, "Table", encryption_key=key, indexes=[GlobalIndex("ByOwner", "owner", "S", "at", "N")])
    role = iam.Role(stack, "Writer", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    getattr(table, grant)(role)
    policies = Template.from_stack(stack).find_resources("AWS::IAM::Policy")
    actions: set[str] = set()
    for policy in policies.values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            listed: Any = statement["Action"]
            actions.update([listed] if isinstance(listed, str) else listed)
    return actions


@pytest.mark.parametrize("grant", ["grant_write_data", "grant_read_write_data"])
def test_a_writer_may_condition_check_in_a_transaction(grant: str) -> None:
    # DynamoDB authorizes each item of TransactWriteItems as its own action: a ConditionCheck item
    # is dynamodb:ConditionCheckItem, which a writer without it is refused on AWS.
    assert {
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:DeleteItem",
        "dynamodb:ConditionCheckItem",
    } <= _granted(grant)


def test_a_reader_may_not_write() -> None:
    granted = _granted("grant_read_data")
    assert not granted & {"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem"}
