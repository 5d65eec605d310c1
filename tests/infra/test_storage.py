"""StorageStack: the single table, its key, and the buckets, per stage."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk import App, RemovalPolicy, Stack
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Match, Template

from constructs_lib import SecureBucket
from embedded.synth import SynthesizedStage
from lambdas.shared import schema


def _resources(stage: SynthesizedStage, part: str, type_: str) -> dict[str, dict[str, Any]]:
    return stage.template(part).find_resources(type_)


def _only(stage: SynthesizedStage, part: str, type_: str) -> dict[str, Any]:
    found = _resources(stage, part, type_)
    assert len(found) == 1, f"expected one {type_}, found {sorted(found)}"
    return next(iter(found.values()))


def _bucket(stage: SynthesizedStage, logical_prefix: str) -> dict[str, Any]:
    buckets = _resources(stage, "Storage", "AWS::S3::Bucket")
    matches = [b for name, b in buckets.items() if name.startswith(logical_prefix)]
    assert len(matches) == 1, f"no single bucket named {logical_prefix}*: {sorted(buckets)}"
    return matches[0]


def test_table_keys_stream_ttl_and_billing(any_stage: SynthesizedStage) -> None:
    any_stage.template("Storage").has_resource_properties(
        "AWS::DynamoDB::Table",
        {
            "KeySchema": [
                {"AttributeName": "PK", "KeyType": "HASH"},
                {"AttributeName": "SK", "KeyType": "RANGE"},
            ],
            "BillingMode": "PAY_PER_REQUEST",
            "StreamSpecification": {"StreamViewType": "NEW_AND_OLD_IMAGES"},
            "TimeToLiveSpecification": {"AttributeName": "ttl", "Enabled": True},
            "SSESpecification": {"SSEEnabled": True, "SSEType": "KMS", "KMSMasterKeyId": Match.any_value()},
            "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
        },
    )


def test_table_indexes_match_the_shared_schema(any_stage: SynthesizedStage) -> None:
    table = _only(any_stage, "Storage", "AWS::DynamoDB::Table")["Properties"]
    indexes = {i["IndexName"]: i for i in table["GlobalSecondaryIndexes"]}
    assert set(indexes) == {"GSI1", "CleanupIndex", "AvailableAgentsIndex", "StatusIndex"}
    types = {a["AttributeName"]: a["AttributeType"] for a in table["AttributeDefinitions"]}
    for spec in schema.GLOBAL_INDEXES:
        index = indexes[spec.name]
        assert index["KeySchema"] == [
            {"AttributeName": spec.partition_key, "KeyType": "HASH"},
            {"AttributeName": spec.sort_key, "KeyType": "RANGE"},
        ]
        assert types[spec.partition_key] == spec.partition_type
        assert types[spec.sort_key] == spec.sort_type
    assert indexes["GSI1"]["Projection"] == {"ProjectionType": "ALL"}
    assert indexes["CleanupIndex"]["Projection"]["ProjectionType"] == "INCLUDE"
    # customer_id/updated_at feed GSI1; the cleanup and agent indexes are keyed by their own sparse attributes.
    assert types == {
        "PK": "S",
        "SK": "S",
        "customer_id": "S",
        "updated_at": "N",
        "cleanup_shard": "S",
        "cleanup_at": "N",
        "available_skill": "S",
        "available_since": "N",
        "status_key": "S",
        "status_sort": "S",
    }


def test_status_index_is_keyed_by_status_and_projects_only_what_the_listing_returns(
    any_stage: SynthesizedStage,
) -> None:
    # Not ALL: a projected attribute a turn changes (updated_at, turn_count) would cost an index write per turn
    table = _only(any_stage, "Storage", "AWS::DynamoDB::Table")["Properties"]
    index = {i["IndexName"]: i for i in table["GlobalSecondaryIndexes"]}["StatusIndex"]
    assert index["KeySchema"] == [
        {"AttributeName": "status_key", "KeyType": "HASH"},
        {"AttributeName": "status_sort", "KeyType": "RANGE"},
    ]
    assert index["Projection"] == {
        "ProjectionType": "INCLUDE",
        "NonKeyAttributes": ["session_id", "customer_id", "status", "created_at"],
    }


def test_dev_table_is_destroyable(dev: SynthesizedStage) -> None:
    dev.template("Storage").has_resource(
        "AWS::DynamoDB::Table",
        {"DeletionPolicy": "Delete", "UpdateReplacePolicy": "Delete", "Properties": Match.object_like({})},
    )
    table = _only(dev, "Storage", "AWS::DynamoDB::Table")["Properties"]
    assert table.get("DeletionProtectionEnabled", False) is False


def test_prod_table_is_retained_and_deletion_protected(prod: SynthesizedStage) -> None:
    prod.template("Storage").has_resource(
        "AWS::DynamoDB::Table",
        {
            "DeletionPolicy": "Retain",
            "UpdateReplacePolicy": "Retain",
            "Properties": Match.object_like({"DeletionProtectionEnabled": True}),
        },
    )


def test_key_rotates_and_is_retained_in_prod(dev: SynthesizedStage, prod: SynthesizedStage) -> None:
    dev.template("Storage").has_resource(
        "AWS::KMS::Key", {"Properties": Match.object_like({"EnableKeyRotation": True}), "DeletionPolicy": "Delete"}
    )
    prod.template("Storage").has_resource(
        "AWS::KMS::Key", {"Properties": Match.object_like({"EnableKeyRotation": True}), "DeletionPolicy": "Retain"}
    )


@pytest.mark.parametrize("bucket", ["ArchiveBucket", "AuditBucket", "AnalyticsBucket"])
def test_data_buckets_use_the_customer_key_and_log_access(any_stage: SynthesizedStage, bucket: str) -> None:
    props = _bucket(any_stage, bucket)["Properties"]
    rule = props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]
    assert rule["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "aws:kms"
    assert "KMSMasterKeyID" in rule["ServerSideEncryptionByDefault"]
    assert props["LoggingConfiguration"]["DestinationBucketName"]["Ref"].startswith("AccessLogsBucket")
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    assert props["LifecycleConfiguration"]["Rules"], "every data bucket has lifecycle rules"


def test_access_log_bucket_uses_s3_managed_encryption(any_stage: SynthesizedStage) -> None:
    props = _bucket(any_stage, "AccessLogsBucket")["Properties"]
    rule = props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]
    assert rule["ServerSideEncryptionByDefault"] == {"SSEAlgorithm": "AES256"}


def test_every_bucket_refuses_plain_http(any_stage: SynthesizedStage) -> None:
    buckets = _resources(any_stage, "Storage", "AWS::S3::Bucket")
    policies = _resources(any_stage, "Storage", "AWS::S3::BucketPolicy")
    secured = set()
    for policy in policies.values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            if statement["Effect"] == "Deny" and statement.get("Condition", {}).get("Bool") == {
                "aws:SecureTransport": "false"
            }:
                secured.add(policy["Properties"]["Bucket"]["Ref"])
    assert secured == set(buckets), f"buckets without an SSL-only policy: {set(buckets) - secured}"


def test_archive_moves_to_colder_storage(any_stage: SynthesizedStage) -> None:
    rules = _bucket(any_stage, "ArchiveBucket")["Properties"]["LifecycleConfiguration"]["Rules"]
    transitions = [t for r in rules for t in r.get("Transitions", [])]
    assert transitions == [{"StorageClass": "GLACIER_IR", "TransitionInDays": 90}]


def test_analytics_expire(any_stage: SynthesizedStage) -> None:
    rules = _bucket(any_stage, "AnalyticsBucket")["Properties"]["LifecycleConfiguration"]["Rules"]
    assert any(r.get("ExpirationInDays") == any_stage.stage.config.analytics_expiration_days for r in rules)


def test_analytics_are_versioned_and_a_replaced_version_expires_after_a_day(any_stage: SynthesizedStage) -> None:
    props = _bucket(any_stage, "AnalyticsBucket")["Properties"]
    assert props["VersioningConfiguration"] == {"Status": "Enabled"}
    rules = props["LifecycleConfiguration"]["Rules"]
    assert [r["NoncurrentVersionExpiration"] for r in rules if "NoncurrentVersionExpiration" in r] == [
        {"NoncurrentDays": 1}
    ]


def test_audit_bucket_has_object_lock_without_a_default_retention_and_announces_new_objects(
    any_stage: SynthesizedStage,
) -> None:
    # A default retention would make S3 refuse Firehose's uploads unless they carry a checksum
    # (undocumented for Firehose); the Events stack's audit locker locks each object instead.
    bucket = _bucket(any_stage, "AuditBucket")
    props = bucket["Properties"]
    assert props["ObjectLockEnabled"] is True
    assert "Rule" not in props.get("ObjectLockConfiguration", {})
    assert props["NotificationConfiguration"] == {"EventBridgeConfiguration": {"EventBridgeEnabled": True}}
    assert props["VersioningConfiguration"] == {"Status": "Enabled"}
    assert bucket["DeletionPolicy"] == "Retain", "the audit trail outlives the stack in every stage"
    assert not _resources(any_stage, "Storage", "Custom::S3BucketNotifications")


def test_no_principal_may_delete_from_the_audit_bucket(any_stage: SynthesizedStage) -> None:
    (bucket_id,) = [k for k in _resources(any_stage, "Storage", "AWS::S3::Bucket") if k.startswith("AuditBucket")]
    denied: dict[str, set[str]] = {}
    for policy in _resources(any_stage, "Storage", "AWS::S3::BucketPolicy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            if (
                statement["Effect"] == "Deny"
                and statement["Principal"] == {"AWS": "*"}
                and "Condition" not in statement
            ):
                actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
                denied.setdefault(policy["Properties"]["Bucket"]["Ref"], set()).update(actions)
    # Only the audit bucket is append-only: the others are emptied or expired by their owners
    assert denied == {bucket_id: {"s3:DeleteObject", "s3:DeleteObjectVersion"}}


def test_dev_buckets_are_emptied_on_delete_prod_buckets_are_kept(dev: SynthesizedStage, prod: SynthesizedStage) -> None:
    assert len(_resources(dev, "Storage", "Custom::S3AutoDeleteObjects")) == 4  # all but the locked audit bucket
    assert _resources(prod, "Storage", "Custom::S3AutoDeleteObjects") == {}
    for bucket in _resources(prod, "Storage", "AWS::S3::Bucket").values():
        assert bucket["DeletionPolicy"] == "Retain"


@pytest.mark.parametrize("part", ["Storage", "Events", "Orchestration", "Api"])
def test_every_stack_is_named_for_its_stage(any_stage: SynthesizedStage, part: str) -> None:
    stack = getattr(any_stage.stage, part.lower())
    assert stack.stack_name == f"MangaAssist-{any_stage.stage.config.name}-{part}"


def test_tags_on_every_taggable_resource(any_stage: SynthesizedStage) -> None:
    name = any_stage.stage.config.name
    for logical_id, resource in _resources(any_stage, "Storage", "AWS::S3::Bucket").items():
        tags = {t["Key"]: t["Value"] for t in resource["Properties"].get("Tags", [])}
        assert tags.get("Project") == "MangaAssist", logical_id
        assert tags.get("Stage") == name, logical_id
    table = _only(any_stage, "Storage", "AWS::DynamoDB::Table")["Properties"]
    assert {"Key": "Stage", "Value": name} in table["Tags"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, r"Probe: server_access_logs is required"),
        ({"logs": True, "auto_delete_objects": True}, r"auto_delete_objects needs removal_policy=DESTROY"),
        (
            {"logs": True, "object_lock": ("governance", 1), "auto_delete_objects": True, "destroy": True},
            r"cannot be combined with object_lock",
        ),
        ({"logs": True, "object_lock": ("legal", 1)}, r"object_lock must be \('governance'\|'compliance'"),
        ({"logs": True, "object_lock": ("compliance", 0)}, r"1\.\.36500 days"),
        ({"logs": True, "append_only": True, "versioned": False}, r"append_only needs a versioned bucket"),
        (
            {"logs": True, "append_only": True, "auto_delete_objects": True, "destroy": True},
            r"append_only cannot be combined with auto_delete_objects",
        ),
    ],
    ids=[
        "no-access-logs",
        "auto-delete-retained",
        "auto-delete-locked",
        "lock-mode",
        "lock-days",
        "append-unversioned",
        "append-auto-delete",
    ],
)
def test_secure_bucket_fails_synthesis_on_contradictory_options(kwargs: dict[str, Any], message: str) -> None:
    stack = Stack(App(), "Probe")
    options = dict(kwargs)
    logs = options.pop("logs", False)
    if options.pop("destroy", False):
        options["removal_policy"] = RemovalPolicy.DESTROY
    if logs:
        options["server_access_logs"] = s3.Bucket(stack, "Logs")
    SecureBucket(stack, "Probe", **options)
    with pytest.raises(RuntimeError, match=r"\[Probe/Probe\] .*" + message):
        Template.from_stack(stack)
