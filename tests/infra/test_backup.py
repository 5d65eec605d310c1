"""The table's AWS Backup plan: per-stage retention, the vault on the stage key, the lock, the copy; its settings."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kms as kms
from aws_cdk.assertions import Match, Template

from embedded.synth import SynthesizedStage, cdk_context, stage_config
from stacks.backup import BACKUP_POLICIES, TableBackup
from stacks.backup_config import BackupConfig
from stacks.config import ConfigError, load_stage_config
from stacks.storage_stack import StorageStack

COPY_VAULT = "arn:aws:backup:eu-central-1:210987654321:backup-vault:mangaassist-copies"


def _one(template: Template, type_: str) -> tuple[str, dict[str, Any]]:
    found = template.find_resources(type_)
    assert len(found) == 1, f"expected one {type_}, found {sorted(found)}"
    return next(iter(found.items()))


@pytest.mark.parametrize(("stage", "days"), [("dev", 7), ("prod", 35)])
def test_a_daily_rule_keeps_recovery_points_for_the_stage_retention(
    dev: SynthesizedStage, prod: SynthesizedStage, stage: str, days: int
) -> None:
    template = {"dev": dev, "prod": prod}[stage].template("Storage")
    _, plan = _one(template, "AWS::Backup::BackupPlan")
    (rule,) = plan["Properties"]["BackupPlan"]["BackupPlanRule"]
    assert rule["ScheduleExpression"] == "cron(0 3 * * ? *)"
    assert rule["Lifecycle"] == {"DeleteAfterDays": days}
    vault_id, _ = _one(template, "AWS::Backup::BackupVault")
    assert rule["TargetBackupVault"] == {"Fn::GetAtt": [vault_id, "BackupVaultName"]}
    assert "CopyActions" not in rule  # no copy unless a stage names a destination vault


def test_the_vault_is_encrypted_with_the_data_key_and_outlives_the_stack(any_stage: SynthesizedStage) -> None:
    template = any_stage.template("Storage")
    _, vault = _one(template, "AWS::Backup::BackupVault")
    key_id, _ = _one(template, "AWS::KMS::Key")
    assert vault["Properties"]["EncryptionKeyArn"] == {"Fn::GetAtt": [key_id, "Arn"]}
    assert vault["DeletionPolicy"] == "Retain"


def test_only_prod_locks_its_vault_with_time_to_correct_a_mistake(
    dev: SynthesizedStage, prod: SynthesizedStage
) -> None:
    _, dev_vault = _one(dev.template("Storage"), "AWS::Backup::BackupVault")
    _, prod_vault = _one(prod.template("Storage"), "AWS::Backup::BackupVault")
    assert "LockConfiguration" not in dev_vault["Properties"]
    assert prod_vault["Properties"]["LockConfiguration"] == {"ChangeableForDays": 7, "MinRetentionDays": 35}


def test_the_selection_names_the_table_with_a_role_of_only_the_backup_and_restore_policies(
    any_stage: SynthesizedStage,
) -> None:
    template = any_stage.template("Storage")
    table_id, _ = _one(template, "AWS::DynamoDB::Table")
    _, selection = _one(template, "AWS::Backup::BackupSelection")
    spec = selection["Properties"]["BackupSelection"]
    assert spec["Resources"] == [{"Fn::GetAtt": [table_id, "Arn"]}]
    role_id = spec["IamRoleArn"]["Fn::GetAtt"][0]
    role = template.to_json()["Resources"][role_id]["Properties"]
    assert role["AssumeRolePolicyDocument"]["Statement"] == [
        {"Action": "sts:AssumeRole", "Effect": "Allow", "Principal": {"Service": "backup.amazonaws.com"}}
    ]
    names = [arn["Fn::Join"][1][-1].removeprefix(":iam::aws:policy/") for arn in role["ManagedPolicyArns"]]
    assert names == list(BACKUP_POLICIES)
    assert "Policies" not in role
    policies = template.find_resources("AWS::IAM::Policy", {"Properties": {"Roles": [{"Ref": role_id}]}})
    assert policies == {}


def test_a_copy_vault_adds_a_copy_action_with_its_own_retention() -> None:
    config = BackupConfig(retention_days=35, copy_vault_arn=COPY_VAULT, copy_retention_days=90)
    storage_like = Stack(App(), "T")
    key = kms.Key(storage_like, "Key")
    table = dynamodb.Table(
        storage_like, "Table", partition_key=dynamodb.Attribute(name="PK", type=dynamodb.AttributeType.STRING)
    )
    TableBackup(storage_like, "Backup", stage="test", config=config, table=table, encryption_key=key)
    template = Template.from_stack(storage_like)
    template.has_resource_properties(
        "AWS::Backup::BackupPlan",
        {
            "BackupPlan": {
                "BackupPlanRule": [
                    Match.object_like(
                        {
                            "CopyActions": [
                                {"DestinationBackupVaultArn": COPY_VAULT, "Lifecycle": {"DeleteAfterDays": 90}}
                            ]
                        }
                    )
                ]
            }
        },
    )


def test_a_stage_may_turn_the_plan_off() -> None:
    config = stage_config("dev")
    app = App(context=cdk_context())
    stack = StorageStack(app, "Storage", config=replace(config, backup=BackupConfig(enabled=False)))
    assert stack.backup is None
    assert Template.from_stack(stack).find_resources("AWS::Backup::BackupPlan") == {}


# ---------------------------------------------------------------------------- settings


@pytest.fixture(scope="module")
def stages() -> dict[str, Any]:
    return cdk_context()["stages"]


def _load(stages: dict[str, Any], block: Any, **stage_keys: Any) -> BackupConfig:
    entry = {**stages["prod"], **stage_keys, "backup": block}
    return load_stage_config({**stages, "prod": entry}, "prod").backup


def test_the_stages_settings(stages: dict[str, Any]) -> None:
    dev, prod = (load_stage_config(stages, name).backup for name in ("dev", "prod"))
    assert (dev.enabled, dev.retention_days, dev.vault_lock, dev.copy_vault_arn) == (True, 7, False, None)
    assert (prod.enabled, prod.retention_days, prod.vault_lock, prod.lock_changeable_days) == (True, 35, True, 7)
    assert prod.copy_vault_arn is None


def test_a_copy_to_another_region_or_account_is_accepted(stages: dict[str, Any]) -> None:
    env = {"account": "123456789012", "region": "eu-west-1"}
    config = _load(stages, {"copy_vault_arn": COPY_VAULT}, **env)
    assert (config.copy_vault_arn, config.copy_days) == (COPY_VAULT, 7)
    other_account = "arn:aws:backup:eu-west-1:210987654321:backup-vault:copies"
    assert _load(stages, {"copy_vault_arn": other_account}, **env).copy_vault_arn == other_account


@pytest.mark.parametrize(
    ("block", "stage_keys", "message"),
    [
        ({"retention_days": 3}, {}, "backup.retention_days must be a whole number of days in 7..36500 (given 3)"),
        ({"retention_days": "35"}, {}, "backup.retention_days must be a whole number of days in 7..36500"),
        ({"retention_days": True}, {}, "backup.retention_days must be a whole number of days"),
        ({"lock_changeable_days": 1}, {}, "backup.lock_changeable_days must be a whole number of days in 3..36500"),
        ({"vault_lock": "yes"}, {}, "backup.vault_lock must be true or false"),
        ({"enabled": 1}, {}, "backup.enabled must be true or false"),
        ({"copy_vault_arn": "copies"}, {}, "backup.copy_vault_arn must be a backup vault ARN"),
        (
            {"copy_vault_arn": "arn:aws:s3:::bucket"},
            {"account": "123456789012", "region": "eu-west-1"},
            "backup.copy_vault_arn must be a backup vault ARN",
        ),
        (
            {"copy_vault_arn": "arn:aws:backup:eu-west-1:123456789012:backup-vault:copies"},
            {"account": "123456789012", "region": "eu-west-1"},
            "backup.copy_vault_arn is in the stage's own region eu-west-1 and account",
        ),
        ({"copy_vault_arn": COPY_VAULT}, {}, "backup.copy_vault_arn needs the stage's region"),
        ({"copy_retention_days": 30}, {}, "backup.copy_retention_days needs copy_vault_arn"),
        (
            {"copy_vault_arn": COPY_VAULT, "copy_retention_days": 2},
            {"account": "123456789012", "region": "eu-west-1"},
            "backup.copy_retention_days must be a whole number of days in 7..36500",
        ),
        ({"retention": 35}, {}, "unknown backup keys ['retention']"),
        ([], {}, "backup must be an object"),
    ],
)
def test_bad_settings_are_refused_clearly(
    stages: dict[str, Any], block: Any, stage_keys: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=r"^stage '?prod'?: ") as raised:
        _load(stages, block, **stage_keys)
    assert message in str(raised.value)
