"""The story's audit step: the trail holds every change of the session, in the Object Lock bucket.

The audit stream's objects are read back from S3: every turn created and deleted, the session's status
changes up to its archive, and every object locked in the stage's mode for its retention.

A mixin of :class:`local.story.Story`, which provides the stage, the config, the shared values and the
step plumbing declared in ``StoryParts``.
"""

from __future__ import annotations

import time

from embedded.services.athena import locked_for
from embedded.services.firehose import read_lines
from local.story.base import StoryParts, expect


class AuditSteps(StoryParts):
    """The audit trail, read back after the cleanup (see the module docstring)."""

    def audit_trail_holds_every_change(self) -> None:
        started, step = time.monotonic(), self.step("The audit trail holds every change, in the locked bucket")
        stream = self.stage.function("lambdas.events.router.handler").environment["AUDIT_STREAM_NAME"]
        destination = self.stage.client("firehose").describe_delivery_stream(DeliveryStreamName=stream)[
            "DeliveryStreamDescription"
        ]["Destinations"][0]["ExtendedS3DestinationDescription"]
        bucket = destination["BucketARN"].split(":::", 1)[1]
        s3 = self.stage.client("s3")
        lock = s3.get_object_lock_configuration(Bucket=bucket)["ObjectLockConfiguration"]
        expect(lock["ObjectLockEnabled"] == "Enabled", f"audit bucket {bucket} has no Object Lock: {lock}")
        lines = [line for _, line in read_lines(s3, bucket, destination["Prefix"].split("!{", 1)[0])]
        mine = {line["event_id"]: line for line in lines if line["pk"] == f"SESSION#{self.session_id}"}
        turns = [line for line in mine.values() if line["item_type"] == "turn"]
        total = int(self.values["turns_total"])
        created = sum(line["change"] == "created" for line in turns)
        deleted = sum(line["change"] == "deleted" for line in turns)
        expect(
            (created, deleted) == (total, total),
            f"audit has {created} turn creations and {deleted} deletions, expected {total} of each",
        )
        statuses = [
            (line["old_status"], line["new_status"])
            for line in sorted(mine.values(), key=lambda line: int(line["sequence_number"]))
            if line["sk"] == "META" and "new_status" in line
        ]
        expect(bool(statuses) and statuses[-1][1] == "archived", f"session status changes audited: {statuses}")
        # Every object the stream wrote is locked by the audit locker: the stage's mode, its days.
        mode, days = self.config.audit_object_lock_mode.upper(), self.config.audit_retention_days
        versions = s3.list_object_versions(Bucket=bucket).get("Versions", [])
        unlocked = [v["Key"] for v in versions if not locked_for(s3, bucket, v, mode, days)]
        expect(bool(versions) and not unlocked, f"audit objects without {mode} retention of {days} days: {unlocked}")
        step.changes.append(
            f"s3://{bucket[:24]}.../audit/: {len(lines)} lines; this session {len(mine)}: "
            f"{created} turns created, {deleted} deleted, status {' -> '.join(s[1] for s in statuses)}; "
            f"{len(versions)} objects, each locked ({mode}, {days} days)"
        )
        self.done(step, started)
