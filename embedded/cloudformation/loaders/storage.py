"""Loaders of DynamoDB tables, S3 buckets, SSM parameters and CloudWatch Logs log groups."""

from __future__ import annotations

from typing import Any

from embedded.cloudformation.intrinsics import Deployed, Pseudo
from embedded.cloudformation.loaders.base import Cloud, loader, physical_name


@loader("AWS::DynamoDB::Table")
def _dynamodb_table(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    ddb = cloud.client("dynamodb")
    name = str(props.get("TableName") or physical_name(pseudo.stack_name, lid, max_length=255))
    args: dict[str, Any] = {
        "TableName": name,
        "KeySchema": props["KeySchema"],
        "AttributeDefinitions": props["AttributeDefinitions"],
        "BillingMode": props.get("BillingMode", "PROVISIONED"),
    }
    if "ProvisionedThroughput" in props:
        args["ProvisionedThroughput"] = {k: int(v) for k, v in props["ProvisionedThroughput"].items()}
    for key in ("GlobalSecondaryIndexes", "LocalSecondaryIndexes"):
        if key in props:
            args[key] = props[key]
    stream = props.get("StreamSpecification")
    if stream:
        args["StreamSpecification"] = {"StreamEnabled": True, "StreamViewType": stream["StreamViewType"]}
    sse = props.get("SSESpecification")
    if sse:
        args["SSESpecification"] = {
            "Enabled": bool(sse.get("SSEEnabled", False)),
            **({"SSEType": sse["SSEType"]} if "SSEType" in sse else {}),
            **({"KMSMasterKeyId": sse["KMSMasterKeyId"]} if "KMSMasterKeyId" in sse else {}),
        }
    if "DeletionProtectionEnabled" in props:
        args["DeletionProtectionEnabled"] = bool(props["DeletionProtectionEnabled"])
    description = ddb.create_table(**args)["TableDescription"]
    ttl = props.get("TimeToLiveSpecification")
    if ttl and ttl.get("Enabled"):
        ddb.update_time_to_live(
            TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": ttl["AttributeName"]}
        )
    pitr = props.get("PointInTimeRecoverySpecification") or {}
    if pitr.get("PointInTimeRecoveryEnabled"):
        ddb.update_continuous_backups(
            TableName=name, PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True}
        )
    attributes = {"Arn": description["TableArn"]}
    if "LatestStreamArn" in description:
        attributes["StreamArn"] = description["LatestStreamArn"]
    return Deployed(lid, "AWS::DynamoDB::Table", name, attributes)


@loader("AWS::S3::Bucket")
def _s3_bucket(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    s3 = cloud.client("s3")
    name = str(props.get("BucketName") or physical_name(pseudo.stack_name, lid, max_length=63, lower=True))
    args: dict[str, Any] = {"Bucket": name}
    if cloud.region != "us-east-1":
        args["CreateBucketConfiguration"] = {"LocationConstraint": cloud.region}
    if props.get("ObjectLockEnabled"):
        args["ObjectLockEnabledForBucket"] = True
    s3.create_bucket(**args)
    versioning = props.get("VersioningConfiguration")
    if versioning:
        s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": versioning["Status"]})
    encryption = props.get("BucketEncryption")
    if encryption:
        rules = [
            {
                **({"BucketKeyEnabled": bool(r["BucketKeyEnabled"])} if "BucketKeyEnabled" in r else {}),
                "ApplyServerSideEncryptionByDefault": r["ServerSideEncryptionByDefault"],
            }
            for r in encryption["ServerSideEncryptionConfiguration"]
        ]
        s3.put_bucket_encryption(Bucket=name, ServerSideEncryptionConfiguration={"Rules": rules})
    lock = props.get("ObjectLockConfiguration")
    if lock and lock.get("Rule"):
        s3.put_object_lock_configuration(
            Bucket=name, ObjectLockConfiguration={"ObjectLockEnabled": "Enabled", "Rule": lock["Rule"]}
        )
    notification = props.get("NotificationConfiguration", {})
    if notification.get("EventBridgeConfiguration", {}).get("EventBridgeEnabled"):
        s3.put_bucket_notification_configuration(
            Bucket=name, NotificationConfiguration={"EventBridgeConfiguration": {}}
        )
    domain = f"{name}.s3.{pseudo.url_suffix}"
    return Deployed(
        lid,
        "AWS::S3::Bucket",
        name,
        {
            "Arn": f"arn:aws:s3:::{name}",
            "DomainName": domain,
            "RegionalDomainName": f"{name}.s3.{cloud.region}.{pseudo.url_suffix}",
            "WebsiteURL": f"http://{name}.s3-website-{cloud.region}.{pseudo.url_suffix}",
        },
    )


@loader("AWS::SSM::Parameter")
def _ssm_parameter(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    name = str(props.get("Name") or "/" + physical_name(pseudo.stack_name, lid))
    cloud.client("ssm").put_parameter(Name=name, Value=str(props["Value"]), Type=str(props.get("Type", "String")))
    return Deployed(lid, "AWS::SSM::Parameter", name, {"Type": props.get("Type", "String"), "Value": props["Value"]})


@loader("AWS::Logs::LogGroup")
def _log_group(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    name = str(props.get("LogGroupName") or physical_name(pseudo.stack_name, lid, max_length=512))
    cloud.client("logs").create_log_group(logGroupName=name)
    return Deployed(lid, "AWS::Logs::LogGroup", name, {"Arn": cloud.arn("logs", f"log-group:{name}:*")})
