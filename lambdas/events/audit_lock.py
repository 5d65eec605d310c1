"""Audit locker: puts Object Lock retention on each new object of the audit bucket.

Trigger: the audit bucket's "Object Created" events (EventBridge, default bus). Why not the
bucket's default retention: with one, S3 refuses every upload that carries neither Content-MD5
nor an ``x-amz-checksum-*`` header, and AWS does not document whether Firehose (the audit
trail's writer) sends one; a refused delivery would be retried for 24 hours and then dropped.
Without a default retention Firehose's uploads need no checksum, and this function locks each
object version right after it is written, with the stage's mode and days counted from the
object's creation, as a default retention would. ``PutObjectRetention`` is an operation whose
request checksum the SDK always computes (its service model requires one).

Idempotent: the date follows from the event, so a redelivered event asks for the same lock again,
and a version S3 reports locked at least that long is done; a failed call raises, and the event
is retried, then lands in the locker's DLQ.
Until it is locked, the bucket policy denies every delete, so the version cannot be removed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.data_classes import EventBridgeEvent
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import ClientError

from lambdas.shared import aws
from lambdas.shared.logs import masked_formatter
from lambdas.shared.settings import settings
from lambdas.shared.tracing import tracer

logger = Logger(logger_formatter=masked_formatter())


@dataclass(frozen=True)
class NewObject:
    """The object version an "Object Created" event names, and when it was created."""

    bucket: str
    key: str
    version_id: str | None
    created: datetime

    @classmethod
    def of(cls, event: EventBridgeEvent) -> NewObject:
        detail = event.detail
        obj = detail["object"]
        return cls(
            bucket=str(detail["bucket"]["name"]),
            key=str(obj["key"]),
            version_id=obj.get("version-id"),
            created=datetime.fromisoformat(event.time.replace("Z", "+00:00")),
        )


def retain_until(created: datetime, days: int) -> datetime:
    """The date a default retention of ``days`` would give a version created at ``created``."""
    return created.astimezone(UTC) + timedelta(days=days)


def lock(s3: Any, obj: NewObject, mode: str, days: int) -> datetime:
    """Lock ``obj`` in ``mode`` until its creation + ``days``; returns that date.

    No read first: the date follows from the event alone, so the common case is one call. When
    S3 refuses it (a redelivered event may find the version locked already, and S3 never lets a
    lock be shortened), the version's retention is read: one at least as strong and as long is
    the outcome wanted, anything else is an error.
    """
    until = retain_until(obj.created, days)
    version = {"VersionId": obj.version_id} if obj.version_id else {}
    try:
        s3.put_object_retention(
            Bucket=obj.bucket, Key=obj.key, Retention={"Mode": mode, "RetainUntilDate": until}, **version
        )
    except ClientError as refused:
        held = s3.get_object_retention(Bucket=obj.bucket, Key=obj.key, **version).get("Retention", {})
        strong_enough = held.get("Mode") == mode or held.get("Mode") == "COMPLIANCE"
        if not (strong_enough and held.get("RetainUntilDate") is not None and held["RetainUntilDate"] >= until):
            raise refused
        logger.info("audit object already locked", extra={"key": obj.key, "retain_until": str(held["RetainUntilDate"])})
    return until


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    mode, days = settings().audit_retention()
    obj = NewObject.of(EventBridgeEvent(event))
    until = lock(aws.client("s3"), obj, mode, days)
    logger.info("audit object locked", extra={"key": obj.key, "version_id": obj.version_id, "mode": mode})
    return {"mode": mode, "retain_until": until.isoformat()}
