"""The delivery pipeline as cdk.json configures it: waves, steps, approval, notifications, and no broad role.

Read from the delivery stage ``make synth-all`` builds (tests/support/delivery.py): the pipeline
stack in the pipeline's account and the access stack in the dev account.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from aws_cdk.assertions import Match

from stacks.pipeline.pipeline import ARTIFACT_RETENTION_DAYS
from stacks.pipeline.roles import SMOKE_USER_POOL_ACTIONS
from tests.support.delivery import SynthesizedDelivery, default_delivery

ROOT = Path(__file__).resolve().parents[2]
BOOTSTRAP_ROLE = re.compile(r"cdk-hnb659fds-(deploy|file-publishing|image-publishing|lookup)-role-")
#: Actions a statement on every resource ("*") may grant: reads, and running the pipeline's own builds.
STAR_ACTIONS = {
    "cloudformation:DescribeStacks",
    "s3:ListBucket",
    "codebuild:BatchGetBuilds",
    "codebuild:StartBuild",
    "codebuild:StopBuild",
}


@pytest.fixture(scope="module")
def delivery() -> SynthesizedDelivery:
    return default_delivery()


@pytest.fixture(scope="module")
def pipeline(delivery: SynthesizedDelivery) -> dict[str, Any]:
    return delivery.templates["Pipeline"]


def _resources(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {lid: r for lid, r in template["Resources"].items() if r["Type"] == kind}


def _stages(template: dict[str, Any]) -> list[dict[str, Any]]:
    (code_pipeline,) = _resources(template, "AWS::CodePipeline::Pipeline").values()
    return code_pipeline["Properties"]["Stages"]


def _stage(template: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return next(s["Actions"] for s in _stages(template) if s["Name"] == name)


def _buildspec(template: dict[str, Any], action: dict[str, Any]) -> dict[str, Any]:
    """The buildspec of the CodeBuild project a pipeline action runs."""
    project_id = action["Configuration"]["ProjectName"]["Ref"]
    return json.loads(template["Resources"][project_id]["Properties"]["Source"]["BuildSpec"])


def _action(actions: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(a for a in actions if a["Name"] == name)


def _deploys(actions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [a for a in actions if a["ActionTypeId"]["Category"] == "Deploy"]


def _statements(template: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (lid, statement)
        for lid, policy in _resources(template, "AWS::IAM::Policy").items()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _text(value: Any) -> str:
    """A resource ARN with its intrinsics flattened, for matching (partition/account refs kept as names)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        return "".join(_text(part) for part in value["Fn::Join"][1])
    if isinstance(value, dict) and "Ref" in value:
        return "${" + value["Ref"] + "}"
    if isinstance(value, dict) and "Fn::Sub" in value:
        return _text(value["Fn::Sub"])
    return json.dumps(value)


