"""StorageStack: the single table, its key, the buckets (archive, audit, analytics, query results, logs), the users."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from constructs import Construct

from constructs_lib import (
    AlarmTopic,
    EncryptionKey,
    GlobalIndex,
    HardenedUserPool,
    SecureBucket,
    ServiceAlarms,
    SingleTable,
)
from constructs_lib.web_acl import LOG_GROUP_PREFIX as WAF_LOG_GROUP_PREFIX
from contracts import schema
from stacks.backup import TableBackup
from stacks.config import StageConfig
from stacks.guardrail import ChatGuardrail, compose_guardrail
from stacks.identity import build_user_pool
from stacks.operations import watch_stack


def stage_prefix(config: StageConfig) -> str:
    """The prefix of the stage's stack names, so of every name CloudFormation generates in them."""
    return f"MangaAssist-{config.name}"


#: Days an Athena query result stays downloadable.
QUERY_RESULTS_EXPIRATION_DAYS = 30


class StorageStack(Stack):
    """State that outlives every other stack: it depends on nothing and everything depends on it."""

    def __init__(self, scope: Construct, construct_id: str, *, config: StageConfig, **kwargs: object) -> None:
        super().__init__(scope, construct_id, **kwargs)  # type: ignore[arg-type]
        self._build_table(config)
        self._build_buckets(config)
        #: The stage's own guardrail for its model calls (None unless ``guardrail.create``), under the data key.
        self.guardrail: ChatGuardrail | None = compose_guardrail(self, config, encryption_key=self.key)
        #: The stage's user pool (None when the stage names an external OIDC issuer instead).
        self.users: HardenedUserPool | None = (
            build_user_pool(self, config) if config.identity.provider == "cognito" else None
        )
        # Every alarm of the stage notifies this topic (created here: every stack depends on Storage).
        self.ops_topic: sns.ITopic = AlarmTopic(
            self, "OpsTopic", encryption_key=self.key, email=config.alarm_email
        ).topic
        self.alarms: ServiceAlarms = watch_stack(
            self, topic=self.ops_topic, prefix=f"MangaAssist-{config.name}-Storage"
        )
        self.alarms.watch_table(self.table, "SessionsTable")

    def _build_table(self, config: StageConfig) -> None:
        """The stage's customer key and the single table."""
        removal = config.resource_removal_policy
        self.data_key: EncryptionKey = EncryptionKey(
            self,
            "DataKey",
            description=f"MangaAssist {config.name}: sessions table, buckets, queues, topics, streams",
            service_principals=["sns", "events", "firehose", "logs", "states", "cloudwatch"],
            removal_policy=removal,
            pending_window=config.key_pending_window,
            # The services use the key only for the stage's resources, all named MangaAssist-<stage>-...,
            # and for the log groups whose names AWS prescribes: REST API execution logs, WAF logs.
            source_prefix=stage_prefix(config),
            log_group_patterns=[
                f"API-Gateway-Execution-Logs_*/{config.name}",
                f"{WAF_LOG_GROUP_PREFIX}{''.join(c for c in stage_prefix(config) if c.isalnum())}*",
            ],
        )
        self.key: kms.IKey = self.data_key.key

        #: The table construct: other stacks grant access through its ``grant_*`` methods.
        self.sessions: SingleTable = SingleTable(
            self,
            "SessionsTable",
            encryption_key=self.key,
            partition_key=schema.PARTITION_KEY,
            sort_key=schema.SORT_KEY,
            indexes=[
                GlobalIndex(i.name, i.partition_key, i.partition_type, i.sort_key, i.sort_type, i.include)
                for i in schema.GLOBAL_INDEXES
            ],
            ttl_attribute=schema.TTL_ATTRIBUTE,
            stream=dynamodb.StreamViewType.NEW_AND_OLD_IMAGES,
            point_in_time_recovery=config.point_in_time_recovery,
            deletion_protection=config.deletion_protection,
            removal_policy=removal,
        )
        self.table: dynamodb.ITable = self.sessions.table
        #: Daily recovery points of the table beyond point-in-time recovery (docs/operations.md).
        self.backup: TableBackup | None = (
            TableBackup(
                self, "Backup", stage=config.name, config=config.backup, table=self.table, encryption_key=self.key
            )
            if config.backup.enabled
            else None
        )

    def _build_buckets(self, config: StageConfig) -> None:
        """The access-log target, the archive, the audit trail, analytics and query results."""
        removal = config.resource_removal_policy
        disposable = config.disposable
        self.access_logs: SecureBucket = SecureBucket(
            self,
            "AccessLogsBucket",
            access_log_target=True,
            lifecycle_rules=[s3.LifecycleRule(id="ExpireAccessLogs", expiration=Duration.days(365))],
            removal_policy=removal,
            auto_delete_objects=disposable,
        )
        self.archive: SecureBucket = SecureBucket(
            self,
            "ArchiveBucket",
            encryption_key=self.key,
            server_access_logs=self.access_logs.bucket,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="ArchiveToColderStorage",
                    transitions=[
                        s3.Transition(
                            storage_class=s3.StorageClass.GLACIER_INSTANT_RETRIEVAL,
                            transition_after=Duration.days(config.archive_transition_days),
                        )
                    ],
                    noncurrent_version_expiration=Duration.days(30),
                    abort_incomplete_multipart_upload_after=Duration.days(7),
                )
            ],
            removal_policy=removal,
            auto_delete_objects=disposable,
        )
        self.audit: SecureBucket = self._audit_bucket(config)
        self.analytics: SecureBucket = SecureBucket(
            self,
            "AnalyticsBucket",
            encryption_key=self.key,
            server_access_logs=self.access_logs.bucket,
            # Versioned so an overwrite or a delete can be undone for a day; after that the
            # replaced version expires, and the retention limit of the analytics still holds.
            versioned=True,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="ExpireOldAnalytics",
                    expiration=Duration.days(config.analytics_expiration_days),
                    noncurrent_version_expiration=Duration.days(1),
                    abort_incomplete_multipart_upload_after=Duration.days(7),
                )
            ],
            removal_policy=removal,
            auto_delete_objects=disposable,
        )
        # Athena's query results: copies of what queries selected from the trail, kept only as
        # long as someone may still download them (the trail itself is the record).
        self.query_results: SecureBucket = SecureBucket(
            self,
            "QueryResultsBucket",
            encryption_key=self.key,
            server_access_logs=self.access_logs.bucket,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="ExpireQueryResults",
                    expiration=Duration.days(QUERY_RESULTS_EXPIRATION_DAYS),
                    noncurrent_version_expiration=Duration.days(1),
                    abort_incomplete_multipart_upload_after=Duration.days(1),
                )
            ],
            removal_policy=removal,
            auto_delete_objects=disposable,
        )

    def _audit_bucket(self, config: StageConfig) -> SecureBucket:
        """The audit trail's Object Lock bucket (append-only, never deleted with the stack)."""
        # The audit trail is never deleted with the stack: Object Lock makes it immutable and
        # its retention, not the stack's lifetime, decides when objects may go. Append-only: the
        # audit delivery stream's role is granted read-write by CDK's Firehose destination, and
        # no principal may delete (a delete marker would hide a record); only lifecycle expires.
        # Object Lock without a default retention: with one, S3 refuses uploads that carry no
        # Content-MD5 or x-amz-checksum-* header, and AWS does not document that Firehose sends
        # one. The Events stack's audit locker puts the stage's retention on each new object,
        # announced to it by the bucket's EventBridge events (docs/security.md, Audit trail).
        return SecureBucket(
            self,
            "AuditBucket",
            encryption_key=self.key,
            server_access_logs=self.access_logs.bucket,
            object_lock_enabled=True,
            event_bridge=True,
            append_only=True,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="ExpireAfterRetention",
                    expiration=Duration.days(config.audit_retention_days + 1),
                    noncurrent_version_expiration=Duration.days(1),
                    abort_incomplete_multipart_upload_after=Duration.days(7),
                )
            ],
            removal_policy=RemovalPolicy.RETAIN,
        )
