"""Steps of the session-cleanup workflow: plan the sweep, clean one session, add up the counts.

Handlers (``lambdas.orchestration.cleanup_worker.<name>``):

* ``plan``: ``{"input": <execution input>}`` -> ``{"cutoff", "cutoff_text", "shards"}``. The cutoff is
  now minus ``CLEANUP_GRACE_SECONDS``, or minus the input's ``older_than_seconds`` (0..7 days, what
  ``POST /admin/cleanup`` accepts); an input ``now`` (epoch seconds) is honoured only when it is
  not in the future, so it can make a run more conservative, never less.
* ``handler``: ``{"session_id", "eligible_before"?}`` -> ``{"session_id", "status", "archived",
  "archive_written", "items_deleted", "archive_key"}``. Archives the session partition to
  ``ARCHIVE_BUCKET`` (SSE-KMS with ``ARCHIVE_KEY_ARN``) as JSON lines under a deterministic key,
  deletes exactly the TURN/SUMMARY/HANDOFF records that an archive object read back from S3
  holds, then marks META ``archived`` with the archive key. Archive objects are create-only
  (``IfNoneMatch``): part 0 is the whole partition as the first run found it, and a record that
  arrived or changed later goes into the next part, so no run, however late or concurrent, can
  replace an archive with less. A session that became eligible at or after ``eligible_before``
  is left alone (a per-session run never cuts the grace short); an archived one is skipped. Before
  anything is written the session is claimed by a conditional write (still ``deleted``, or
  ``disconnected`` for longer than ``SESSION_RESUME_GRACE_SECONDS``): a session the customer
  resumed meanwhile is refused (``not_claimed``), and a claimed one can no longer be resumed.
* ``schedule``: a SessionEnded event's ``detail`` -> a one-time EventBridge Scheduler schedule
  (``CLEANUP_SCHEDULE_GROUP``) that starts the cleanup state machine with that session when its
  grace period ends, and deletes itself after.
* ``tally``: ``{"results": [...], "totals": {...}}`` -> the totals plus what the results count
  (worker results, or per-shard totals).

Environment: ``TABLE_NAME``, ``ARCHIVE_BUCKET``, ``ARCHIVE_KEY_ARN`` (required for ``handler``);
``CLEANUP_SCHEDULE_GROUP``, ``CLEANUP_STATE_MACHINE_ARN``, ``CLEANUP_SCHEDULER_ROLE_ARN``,
``CLEANUP_DEAD_LETTER_QUEUE_ARN`` (for ``schedule``); and
the stage settings of :mod:`lambdas.shared.settings` (``CLEANUP_GRACE_SECONDS``,
``CLEANUP_SHARDS``, ``ARCHIVE_PREFIX``).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any, Final

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import ClientError

from lambdas.shared import aws, keys
from lambdas.shared.errors import InvalidTransition
from lambdas.shared.logs import masked_formatter
from lambdas.shared.records import Session, SessionRecord, SessionStatus
from lambdas.shared.schema import SORT_KEY
from lambdas.shared.serialize import public
from lambdas.shared.settings import resource, settings
from lambdas.shared.settings import store as store
from lambdas.shared.store import preload
from lambdas.shared.tracing import tracer

preload("sessions")  # used by its invocations: loaded at init, not by the first one
logger = Logger(logger_formatter=masked_formatter())

COUNTERS: Final = ("sessions_seen", "sessions_archived", "sessions_failed", "items_deleted")
#: Reads of the archive parts per session before giving up to the next run (each lost race costs one).
MAX_ARCHIVE_ATTEMPTS: Final = 4


def s3() -> Any:
    return aws.client("s3")


def archive_key(session_id: str, part: int = 0) -> str:
    """Deterministic: a re-run finds the archive its first run wrote.

    Part 0 holds the whole partition as the first run found it; a later part holds only the
    records that the parts before it lack (written after the first run, or changed since).
    """
    base = f"{settings().archive_prefix}/{session_id}"
    return f"{base}.jsonl" if part == 0 else f"{base}.{part}.jsonl"


class ArchiveContention(RuntimeError):
    """Other runs kept writing this session's archive; the session is left as is for the next run."""


# ---------------------------------------------------------------------- plan