def _role_statements(template: dict[str, Any], action_name: str, stage_name: str) -> list[dict[str, Any]]:
    """The statements of the role of the CodeBuild project behind an action."""
    action = _action(_stage(template, stage_name), action_name)
    project = template["Resources"][action["Configuration"]["ProjectName"]["Ref"]]
    role_id = project["Properties"]["ServiceRole"]["Fn::GetAtt"][0]
    return [
        statement
        for policy in _resources(template, "AWS::IAM::Policy").values()
        if {"Ref": role_id} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


# --- waves and steps ---------------------------------------------------------------------------------


def test_waves_run_source_synth_self_update_assets_then_dev_then_prod(pipeline: dict[str, Any]) -> None:
    assert [s["Name"] for s in _stages(pipeline)] == [
        "Source",
        "Build",
        "UpdatePipeline",
        "Assets",
        "MangaAssist-dev",
        "MangaAssist-prod",
    ]


def test_source_is_the_configured_connection_repository_and_branch(delivery: SynthesizedDelivery) -> None:
    (source,) = _stage(delivery.templates["Pipeline"], "Source")
    assert source["ActionTypeId"] == {
        "Category": "Source",
        "Owner": "AWS",
        "Provider": "CodeStarSourceConnection",
        "Version": "1",
    }
    assert source["Configuration"]["ConnectionArn"] == delivery.config.connection_arn
    assert source["Configuration"]["FullRepositoryId"] == "mangaassist/backend"
    assert source["Configuration"]["BranchName"] == "main"


def test_synth_installs_as_the_readme_does_then_runs_make_test_then_synthesizes_every_stage(
    pipeline: dict[str, Any],
) -> None:
    # Given the synth step
    (synth,) = _stage(pipeline, "Build")
    spec = _buildspec(pipeline, synth)

    # Then it installs the pinned dependencies with make, as the README's commands do, tests, synthesizes
    assert spec["phases"]["install"]["commands"] == ["make install"]
    assert spec["phases"]["build"]["commands"] == ["make test", "make synth-pipeline"]
    assert spec["artifacts"]["base-directory"] == "cdk.out"
    # And make synth-pipeline synthesizes dev, prod and the pipeline itself (so it can update itself)
    makefile = (ROOT / "Makefile").read_text()
    assert "PIPELINE_APP := -c stage=dev,prod -c with_pipeline=true" in makefile
    recipe = makefile.split("\nsynth-pipeline:", 1)[1].split("\n\n", 1)[0]
    assert "$(CDK) synth $(CDK_FLAGS) $(PIPELINE_APP) -o cdk.out" in recipe
    assert "tools.validation_report cdk.out" in recipe  # the CLI exits 0 on cdk-nag findings


def test_make_synth_all_includes_the_delivery_stage_so_cdk_nag_cfn_lint_and_checkov_cover_it() -> None:
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\nsynth-all:", 1)[1].split("\n\n", 1)[0]
    assert "$(CDK) synth $(CDK_FLAGS) $(PIPELINE_APP) -o cdk.out.all" in recipe


def test_every_build_runs_node_22_and_python_311_on_ubuntu_standard_8(delivery: SynthesizedDelivery) -> None:
    projects = _resources(delivery.templates["Pipeline"], "AWS::CodeBuild::Project")
    assert len(projects) == 6  # synth, self-update, assets, dev smoke, prod preflight, prod smoke
    for lid, project in projects.items():
        environment = project["Properties"]["Environment"]
        assert environment["Image"] == "aws/codebuild/standard:8.0", lid
        assert environment["PrivilegedMode"] is False, lid
        buildspec = project["Properties"]["Source"]["BuildSpec"]
        # The asset step reads its buildspec from a file of the cloud assembly
        spec = (
            yaml.safe_load((delivery.outdir / buildspec).read_text())
            if buildspec.endswith(".yaml")
            else json.loads(buildspec)
        )
        assert spec["phases"]["install"]["runtime-versions"] == {"nodejs": "22", "python": "3.11"}, lid


def test_self_update_deploys_the_pipeline_stack_with_the_pinned_cdk_cli(pipeline: dict[str, Any]) -> None:
    # Given the CLI version package.json pins for make synth/deploy
    pinned = json.loads((ROOT / "package.json").read_text())["devDependencies"]["aws-cdk"]

    # When the self-mutation step runs
    (self_mutate,) = _stage(pipeline, "UpdatePipeline")
    spec = _buildspec(pipeline, self_mutate)

    # Then it installs that CLI and deploys this very stack from the synthesized assembly
    assert spec["phases"]["install"]["commands"] == [f"npm install -g aws-cdk@{pinned}"]
    assert spec["phases"]["build"]["commands"] == [
        "cdk -a assembly-MangaAssist-delivery deploy MangaAssist-delivery/Pipeline --require-approval=never --verbose"
    ]


def test_dev_deploys_its_four_stacks_then_runs_the_smoke_story(pipeline: dict[str, Any]) -> None:
    # Given the dev wave
    actions = _stage(pipeline, "MangaAssist-dev")

    # Then its four stacks deploy in dependency order, each as a change set created then executed
    deploys = _deploys(actions)
    assert [a["Name"] for a in deploys] == [
        f"{part}.{step}" for part in ("Storage", "Events", "Orchestration", "Api") for step in ("Prepare", "Deploy")
    ]
    assert [a["Configuration"]["StackName"] for a in deploys[1::2]] == [
        f"MangaAssist-dev-{part}" for part in ("Storage", "Events", "Orchestration", "Api")
    ]
    # And the smoke story runs against them once all are deployed
    smoke = _action(actions, "Smoke")
    assert smoke["RunOrder"] > max(a["RunOrder"] for a in deploys)
    assert _buildspec(pipeline, smoke)["phases"]["build"]["commands"][-1] == "AWS_PROFILE=target make smoke STAGE=dev"
    # And dev waits for nobody
    assert not [a for a in actions if a["ActionTypeId"]["Category"] == "Approval"]


def test_prod_waits_for_the_approval_then_the_preflight_before_any_stack(pipeline: dict[str, Any]) -> None:
    # Given the prod wave
    actions = _stage(pipeline, "MangaAssist-prod")
    deploys = _deploys(actions)
    approval = _action(actions, "PromoteToProduction")
    preflight = _action(actions, "Preflight")

    # Then a person approves first, the preflight runs next, and only then does any stack change
    assert approval["ActionTypeId"] == {"Category": "Approval", "Owner": "AWS", "Provider": "Manual", "Version": "1"}
    assert approval["RunOrder"] == 1
    assert approval["RunOrder"] < preflight["RunOrder"] < min(a["RunOrder"] for a in deploys)
    assert _buildspec(pipeline, preflight)["phases"]["build"]["commands"][-1] == (
        "AWS_PROFILE=target make preflight STAGE=prod REGION=eu-west-1"
    )
    # And the preflight reads the synthesized assembly (the bootstrap version the stage asks for)
    assert len(preflight["InputArtifacts"]) == 2
    # And the four stacks deploy, then the read-only smoke runs
    assert [a["Configuration"]["StackName"] for a in deploys[1::2]] == [
        f"MangaAssist-prod-{part}" for part in ("Storage", "Events", "Orchestration", "Api")
    ]
    smoke = _action(actions, "ReadOnlySmoke")
    assert smoke["RunOrder"] > max(a["RunOrder"] for a in deploys)
    assert _buildspec(pipeline, smoke)["phases"]["build"]["commands"][-1] == (
        "AWS_PROFILE=target make smoke STAGE=prod READ_ONLY=1"
    )


def test_the_only_approval_guards_production(pipeline: dict[str, Any]) -> None:
    approvals = [
        (stage["Name"], action["Name"])
        for stage in _stages(pipeline)
        for action in stage["Actions"]
        if action["ActionTypeId"]["Category"] == "Approval"
    ]
    assert approvals == [("MangaAssist-prod", "PromoteToProduction")]


def test_same_account_stages_deploy_with_the_bootstrap_deploy_role(pipeline: dict[str, Any]) -> None:
    # cdk.json pins no account for dev or prod: both deploy into the pipeline's account and region
    for stage in ("MangaAssist-dev", "MangaAssist-prod"):
        for action in _deploys(_stage(pipeline, stage)):
            assert _text(action["RoleArn"]) == (
                "arn:${AWS::Partition}:iam::${AWS::AccountId}:role/cdk-hnb659fds-deploy-role-${AWS::AccountId}-${AWS::Region}"
            )
            if action["Configuration"]["ActionMode"] == "CHANGE_SET_REPLACE":
                assert _text(action["Configuration"]["RoleArn"]) == (
                    "arn:${AWS::Partition}:iam::${AWS::AccountId}:role/"
                    "cdk-hnb659fds-cfn-exec-role-${AWS::AccountId}-${AWS::Region}"
                )


# --- who may do what ---------------------------------------------------------------------------------


def test_verification_steps_assume_exactly_their_one_role(pipeline: dict[str, Any]) -> None:
    expected = {
        ("MangaAssist-dev", "Smoke"): "arn:aws:iam::123456789012:role/MangaAssist-dev-pipeline-smoke",
        (
            "MangaAssist-prod",
            "Preflight",
        ): "arn:aws:iam::123456789012:role/cdk-hnb659fds-lookup-role-123456789012-eu-west-1",
        (
            "MangaAssist-prod",
            "ReadOnlySmoke",
        ): "arn:aws:iam::123456789012:role/cdk-hnb659fds-lookup-role-123456789012-eu-west-1",
    }
    for (stage, action), role in expected.items():
        assumed = [
            _text(resource)
            for statement in _role_statements(pipeline, action, stage)
            if "sts:AssumeRole" in _as_list(statement["Action"])
            for resource in _as_list(statement["Resource"])
        ]
        assert assumed == [role], (stage, action)


def test_no_role_is_broader_than_the_bootstrap_roles_need(pipeline: dict[str, Any]) -> None:
    # No managed policy (AdministratorAccess, PowerUserAccess...) on any role of the pipeline
    for lid, role in _resources(pipeline, "AWS::IAM::Role").items():
        assert "ManagedPolicyArns" not in role["Properties"], lid
    for lid, statement in _statements(pipeline):
        actions = _as_list(statement["Action"])
        resources = [_text(r) for r in _as_list(statement["Resource"])]
        # No action wildcard over a whole service, nor any IAM or Organizations write
        assert not [a for a in actions if a == "*" or a.endswith(":*")], (lid, actions)
        assert not [a for a in actions if a.startswith(("iam:", "organizations:"))], (lid, actions)
        # "*" only for reads and for running the pipeline's own builds
        if "*" in resources:
            assert set(actions) <= STAR_ACTIONS, (lid, actions)
        # A role in another account or of CDK's: only the bootstrap roles, or the dev smoke role
        if "sts:AssumeRole" in actions:
            for resource in resources:
                if resource.startswith("{"):  # a role of this stack (GetAtt)
                    continue
                if resource == "arn:*:iam::123456789012:role/*":
                    tags = statement["Condition"]["ForAnyValue:StringEquals"]["iam:ResourceTag/aws-cdk:bootstrap-role"]
                    assert set(tags) == {"deploy", "file-publishing", "image-publishing"}, lid
                    continue
                assert BOOTSTRAP_ROLE.search(resource) or resource.endswith(":role/MangaAssist-dev-pipeline-smoke"), (
                    lid,
                    resource,
                )


def test_asset_role_may_assume_only_the_file_publishing_role(pipeline: dict[str, Any]) -> None:
    (policy,) = [p for lid, p in _resources(pipeline, "AWS::IAM::Policy").items() if "AssetsFileRole" in lid]
    assumed = [
        _text(resource)
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if "sts:AssumeRole" in _as_list(statement["Action"])
        for resource in _as_list(statement["Resource"])
    ]
    assert assumed == [
        "arn:${AWS::Partition}:iam::${AWS::AccountId}:role/cdk-hnb659fds-file-publishing-role-${AWS::AccountId}-${AWS::Region}"
    ]


def test_smoke_role_reads_the_dev_stage_and_manages_only_its_tagged_user_pool(delivery: SynthesizedDelivery) -> None:
    access = delivery.template("Access")
    access.has_resource_properties(
        "AWS::IAM::Role",
        {
            "RoleName": "MangaAssist-dev-pipeline-smoke",
            "AssumeRolePolicyDocument": {
                "Statement": [
                    {
                        "Action": "sts:AssumeRole",
                        "Effect": "Allow",
                        "Principal": {"AWS": Match.string_like_regexp("123456789012")},
                    }
                ]
            },
            "MaxSessionDuration": 3600,
        },
    )
    access.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "PolicyDocument": {
                "Statement": [
                    {
                        "Sid": "ReadStageOutputs",
                        "Action": "cloudformation:DescribeStacks",
                        "Effect": "Allow",
                        "Resource": "arn:aws:cloudformation:eu-west-1:123456789012:stack/MangaAssist-dev-*",
                    },
                    {
                        "Sid": "ManageStageTestUsers",
                        "Action": sorted(SMOKE_USER_POOL_ACTIONS),
                        "Effect": "Allow",
                        "Resource": "arn:aws:cognito-idp:eu-west-1:123456789012:userpool/*",
                        "Condition": {
                            "StringEquals": {"aws:ResourceTag/Project": "MangaAssist", "aws:ResourceTag/Stage": "dev"}
                        },
                    },
                ]
            },
            "Roles": [Match.any_value()],
        },
    )


