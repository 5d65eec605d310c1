"""The single table's AWS Backup plan: a daily rule, a vault on the stage's key, a vault lock, an optional copy."""

from __future__ import annotations

from aws_cdk import Acknowledgment, Duration, RemovalPolicy, Validations
from aws_cdk import aws_backup as backup
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from stacks.backup_config import BackupConfig

#: When the daily backup starts (UTC): the quiet hours of the chat's European and American customers.
DAILY_SCHEDULE = events.Schedule.cron(minute="0", hour="3")
#: The AWS managed policies of AWS Backup's service role: take recovery points, and restore them.
BACKUP_POLICIES = (
    "service-role/AWSBackupServiceRolePolicyForBackup",
    "service-role/AWSBackupServiceRolePolicyForRestores",
)


class TableBackup(Construct):
    """Daily recovery points of ``table`` in a vault of their own, as the stage's ``backup`` block says.

    The vault is encrypted with ``encryption_key`` and retained with its recovery points when the
    stack goes (AWS Backup refuses to delete a vault that holds any; docs/operations.md says how
    to empty one). With ``vault_lock`` the vault is locked in compliance mode: no recovery point
    can be deleted before ``retention_days``, not even by the account's root, once
    ``lock_changeable_days`` have passed.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        stage: str,
        config: BackupConfig,
        table: dynamodb.ITable,
        encryption_key: kms.IKey,
    ) -> None:
        super().__init__(scope, construct_id)
        retention = Duration.days(config.retention_days)
        self.vault: backup.BackupVault = backup.BackupVault(
            self,
            "Vault",
            backup_vault_name=f"MangaAssist-{stage}-sessions",
            encryption_key=encryption_key,
            lock_configuration=backup.LockConfiguration(
                min_retention=retention, changeable_for=Duration.days(config.lock_changeable_days)
            )
            if config.vault_lock
            else None,
            removal_policy=RemovalPolicy.RETAIN,
        )
        copies = (
            [
                backup.BackupPlanCopyActionProps(
                    destination_backup_vault=backup.BackupVault.from_backup_vault_arn(
                        self, "CopyVault", config.copy_vault_arn
                    ),
                    delete_after=Duration.days(config.copy_days),
                )
            ]
            if config.copy_vault_arn is not None
            else None
        )
        self.plan: backup.BackupPlan = backup.BackupPlan(
            self,
            "Plan",
            backup_plan_name=f"MangaAssist-{stage}-sessions",
            backup_plan_rules=[
                backup.BackupPlanRule(
                    rule_name="Daily",
                    backup_vault=self.vault,
                    schedule_expression=DAILY_SCHEDULE,
                    start_window=Duration.hours(1),
                    completion_window=Duration.hours(8),
                    delete_after=retention,
                    copy_actions=copies,
                )
            ],
        )
        self.role: iam.Role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("backup.amazonaws.com"),
            description=f"AWS Backup: the MangaAssist {stage} sessions table's recovery points and restores",
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(name) for name in BACKUP_POLICIES],
        )
        validations = Validations.of(self.role)
        for name in BACKUP_POLICIES:
            validations.acknowledge(
                Acknowledgment(
                    id=f"AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{name}]",
                    reason="AWS Backup's service role: AWS documents these managed policies as the permissions the "
                    "service needs to take and restore a table's recovery points; the role trusts only AWS Backup "
                    "and the plan's selection names only this table.",
                )
            )
        self.plan.add_selection(
            "Table",
            backup_selection_name="sessions-table",
            resources=[backup.BackupResource.from_arn(table.table_arn)],
            role=self.role,
            disable_default_backup_policy=True,
        )
