"""A Firehose delivery stream into an S3 bucket: GZIP, date-partitioned, error prefix, KMS end to end."""

from __future__ import annotations

from aws_cdk import CfnMapping, Duration, RemovalPolicy, Size, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kinesisfirehose as firehose
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from constructs import Construct

from constructs_lib.nag_findings import acknowledge_policy, resource_finding
from constructs_lib.validation import PropErrors, is_unresolved

_CIDR_MAPPING = "@aws-cdk--aws-kinesisfirehose.CidrBlocks"  # the L2's id, "/" made "--"

#: Hive-style date partitions from the record's arrival time (no dynamic partitioning needed).
DATE_PARTITIONS = "year=!{timestamp:yyyy}/month=!{timestamp:MM}/day=!{timestamp:dd}/"


class S3DeliveryStream(Construct):
    """Direct-put Firehose stream that delivers GZIP'd objects under a date-partitioned prefix.

    Example::

        stream = S3DeliveryStream(self, "Analytics", bucket=analytics_bucket, encryption_key=key,
                                  prefix="orders/")
        stream.grant_put_records(producer_function)

    Objects land under ``<prefix>year=YYYY/month=MM/day=DD/``; records Firehose cannot deliver land
    under ``<error_prefix><error type>/year=.../``. The stream itself (server-side encryption) and
    the objects are encrypted with the customer key; the delivery-error log group with
    ``log_encryption_key`` when given.

    Args:
        bucket: destination bucket. Required.
        encryption_key: customer key of the delivered objects (usually the bucket's key). Required.
        stream_encryption_key: customer key of the stream's buffer (server-side encryption).
            Defaults to ``encryption_key``.
        prefix: object key prefix before the date partitions. Defaults to "data/".
        error_prefix: prefix for failed records. Defaults to "errors/".
        buffering_interval: deliver at least this often, 0..900 s. Defaults to 60 seconds.
        buffering_size: or when this much is buffered, 1..128 MiB. Defaults to 5 MiB.
        log_retention: retention of the delivery-error log group. Defaults to one week.
        log_encryption_key: KMS key of the delivery-error log group; its key policy must let
            CloudWatch Logs use it. Defaults to CloudWatch Logs' own encryption.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        bucket: s3.IBucket,
        encryption_key: kms.IKey,
        stream_encryption_key: kms.IKey | None = None,
        prefix: str = "data/",
        error_prefix: str = "errors/",
        buffering_interval: Duration | None = None,
        buffering_size: Size | None = None,
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_WEEK,
        log_encryption_key: kms.IKey | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        errors = PropErrors(self)
        interval = buffering_interval if buffering_interval is not None else Duration.seconds(60)
        size = buffering_size or Size.mebibytes(5)
        seconds = None if interval.is_unresolved() else interval.to_seconds()
        if not errors.check(
            seconds is None or 0 <= seconds <= 900, f"buffering_interval must be 0..900 seconds (given {seconds})"
        ):
            interval = Duration.seconds(60)
        mebibytes = None if size.is_unresolved() else size.to_mebibytes()
        if not errors.check(
            mebibytes is None or 1 <= mebibytes <= 128, f"buffering_size must be 1..128 MiB (given {mebibytes})"
        ):
            size = Size.mebibytes(5)
        for name, value in (("prefix", prefix), ("error_prefix", error_prefix)):
            errors.check(
                is_unresolved(value) or bool(value and not value.startswith("/") and value.endswith("/")),
                f"{name} must be a relative prefix ending in '/' (given {value!r})",
            )
        errors.check(prefix != error_prefix, f"prefix and error_prefix must differ (given {prefix!r} twice)")
        self.log_group = logs.LogGroup(
            self,
            "LogGroup",
            retention=log_retention,
            encryption_key=log_encryption_key,
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.destination = firehose.S3Bucket(
            bucket,
            data_output_prefix=f"{prefix}{DATE_PARTITIONS}",
            error_output_prefix=f"{error_prefix}!{{firehose:error-output-type}}/{DATE_PARTITIONS}",
            compression=firehose.Compression.GZIP,
            buffering_interval=interval,
            buffering_size=size,
            encryption_key=encryption_key,
            logging_config=firehose.EnableLogging(self.log_group),
        )
        self.delivery_stream: firehose.DeliveryStream = firehose.DeliveryStream(
            self,
            "Resource",
            destination=self.destination,
            encryption=firehose.StreamEncryption.customer_managed_key(stream_encryption_key or encryption_key),
        )

        self._acknowledge_grants(bucket)
        # The L2 adds a region -> Firehose CIDR mapping for its ``connections`` (IP allow lists of
        # Redshift, Splunk); an S3 destination never uses them, so the rendered mapping is unused
        # and cfn-lint warns (W7001). It is removed; ``delivery_stream.connections`` is therefore
        # not available on this construct (nothing to connect for S3).
        stack = Stack.of(self)
        mapping = stack.node.try_find_child(_CIDR_MAPPING)
        if isinstance(mapping, CfnMapping) and not _mapping_used(stack):
            stack.node.try_remove_child(_CIDR_MAPPING)

    def _acknowledge_grants(self, bucket: s3.IBucket) -> None:
        kms_reason = "CDK's KMS grant: GenerateDataKey*/ReEncrypt* on one named key ARN, no resource wildcard."
        s3_reason = (
            "The Firehose S3 destination grant (CDK): Firehose lists, reads back, aborts and replaces the "
            "objects it writes; object keys are time-based, so the grant is on this one bucket's objects."
        )
        findings = {
            "Action::kms:GenerateDataKey*": kms_reason,
            "Action::kms:ReEncrypt*": kms_reason,
            "Action::s3:Abort*": s3_reason,
            "Action::s3:DeleteObject*": s3_reason,
            "Action::s3:GetBucket*": s3_reason,
            "Action::s3:GetObject*": s3_reason,
            "Action::s3:List*": s3_reason,
            resource_finding(self, bucket.bucket_arn, "/*", owner=bucket): s3_reason,
        }
        for child in self.delivery_stream.node.find_all():
            if isinstance(child, iam.Role) and child.node.try_find_child("DefaultPolicy") is not None:
                acknowledge_policy(child, findings)

    @property
    def delivery_stream_name(self) -> str:
        return self.delivery_stream.delivery_stream_name

    def grant_put_records(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let a principal call PutRecord/PutRecordBatch on the stream."""
        return self.delivery_stream.grant_put_records(grantee)


def _mapping_used(stack: Stack) -> bool:
    """True when a delivery stream of the stack has a destination that reads the CIDR mapping."""
    for child in stack.node.find_all():
        if isinstance(child, firehose.CfnDeliveryStream) and (
            child.redshift_destination_configuration is not None or child.splunk_destination_configuration is not None
        ):
            return True
    return False