def test_pull_request_role_trusts_only_this_repositorys_pull_requests_and_may_only_look_up(
    delivery: SynthesizedDelivery,
) -> None:
    access = delivery.template("Access")
    access.has_resource_properties(
        "AWS::IAM::OIDCProvider",
        {"Url": "https://token.actions.githubusercontent.com", "ClientIdList": ["sts.amazonaws.com"]},
    )
    access.has_resource_properties(
        "AWS::IAM::Role",
        {
            "RoleName": "MangaAssist-pull-request-diff",
            "AssumeRolePolicyDocument": {
                "Statement": [
                    {
                        "Action": "sts:AssumeRoleWithWebIdentity",
                        "Effect": "Allow",
                        "Principal": {"Federated": Match.any_value()},
                        "Condition": {
                            "StringEquals": {
                                "token.actions.githubusercontent.com:aud": "sts.amazonaws.com",
                                "token.actions.githubusercontent.com:sub": "repo:mangaassist/backend:pull_request",
                            }
                        },
                    }
                ]
            },
        },
    )
    access.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "PolicyDocument": {
                "Statement": [
                    {
                        "Sid": "AssumeCdkLookupRole",
                        "Action": "sts:AssumeRole",
                        "Effect": "Allow",
                        "Resource": "arn:aws:iam::123456789012:role/cdk-hnb659fds-lookup-role-123456789012-eu-west-1",
                    }
                ]
            }
        },
    )
    assert len(_resources(delivery.templates["Access"], "AWS::IAM::Role")) == 2


