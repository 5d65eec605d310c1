"""Direct-put Firehose streams into S3 buckets on moto (moto writes one object per put call)."""

from __future__ import annotations

import boto3


def create_s3_delivery_stream(name: str, bucket: str, *, prefix: str = "", region: str = "us-east-1") -> str:
    """Create ``name`` delivering into ``bucket`` under ``prefix``; returns the stream ARN."""
    response = boto3.client("firehose", region_name=region).create_delivery_stream(
        DeliveryStreamName=name,
        DeliveryStreamType="DirectPut",
        ExtendedS3DestinationConfiguration={
            "RoleARN": "arn:aws:iam::123456789012:role/firehose",
            "BucketARN": f"arn:aws:s3:::{bucket}",
            "Prefix": prefix,
        },
    )
    return str(response["DeliveryStreamARN"])