@logger.inject_lambda_context
@tracer.capture_lambda_handler(capture_response=False)
def plan(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    real_now = int(time.time())
    raw = event.get("input")
    request: dict[str, Any] = raw if isinstance(raw, dict) else {}
    now = real_now
    given = _int_or_none(request.get("now"))
    if given is not None and 0 < given <= real_now:
        now = given
    grace = settings().cleanup_grace_seconds
    older_than = _int_or_none(request.get("older_than_seconds"))  # POST /admin/cleanup may choose the grace
    if older_than is not None and 0 <= older_than <= 7 * 86400:
        grace = older_than
    cutoff = now - grace
    shards = keys.cleanup_shards(settings().cleanup_shards)
    logger.info("cleanup planned", extra={"cutoff": cutoff, "shards": len(shards)})
    return {"cutoff": cutoff, "cutoff_text": str(cutoff), "shards": shards}


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# ---------------------------------------------------------------------- one session


def _canonical(line: str) -> str:
    """One spelling per record, whoever wrote the line."""
    return json.dumps(json.loads(line), sort_keys=True, separators=(",", ":"))


def _line(record: SessionRecord) -> str:
    return json.dumps({"type": type(record).__name__.lower(), **public(record)}, sort_keys=True, default=str)


def _partition(session_id: str) -> list[tuple[str, str]]:
    """``(sort key, archive line)`` of every record of the session partition, in key order."""
    found: list[tuple[str, str]] = []
    cursor = None
    while True:
        page = store().sessions.list_session_items(session_id, limit=500, cursor=cursor)
        found += [(str(record.to_item()[SORT_KEY]), _line(record)) for record in page.items]
        cursor = page.next_cursor
        if cursor is None:
            return found


def _jsonl(session_id: str) -> str:
    return "".join(f"{line}\n" for _, line in _partition(session_id))


def _read_archive(bucket: str, session_id: str) -> tuple[set[str], int]:
    """The canonical lines of every archive part, read back from S3, and the next free part number."""
    lines: set[str] = set()
    part = 0
    while True:
        try:
            body = s3().get_object(Bucket=bucket, Key=archive_key(session_id, part))["Body"].read()
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NotFound"):
                return lines, part
            raise
        lines.update(_canonical(line) for line in body.decode("utf-8").splitlines() if line.strip())
        part += 1


def _create(bucket: str, key: str, lines: list[str]) -> bool:
    """Write a new archive object; False when one exists already (S3 refuses to replace it)."""
    try:
        s3().put_object(
            Bucket=bucket,
            Key=key,
            Body="".join(f"{line}\n" for line in lines).encode("utf-8"),
            ContentType="application/x-ndjson",
            ServerSideEncryption="aws:kms",
            SSEKMSKeyId=resource("ARCHIVE_KEY_ARN"),
            IfNoneMatch="*",
        )
    except ClientError as err:
        if err.response.get("Error", {}).get("Code") in ("PreconditionFailed", "ConditionalRequestConflict"):
            return False
        raise
    return True


def _archive(bucket: str, session_id: str) -> tuple[list[str], bool]:
    """Archive what no part holds yet; the child sort keys that archive read back holds, and whether this run wrote.

    Every write is create-only, so a run that lists the partition late (after another run deleted
    items) can never replace a fuller archive; it re-reads the parts instead. The sort keys returned
    are exactly the child records whose current line is in an archive object read back from S3.
    """
    written = False
    for _attempt in range(MAX_ARCHIVE_ATTEMPTS):
        archived, next_part = _read_archive(bucket, session_id)
        records = _partition(session_id)
        children = [(sk, line) for sk, line in records if sk != keys.META_SK]
        missing = [line for _, line in children if _canonical(line) not in archived]
        if next_part == 0:
            lines = [line for _, line in records]  # the first part: the whole partition, META included
        elif missing:
            lines = missing
        else:
            return [sk for sk, _ in children], written
        written = _create(bucket, archive_key(session_id, next_part), lines) or written
    raise ArchiveContention(f"session {session_id}: the archive kept changing during {MAX_ARCHIVE_ATTEMPTS} reads")


def clean_session(session_id: str, *, eligible_before: int | None = None) -> dict[str, Any]:
    """Archive, delete and mark one session; safe to run any number of times, and at the same time.

    ``eligible_before`` (epoch s): skip a session that became eligible for cleanup at or after
    it (a per-session run must not cut the grace period short).
    """
    session: Session | None = store().sessions.get_session(session_id)
    if session is None:
        return {"session_id": session_id, "status": "not_found", "archived": False, "items_deleted": 0}
    if session.status == SessionStatus.ARCHIVED:
        return {
            "session_id": session_id,
            "status": "already_archived",
            "archived": False,
            "items_deleted": 0,
            "archive_key": session.archive_key,
        }
    if session.status not in (SessionStatus.DISCONNECTED, SessionStatus.DELETED):
        return {"session_id": session_id, "status": f"skipped_{session.status}", "archived": False, "items_deleted": 0}
    if eligible_before is not None and (session.cleanup_at is None or session.cleanup_at >= eligible_before):
        return {"session_id": session_id, "status": "within_grace", "archived": False, "items_deleted": 0}
    # The read above may be stale: only a conditional claim keeps a resume from racing the deletes.
    resumable_since = store().table.now() - settings().session_resume_grace_seconds
    before = resumable_since if eligible_before is None else min(eligible_before, resumable_since)
    if not store().sessions.claim_for_cleanup(session_id, eligible_before=before):
        return {"session_id": session_id, "status": "not_claimed", "archived": False, "items_deleted": 0}
    bucket, key = resource("ARCHIVE_BUCKET"), archive_key(session_id)
    verified, written = _archive(bucket, session_id)
    deleted = store().sessions.delete_session_children(session_id, verified)
    left = [r for r in store().sessions.list_session_items(session_id, limit=2).items if not isinstance(r, Session)]
    if left:  # a record arrived after the listing: the next run archives it in a later part
        logger.info("records arrived during cleanup", extra={"session_id": session_id, "deleted": deleted})
        return {"session_id": session_id, "status": "records_arrived", "archived": False, "items_deleted": deleted}
    try:
        store().sessions.update_status(session_id, SessionStatus.ARCHIVED, archive_key=key)
    except InvalidTransition as err:  # a concurrent run archived it first
        logger.info("session moved concurrently", extra={"session_id": session_id, "error": str(err)})
        return {"session_id": session_id, "status": "raced", "archived": False, "items_deleted": deleted}
    logger.info("session archived", extra={"session_id": session_id, "written": written, "deleted": deleted})
    return {
        "session_id": session_id,
        "status": "archived",
        "archived": True,
        "archive_written": written,
        "items_deleted": deleted,
        "archive_key": key,
    }


@logger.inject_lambda_context
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return clean_session(str(event["session_id"]), eligible_before=_int_or_none(event.get("eligible_before")))


# ---------------------------------------------------------------------- per-session schedule

#: A scheduled run fires this long after the grace period ends, so the worker's "eligible before
#: now - grace" check holds even when the schedule fires to the second.
SCHEDULE_MARGIN_SECONDS: Final = 60
#: EventBridge Scheduler's own retries of a failed StartExecution, and for how long.
SCHEDULE_RETRY: Final = {"MaximumRetryAttempts": 4, "MaximumEventAgeInSeconds": 7200}


def schedule_name(session_id: str) -> str:
    """One schedule per session: a repeated SessionEnded event finds it (ConflictException)."""
    return f"cleanup-{session_id}"


def at_expression(epoch: int) -> str:
    """EventBridge Scheduler's one-time expression, in UTC."""
    return f"at({datetime.fromtimestamp(epoch, UTC).strftime('%Y-%m-%dT%H:%M:%S')})"


def schedule_session_cleanup(session_id: str) -> dict[str, Any]:
    """A one-time schedule that starts this session's own cleanup when its grace period ends.

    The schedule deletes itself after it ran (``ActionAfterCompletion=DELETE``); the hourly sweep
    stays the safety net for a session whose schedule could not be made or whose run failed.
    """
    if not keys.is_session_id(session_id):
        return {"session_id": session_id, "status": "invalid_session_id"}
    session = store().sessions.get_session(session_id)
    if session is None or session.cleanup_at is None:
        return {"session_id": session_id, "status": "not_waiting"}
    fire_at = max(
        session.cleanup_at + settings().cleanup_grace_seconds + SCHEDULE_MARGIN_SECONDS,
        int(time.time()) + SCHEDULE_MARGIN_SECONDS,
    )
    try:
        aws.client("scheduler").create_schedule(
            Name=schedule_name(session_id),
            GroupName=resource("CLEANUP_SCHEDULE_GROUP"),
            ScheduleExpression=at_expression(fire_at),
            ScheduleExpressionTimezone="UTC",
            FlexibleTimeWindow={"Mode": "OFF"},
            ActionAfterCompletion="DELETE",
            Description="Clean this session up when its grace period ends",
            Target={
                "Arn": resource("CLEANUP_STATE_MACHINE_ARN"),
                "RoleArn": resource("CLEANUP_SCHEDULER_ROLE_ARN"),
                "Input": json.dumps({"session_id": session_id, "trigger": "session_schedule"}),
                "RetryPolicy": SCHEDULE_RETRY,
                "DeadLetterConfig": {"Arn": resource("CLEANUP_DEAD_LETTER_QUEUE_ARN")},
            },
        )
    except ClientError as err:
        if err.response.get("Error", {}).get("Code") != "ConflictException":
            raise
        return {"session_id": session_id, "status": "already_scheduled"}
    logger.info("session cleanup scheduled", extra={"session_id": session_id, "at": fire_at})
    return {"session_id": session_id, "status": "scheduled", "at": fire_at}


@logger.inject_lambda_context
@tracer.capture_lambda_handler(capture_response=False)
def schedule(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """SessionEnded (the event's ``detail``) -> that session's one-time cleanup schedule."""
    return schedule_session_cleanup(str(event.get("session_id", "")))


# ---------------------------------------------------------------------- tally


def add_up(results: list[dict[str, Any]], totals: dict[str, Any]) -> dict[str, int]:
    """Totals plus the results: worker results count one session each, shard totals add up field by field."""
    out = {name: int(totals.get(name, 0)) for name in COUNTERS}
    for result in results:
        if "session_id" not in result:  # a shard's totals
            for name in COUNTERS:
                out[name] += int(result.get(name, 0))
            continue
        out["sessions_seen"] += 1
        out["sessions_archived"] += 1 if result.get("archived") else 0
        out["sessions_failed"] += 1 if result.get("failed") else 0
        out["items_deleted"] += int(result.get("items_deleted", 0))
    return out


@logger.inject_lambda_context
def tally(event: dict[str, Any], context: LambdaContext) -> dict[str, int]:
    return add_up(list(event.get("results") or []), dict(event.get("totals") or {}))