# --- what the pipeline keeps and tells --------------------------------------------------------------


def test_failures_and_waiting_approvals_reach_the_operations_topic(delivery: SynthesizedDelivery) -> None:
    pipeline = delivery.template("Pipeline")
    pipeline.has_resource_properties(
        "AWS::CodeStarNotifications::NotificationRule",
        {
            "EventTypeIds": [
                "codepipeline-pipeline-pipeline-execution-failed",
                "codepipeline-pipeline-manual-approval-needed",
            ],
            "Resource": Match.any_value(),
            "Targets": [{"TargetAddress": {"Ref": Match.string_like_regexp("OpsTopic")}, "TargetType": "SNS"}],
        },
    )
    pipeline.has_resource_properties(
        "AWS::SNS::Topic", {"KmsMasterKeyId": {"Fn::GetAtt": [Match.string_like_regexp("PipelineKey"), "Arn"]}}
    )
    pipeline.has_resource_properties(
        "AWS::SNS::Subscription", {"Protocol": "email", "Endpoint": "oncall@mangaassist.example"}
    )
    pipeline.has_resource_properties(
        "AWS::SNS::TopicPolicy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Action": "sns:Publish",
                                "Principal": {"Service": "codestar-notifications.amazonaws.com"},
                            }
                        )
                    ]
                )
            }
        },
    )
    pipeline.has_resource_properties(
        "AWS::KMS::Key",
        {
            "EnableKeyRotation": True,
            "KeyPolicy": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Sid": "AllowCodeStarNotifications",
                                "Principal": {"Service": "codestar-notifications.amazonaws.com"},
                                "Action": ["kms:Decrypt", "kms:GenerateDataKey*"],
                                "Condition": {"StringEquals": {"kms:ViaService": "sns.eu-west-1.amazonaws.com"}},
                            }
                        )
                    ]
                )
            },
        },
    )


