"""The pipeline when dev and prod name accounts of their own: CDK's bootstrap roles there, the key shared with them.

Stand-in stages (one small stack each) replace the app's stages: what is checked here is how the
pipeline reaches other accounts, which does not depend on what the stages hold.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from aws_cdk import App, CfnWaitConditionHandle, Environment, Stack, Stage, Validations, pipelines

from embedded.synth import cdk_context
from stacks.pipeline.pipeline import DeliveryPipeline, TargetRole
from stacks.pipeline.roles import lookup_role_arn, smoke_role_name
from stacks.stage import nag_checks

PIPELINE, DEV, PROD, REGION = "111111111111", "222222222222", "333333333333", "eu-west-1"
CONNECTION = f"arn:aws:codeconnections:{REGION}:{PIPELINE}:connection/00000000-0000-0000-0000-000000000000"


class _StandIn(Stage):
    """A stage of one empty-handed stack in its own account, named as the app's stages are."""

    def __init__(self, scope: App, name: str, account: str) -> None:
        super().__init__(scope, f"MangaAssist-{name}", env=Environment(account=account, region=REGION))
        self.config = SimpleNamespace(name=name)
        CfnWaitConditionHandle(Stack(self, "Storage", stack_name=f"MangaAssist-{name}-Storage"), "Nothing")


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    # Given dev and prod in accounts of their own, and the pipeline in a third, with cdk-nag on
    app = App(context=cdk_context())  # cdk.json's feature flags
    dev, prod = _StandIn(app, "dev", DEV), _StandIn(app, "prod", PROD)
    delivery = Stage(app, "MangaAssist-delivery")
    Validations.of(delivery).add_plugins(*nag_checks(delivery))
    stack = Stack(delivery, "Pipeline", env=Environment(account=PIPELINE, region=REGION))
    DeliveryPipeline(
        stack,
        "Pipeline",
        source=pipelines.CodePipelineSource.connection("acme/backend", "main", connection_arn=CONNECTION),
        dev_stage=dev,  # type: ignore[arg-type]
        prod_stage=prod,  # type: ignore[arg-type]
        dev_smoke_role=TargetRole(f"arn:aws:iam::{DEV}:role/{smoke_role_name('dev')}", REGION),
        prod_lookup_role=TargetRole(lookup_role_arn(PROD, REGION, "aws"), REGION),
        alarm_email="oncall@example.com",
    )
    # When the app synthesizes (a cdk-nag finding would fail it here)
    app.synth()
    return delivery.synth().get_stack_artifact(stack.artifact_id).template  # type: ignore[no-any-return]


def _actions(template: dict[str, Any], stage: str) -> list[dict[str, Any]]:
    (pipeline,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::CodePipeline::Pipeline"]
    return next(s["Actions"] for s in pipeline["Properties"]["Stages"] if s["Name"] == stage)


def _flat(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        return "".join(_flat(v) for v in value["Fn::Join"][1])
    if isinstance(value, dict) and "Ref" in value:
        return "${" + value["Ref"] + "}"
    return json.dumps(value)


def test_each_stage_deploys_with_the_bootstrap_roles_of_its_own_account(template: dict[str, Any]) -> None:
    for stage, account in (("MangaAssist-dev", DEV), ("MangaAssist-prod", PROD)):
        deploys = [a for a in _actions(template, stage) if a["ActionTypeId"]["Category"] == "Deploy"]
        assert deploys, stage
        for action in deploys:
            assert _flat(action["RoleArn"]) == (
                f"arn:${{AWS::Partition}}:iam::{account}:role/cdk-hnb659fds-deploy-role-{account}-{REGION}"
            )
            if action["Configuration"]["ActionMode"] == "CHANGE_SET_REPLACE":
                assert _flat(action["Configuration"]["RoleArn"]) == (
                    f"arn:${{AWS::Partition}}:iam::{account}:role/cdk-hnb659fds-cfn-exec-role-{account}-{REGION}"
                )


def test_the_artifact_key_and_bucket_admit_the_deploy_roles_of_both_accounts(template: dict[str, Any]) -> None:
    (key,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::KMS::Key"]
    principals = {
        _flat(p)
        for statement in key["Properties"]["KeyPolicy"]["Statement"]
        if "kms:Decrypt" in statement["Action"]
        for p in (statement["Principal"].get("AWS") or [])
        if isinstance(statement["Principal"], dict)
        for p in (p if isinstance(p, list) else [p])
    }
    for account in (DEV, PROD):
        assert f"arn:${{AWS::Partition}}:iam::{account}:role/cdk-hnb659fds-deploy-role-{account}-{REGION}" in principals
    policies = [r for r in template["Resources"].values() if r["Type"] == "AWS::S3::BucketPolicy"]
    readers = json.dumps([p["Properties"]["PolicyDocument"] for p in policies])
    for account in (DEV, PROD):
        assert f":iam::{account}:role/cdk-hnb659fds-deploy-role-{account}-{REGION}" in readers


def test_verification_steps_reach_only_their_roles_in_the_stage_accounts(template: dict[str, Any]) -> None:
    environment = {
        action["Name"]: {
            v["Name"]: v["Value"]
            for v in template["Resources"][action["Configuration"]["ProjectName"]["Ref"]]["Properties"]["Environment"][
                "EnvironmentVariables"
            ]
        }
        for stage in ("MangaAssist-dev", "MangaAssist-prod")
        for action in _actions(template, stage)
        if action["ActionTypeId"]["Category"] == "Build"
    }
    lookup = f"arn:aws:iam::{PROD}:role/cdk-hnb659fds-lookup-role-{PROD}-{REGION}"
    assert environment == {
        "Smoke": {
            "TARGET_ROLE_ARN": f"arn:aws:iam::{DEV}:role/MangaAssist-dev-pipeline-smoke",
            "TARGET_REGION": REGION,
        },
        "Preflight": {"TARGET_ROLE_ARN": lookup, "TARGET_REGION": REGION},
        "ReadOnlySmoke": {"TARGET_ROLE_ARN": lookup, "TARGET_REGION": REGION},
    }
