"""The audit locker on moto: each new audit object version gets the stage's Object Lock retention."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import botocore.session
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from embedded.events import lambda_context, s3_object_created_event
from lambdas.events import audit_lock
from lambdas.shared import env

BUCKET = "audit-bucket-test"
CREATED = "2026-11-24T06:00:00Z"


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A bucket with Object Lock on and no default retention, as the audit bucket is; the stage's settings."""
    monkeypatch.setenv("AUDIT_LOCK_MODE", "COMPLIANCE")
    monkeypatch.setenv("AUDIT_RETENTION_DAYS", "365")
    env.reset()
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET, ObjectLockEnabledForBucket=True)
        yield client
    env.reset()


def _written(s3: Any, key: str = "audit/year=2026/month=11/day=24/stream-1.gz") -> tuple[str, str]:
    return key, s3.put_object(Bucket=BUCKET, Key=key, Body=b'{"event_id":"e1"}\n')["VersionId"]


def test_a_new_object_version_is_locked_in_the_stages_mode_for_its_days_from_creation(s3: Any) -> None:
    # Given an object Firehose wrote (no checksum needed: the bucket has no default retention)
    key, version = _written(s3)

    # When its Object Created event reaches the locker
    answer = audit_lock.handler(
        s3_object_created_event(BUCKET, key, version_id=version, time=CREATED), lambda_context()
    )

    # Then that version is locked in compliance mode until its creation + 365 days
    until = datetime(2026, 11, 24, 6, tzinfo=UTC) + timedelta(days=365)
    head = s3.head_object(Bucket=BUCKET, Key=key, VersionId=version)
    assert (head["ObjectLockMode"], head["ObjectLockRetainUntilDate"]) == ("COMPLIANCE", until)
    assert answer == {"mode": "COMPLIANCE", "retain_until": until.isoformat()}


def test_a_redelivered_event_sets_the_same_date_again(s3: Any) -> None:
    key, version = _written(s3)
    event = s3_object_created_event(BUCKET, key, version_id=version, time=CREATED)

    first = audit_lock.handler(event, lambda_context())
    second = audit_lock.handler(event, lambda_context())

    assert first == second


def test_every_retention_request_carries_the_checksum_s3_requires_for_object_lock(s3: Any) -> None:
    # Given the requests the locker's client sends
    sent: list[dict[str, str]] = []
    client = boto3.client("s3", region_name="us-east-1")
    client.meta.events.register(
        "before-send.s3.PutObjectRetention", lambda request, **_: sent.append(dict(request.headers))
    )
    key, version = _written(s3)

    # When it locks an object
    audit_lock.lock(
        client, audit_lock.NewObject(BUCKET, key, version, datetime(2026, 11, 24, tzinfo=UTC)), "COMPLIANCE", 1
    )

    # Then the request had Content-MD5 or an x-amz-checksum-* header: the SDK adds one because
    # S3's service model marks PutObjectRetention as requiring a request checksum
    (headers,) = sent
    names = {name.lower() for name in headers}
    assert "content-md5" in names or any(name.startswith("x-amz-checksum-") for name in names), names
    model = botocore.session.get_session().get_service_model("s3").operation_model("PutObjectRetention")
    assert model.http_checksum.get("requestChecksumRequired") is True


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("AUDIT_LOCK_MODE", "", "AUDIT_LOCK_MODE is required"),
        ("AUDIT_LOCK_MODE", "legal", "AUDIT_LOCK_MODE must be GOVERNANCE or COMPLIANCE"),
        ("AUDIT_RETENTION_DAYS", "", "AUDIT_RETENTION_DAYS is required"),
        ("AUDIT_RETENTION_DAYS", "0", r"AUDIT_RETENTION_DAYS must be in 1\.\.36500"),
    ],
)
def test_fails_naming_a_missing_or_wrong_retention_setting(
    s3: Any, monkeypatch: pytest.MonkeyPatch, variable: str, value: str, message: str
) -> None:
    monkeypatch.setenv(variable, value)
    env.reset()
    key, version = _written(s3)
    with pytest.raises(env.MissingSetting, match=message):
        audit_lock.handler(s3_object_created_event(BUCKET, key, version_id=version, time=CREATED), lambda_context())


class RefusingS3:
    """S3 as it answers a lock request for a version already locked: refused, and the lock it holds.

    moto neither refuses a shorter lock nor serves GetObjectRetention, so this one case is a stub.
    """

    def __init__(self, held: dict[str, Any]) -> None:
        self.held = held

    def put_object_retention(self, **_: Any) -> None:
        raise ClientError({"Error": {"Code": "AccessDenied", "Message": "Access Denied"}}, "PutObjectRetention")

    def get_object_retention(self, **_: Any) -> dict[str, Any]:
        return {"Retention": self.held}


NEW = audit_lock.NewObject(BUCKET, "audit/k.gz", "v1", datetime(2026, 11, 24, tzinfo=UTC))


def test_a_version_already_locked_at_least_as_long_is_done() -> None:
    held = {"Mode": "COMPLIANCE", "RetainUntilDate": datetime(2027, 12, 1, tzinfo=UTC)}

    until = audit_lock.lock(RefusingS3(held), NEW, "GOVERNANCE", 365)

    assert until == datetime(2027, 11, 24, tzinfo=UTC)


@pytest.mark.parametrize(
    "held",
    [
        {"Mode": "COMPLIANCE", "RetainUntilDate": datetime(2027, 1, 1, tzinfo=UTC)},  # shorter
        {"Mode": "GOVERNANCE", "RetainUntilDate": datetime(2028, 1, 1, tzinfo=UTC)},  # weaker mode
        {},  # not locked at all
    ],
)
def test_fails_when_s3_refuses_and_the_version_is_not_locked_as_asked(held: dict[str, Any]) -> None:
    with pytest.raises(ClientError, match="AccessDenied"):
        audit_lock.lock(RefusingS3(held), NEW, "COMPLIANCE", 365)