def test_artifacts_are_encrypted_with_the_pipeline_key_logged_and_expire(delivery: SynthesizedDelivery) -> None:
    pipeline = delivery.template("Pipeline")
    key = {"Fn::GetAtt": [Match.string_like_regexp("PipelineKey"), "Arn"]}
    pipeline.has_resource_properties(
        "AWS::S3::Bucket",
        {
            "BucketEncryption": {
                "ServerSideEncryptionConfiguration": [
                    {"ServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": key}}
                ]
            },
            "LoggingConfiguration": {"DestinationBucketName": Match.any_value(), "LogFilePrefix": "Artifacts/"},
            "VersioningConfiguration": {"Status": "Enabled"},
            "LifecycleConfiguration": {
                "Rules": [Match.object_like({"ExpirationInDays": ARTIFACT_RETENTION_DAYS, "Status": "Enabled"})]
            },
        },
    )
    assert ARTIFACT_RETENTION_DAYS == 90
    # And every build encrypts what it writes with the same key, not S3's default key
    for lid, project in _resources(delivery.templates["Pipeline"], "AWS::CodeBuild::Project").items():
        key_id, attribute = project["Properties"]["EncryptionKey"]["Fn::GetAtt"]
        assert (key_id.startswith("PipelineKey"), attribute) == (True, "Arn"), lid


def test_stacks_are_named_and_placed_as_the_config_says(delivery: SynthesizedDelivery) -> None:
    assert delivery.stage.pipeline.stack_name == "MangaAssist-delivery-Pipeline"
    assert delivery.stage.access.stack_name == "MangaAssist-delivery-Access"
    assert (delivery.stage.pipeline.account, delivery.stage.pipeline.region) == ("123456789012", "eu-west-1")
    # dev pins no account in cdk.json, so its access stack goes to the pipeline's account
    assert (delivery.stage.access.account, delivery.stage.access.region) == ("123456789012", "eu-west-1")


@pytest.mark.slow
def test_delivery_stage_passes_cdk_nag() -> None:
    # The delivery stage is built with the AwsSolutions checks on; a finding fails its synthesis
    try:
        delivery = default_delivery()
    except Exception as error:
        findings = [line.strip() for line in str(error).splitlines() if "MangaAssist-delivery/" in line]
        pytest.fail("cdk-nag findings:\n" + "\n".join(findings or [str(error)]))
    assert delivery.stage.node.try_find_child("Pipeline") is not None
