"""The analytics records, searchable: an OpenSearch Serverless collection fed by a delivery stream of its own.

A stage turns it on with ``analytics_search.enabled`` (stacks/search_config.py). The stream
router then writes every analytics record twice: to the analytics bucket's stream, as always,
and to this stream, which indexes it into the collection. Documents the collection refuses land,
encrypted, in the analytics bucket under ``search-failed/``. docs/events.md says what it costs.

Why TIMESERIES and not SEARCH: the records are append-only events, written once, never updated
by id and read newest first (what happened today, this week); a time-series collection keeps the
recent data hot and the rest in cheaper warm storage, where a search collection keeps everything
hot for low-latency lookups the analytics never make; and only a time-series collection takes a
data lifecycle policy, which deletes the index's documents when the analytics bucket expires the
same records.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnResource, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kinesisfirehose as firehose
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_opensearchserverless as aoss
from aws_cdk import aws_s3 as s3
from constructs import Construct

from constructs_lib.nag_findings import acknowledge_policy, kms_grant_findings, resource_finding
from stacks.config import StageConfig
from stacks.functions import log_retention
from stacks.search_config import AnalyticsSearchConfig
from stacks.storage_stack import StorageStack

#: Where documents the collection refused land in the analytics bucket (GZIP, KMS).
FAILED_PREFIX = "search-failed/"
#: The router's variable that names this stream (unset: the stage has no search collection).
STREAM_VARIABLE = "SEARCH_STREAM_NAME"
#: What the delivery role may do in the index, and nothing else: create it on first write, keep
#: its mapping current as new fields appear, and write documents.
INDEX_PERMISSIONS = ("aoss:CreateIndex", "aoss:DescribeIndex", "aoss:UpdateIndex", "aoss:WriteDocument")
#: What Firehose needs to put its network interfaces into the stage's subnets (Firehose's VpcConfiguration).
VPC_DELIVERY_ACTIONS = (
    "ec2:CreateNetworkInterface",
    "ec2:CreateNetworkInterfacePermission",
    "ec2:DeleteNetworkInterface",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeSubnets",
    "ec2:DescribeVpcAttribute",
    "ec2:DescribeVpcs",
)


class AnalyticsSearch(Construct):
    """A TIMESERIES collection, its three policies, and the delivery stream that indexes into it.

    Example::

        search = AnalyticsSearch(self, "AnalyticsSearch", name="mangaassist-dev", settings=config.analytics_search,
                                 backup_bucket=analytics_bucket, encryption_key=data_key,
                                 stream_encryption_key=events_key, log_retention=logs.RetentionDays.ONE_WEEK)
        search.add_producer(router_function)

    Args:
        name: the collection's name, and its policies' (3-32 lowercase letters, digits, '-'). Required.
        settings: the stage's ``analytics_search`` block (index, network, buffering, retries). Required.
        backup_bucket: where refused documents land, under ``search-failed/``. Required.
        encryption_key: customer key of the collection (its encryption policy), of the backed-up
            documents and of the delivery log group. Required.
        stream_encryption_key: customer key of the stream's buffer (server-side encryption). Required.
        log_retention: retention of the delivery log group. Required.
        retention_days: how long the index keeps a document (its lifecycle policy; deleted within
            48 hours or 10% of that after, whichever is longer). Defaults to 90 days.
        removal_policy: what deleting the stack does to the collection. Defaults to DESTROY.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        name: str,
        settings: AnalyticsSearchConfig,
        backup_bucket: s3.IBucket,
        encryption_key: kms.IKey,
        stream_encryption_key: kms.IKey,
        log_retention: logs.RetentionDays,
        retention_days: int = 90,
        removal_policy: RemovalPolicy = RemovalPolicy.DESTROY,
    ) -> None:
        super().__init__(scope, construct_id)
        self.settings = settings
        self.encryption_policy, self.network_policy = self._security_policies(name, encryption_key)
        self.collection = aoss.CfnCollection(
            self,
            "Collection",
            name=name,
            type="TIMESERIES",
            description="MangaAssist analytics records (session, turn, summary, handoff changes)",
            standby_replicas="ENABLED" if settings.standby_replicas else "DISABLED",
        )
        self.collection.node.add_dependency(self.encryption_policy)
        self.collection.node.add_dependency(self.network_policy)
        self.collection.apply_removal_policy(removal_policy)

        self.role = iam.Role(
            self,
            "DeliveryRole",
            assumed_by=iam.ServicePrincipal("firehose.amazonaws.com"),
            description="The analytics search stream: writes the index, backs up refused documents, logs",
        )
        self.access_policy = self._access_policy(name)
        # As long as the analytics bucket keeps the same records, and no longer.
        self.lifecycle_policy = aoss.CfnLifecyclePolicy(
            self,
            "LifecyclePolicy",
            name=name,
            type="retention",
            description="Index documents are deleted after the analytics bucket's expiration",
            policy=Stack.of(self).to_json_string(
                {
                    "Rules": [
                        {
                            "ResourceType": "index",
                            "Resource": [f"index/{name}/{settings.index}"],
                            "MinIndexRetention": f"{retention_days}d",
                        }
                    ]
                }
            ),
        )
        self.log_group = logs.LogGroup(
            self,
            "LogGroup",
            retention=log_retention,
            encryption_key=encryption_key,
            removal_policy=RemovalPolicy.DESTROY,
        )
        self._grant(backup_bucket)
        self.delivery_stream = self._delivery_stream(backup_bucket, encryption_key, stream_encryption_key)
        self._acknowledge(backup_bucket)

    def _security_policies(
        self, name: str, encryption_key: kms.IKey
    ) -> tuple[aoss.CfnSecurityPolicy, aoss.CfnSecurityPolicy]:
        """The encryption policy (the stage's customer key) and the network policy of the collection."""
        settings = self.settings
        stack = Stack.of(self)
        collection_rule = {"ResourceType": "collection", "Resource": [f"collection/{name}"]}
        encryption = aoss.CfnSecurityPolicy(
            self,
            "EncryptionPolicy",
            name=name,
            type="encryption",
            description="The analytics collection, encrypted with the stage's customer key",
            policy=stack.to_json_string(
                {"Rules": [collection_rule], "AWSOwnedKey": False, "KmsARN": encryption_key.key_arn}
            ),
        )
        network = aoss.CfnSecurityPolicy(
            self,
            "NetworkPolicy",
            name=name,
            type="network",
            description=(
                "Public networks (IAM and the data-access policy still apply)"
                if settings.public_access
                else "Only through the stage's OpenSearch Serverless VPC endpoint"
            ),
            policy=stack.to_json_string([_network_rule(name, settings)]),
        )
        return encryption, network

    def _access_policy(self, name: str) -> aoss.CfnAccessPolicy:
        """The data-access policy: the delivery role, and only to write the one index."""
        stack, settings = Stack.of(self), self.settings
        return aoss.CfnAccessPolicy(
            self,
            "AccessPolicy",
            name=name,
            type="data",
            description="Only the delivery stream's role, and only to write the analytics index",
            policy=stack.to_json_string(
                [
                    {
                        "Rules": [
                            {
                                "ResourceType": "index",
                                "Resource": [f"index/{name}/{settings.index}"],
                                "Permission": list(INDEX_PERMISSIONS),
                            }
                        ],
                        "Principal": [self.role.role_arn],
                    }
                ]
            ),
        )

    def _grant(self, bucket: s3.IBucket) -> None:
        """The delivery role's grants: the collection's data plane, the backup prefix, the log group, the VPC."""
        self.role.add_to_policy(
            iam.PolicyStatement(actions=["aoss:APIAccessAll"], resources=[self.collection.attr_arn])
        )
        bucket.grant_put(self.role, f"{FAILED_PREFIX}*")
        bucket.grant_read(self.role, f"{FAILED_PREFIX}*")
        self.log_group.grant_write(self.role)
        if self.settings.private:
            self.role.add_to_policy(iam.PolicyStatement(actions=list(VPC_DELIVERY_ACTIONS), resources=["*"]))

    def _delivery_stream(
        self, bucket: s3.IBucket, encryption_key: kms.IKey, stream_key: kms.IKey
    ) -> firehose.CfnDeliveryStream:
        settings, role_arn = self.settings, self.role.role_arn
        stream = firehose.CfnDeliveryStream(
            self,
            "DeliveryStream",
            delivery_stream_type="DirectPut",
            delivery_stream_encryption_configuration_input={
                "keyType": "CUSTOMER_MANAGED_CMK",
                "keyArn": stream_key.key_arn,
            },
            amazon_open_search_serverless_destination_configuration={
                "collectionEndpoint": self.collection.attr_collection_endpoint,
                "indexName": settings.index,
                "roleArn": role_arn,
                "bufferingHints": {"intervalInSeconds": settings.buffer_seconds, "sizeInMBs": settings.buffer_mb},
                "retryOptions": {"durationInSeconds": settings.retry_seconds},
                "s3BackupMode": "FailedDocumentsOnly",
                "s3Configuration": {
                    "bucketArn": bucket.bucket_arn,
                    "roleArn": role_arn,
                    "prefix": FAILED_PREFIX,
                    "compressionFormat": "GZIP",
                    "encryptionConfiguration": {"kmsEncryptionConfig": {"awskmsKeyArn": encryption_key.key_arn}},
                    "cloudWatchLoggingOptions": self._log_stream("BackupLogStream"),
                },
                "cloudWatchLoggingOptions": self._log_stream("DeliveryLogStream"),
                **(
                    {
                        "vpcConfiguration": {
                            "roleArn": role_arn,
                            "subnetIds": list(settings.subnet_ids),
                            "securityGroupIds": list(settings.security_group_ids),
                        }
                    }
                    if settings.private
                    else {}
                ),
            },
        )
        # Firehose checks its access when it creates the stream: the role's grants and the
        # collection's data-access policy must be in place first.
        policy = self.role.node.find_child("DefaultPolicy").node.default_child
        for dependency in (policy, self.access_policy):
            if isinstance(dependency, CfnResource):
                stream.node.add_dependency(dependency)
        return stream

    def _log_stream(self, construct_id: str) -> dict[str, Any]:
        log_stream = logs.LogStream(self, construct_id, log_group=self.log_group)
        return {
            "enabled": True,
            "logGroupName": self.log_group.log_group_name,
            "logStreamName": log_stream.log_stream_name,
        }

    def _acknowledge(self, bucket: s3.IBucket) -> None:
        s3_reason = (
            "CDK's S3 grants for the Firehose backup: Firehose lists, reads back and aborts the multipart "
            "uploads it writes, and only under the refused-documents prefix of this one bucket."
        )
        findings = {
            **kms_grant_findings("the backed-up documents"),
            "Action::s3:Abort*": s3_reason,
            "Action::s3:GetBucket*": s3_reason,
            "Action::s3:GetObject*": s3_reason,
            "Action::s3:List*": s3_reason,
            resource_finding(self, bucket.bucket_arn, f"/{FAILED_PREFIX}*", owner=bucket): s3_reason,
        }
        if self.settings.private:
            findings["Resource::*"] = (
                "Firehose's VPC delivery: the EC2 describe actions have no resource-level permissions, and "
                "the network interfaces Firehose creates do not exist before it creates them."
            )
        acknowledge_policy(self.role, findings)

    @property
    def delivery_stream_name(self) -> str:
        return self.delivery_stream.ref

    def grant_put_records(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let a principal call PutRecord/PutRecordBatch on the stream."""
        return iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["firehose:PutRecord", "firehose:PutRecordBatch"],
            resource_arns=[self.delivery_stream.attr_arn],
        )

    def add_producer(self, function: lambda_.Function) -> None:
        """Tell ``function`` the stream's name (``SEARCH_STREAM_NAME``) and let it put records."""
        function.add_environment(STREAM_VARIABLE, self.delivery_stream_name)
        self.grant_put_records(function)


def _network_rule(name: str, settings: AnalyticsSearchConfig) -> dict[str, Any]:
    """The network policy's one rule: the collection's API and Dashboards, public or through one VPC endpoint."""
    rule: dict[str, Any] = {
        "Rules": [
            {"ResourceType": "collection", "Resource": [f"collection/{name}"]},
            {"ResourceType": "dashboard", "Resource": [f"collection/{name}"]},
        ],
        "AllowFromPublic": settings.public_access,
    }
    if not settings.public_access:
        rule["SourceVPCEs"] = [settings.vpc_endpoint_id]
    return rule


def compose_analytics_search(
    scope: Construct,
    config: StageConfig,
    *,
    storage: StorageStack,
    stream_encryption_key: kms.IKey,
    producer: lambda_.Function,
) -> AnalyticsSearch | None:
    """The stage's search collection fed by ``producer``, when ``analytics_search.enabled``; else nothing at all."""
    if not config.analytics_search.enabled:
        return None
    search = AnalyticsSearch(
        scope,
        "AnalyticsSearch",
        name=f"mangaassist-{config.name}",
        settings=config.analytics_search,
        backup_bucket=storage.analytics.bucket,
        encryption_key=storage.key,
        stream_encryption_key=stream_encryption_key,
        log_retention=log_retention(config.log_retention_days),
        retention_days=config.analytics_expiration_days,
        removal_policy=config.resource_removal_policy,
    )
    search.add_producer(producer)
    return search
