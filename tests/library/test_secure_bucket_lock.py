"""SecureBucket's Object Lock without a default retention, its EventBridge events and the retention grant."""

from __future__ import annotations

import pytest
from aws_cdk import App, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk.assertions import Match, Template

from constructs_lib import SecureBucket


def _app() -> App:
    # A flag `cdk init` writes into cdk.json; access-log target buckets need it.
    return App(context={"@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy": True})


def _bucket(stack: Stack, **props: object) -> SecureBucket:
    logs = SecureBucket(stack, "Logs", access_log_target=True)
    key = kms.Key(stack, "Key", enable_key_rotation=True)
    return SecureBucket(stack, "Trail", encryption_key=key, server_access_logs=logs.bucket, **props)  # type: ignore[arg-type]


def test_object_lock_without_a_default_retention_locks_nothing_by_itself_and_events_go_to_eventbridge() -> None:
    stack = Stack(_app(), "Lock")
    _bucket(stack, object_lock_enabled=True, event_bridge=True, versioned=False)

    template = Template.from_stack(stack)

    template.has_resource_properties(
        "AWS::S3::Bucket",
        {
            "ObjectLockEnabled": True,
            "ObjectLockConfiguration": Match.absent(),
            "VersioningConfiguration": {"Status": "Enabled"},  # Object Lock needs versions
            "NotificationConfiguration": {"EventBridgeConfiguration": {"EventBridgeEnabled": True}},
        },
    )
    # The setting is the bucket's own: no custom-resource function writes it
    template.resource_count_is("Custom::S3BucketNotifications", 0)
    template.resource_count_is("AWS::Lambda::Function", 0)


def test_grant_object_retention_lets_a_locker_set_retention_and_nothing_else() -> None:
    stack = Stack(_app(), "Grant")
    bucket = _bucket(stack, object_lock_enabled=True)
    role = iam.Role(stack, "Locker", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))

    bucket.grant_object_retention(role, "audit/*")

    (policy,) = Template.from_stack(stack).find_resources("AWS::IAM::Policy").values()
    (statement,) = policy["Properties"]["PolicyDocument"]["Statement"]
    assert statement["Action"] == ["s3:GetObjectRetention", "s3:PutObjectRetention"]
    assert statement["Resource"]["Fn::Join"][1][-1] == "/audit/*"


def test_fails_on_emptying_a_locked_bucket_on_delete() -> None:
    stack = Stack(_app(), "S")
    _bucket(stack, object_lock_enabled=True, removal_policy=RemovalPolicy.DESTROY, auto_delete_objects=True)
    with pytest.raises(
        RuntimeError, match=r"\[S/Trail\] auto_delete_objects cannot be combined with object_lock_enabled"
    ):
        Template.from_stack(stack)
