"""The approval gate's request step: checkpoint the paused workflow, e-mail signed links, wait.

Invoked by the ``HumanApprovalGate`` fragment's ``RequestReview`` task
(``lambda:invoke.waitForTaskToken``). It writes the review record (status
``pending_review``, the serialised state the gate was given, ``requested_by``, ``created_at``,
``expires_at``, ``ttl`` and the task token, which stays on the record: it never appears in a
link or in the e-mail), then publishes approve/reject links to the reviewer topic. The workflow
stays paused until the link handler (:mod:`.decide`) completes the token, or the task times out.

The review id is derived from the task token, so a repeated invocation with the same token
finds its own record and publishes the same links again instead of creating a second review.

Event (built by the fragment)::

    {"task_token": "...", "state": {...}, "requested_by": "...", "entered_time": "2026-01-01T00:00:00Z",
     "execution_id": "arn:...", "details": <any JSON, optional>}

Environment (the construct sets all of it):
    TABLE_NAME: the table holding the review records; REVIEW_PARTITION_KEY, REVIEW_SORT_KEY,
        REVIEW_KEY_PREFIX, REVIEW_SORT_KEY_VALUE, REVIEW_TTL_ATTRIBUTE: where in it
        (:class:`.records.KeyLayout`).
    REVIEW_SECRET_ARN: Secrets Manager secret holding the link signing key (32+ characters).
    REVIEWER_TOPIC_ARN: SNS topic the reviewer is subscribed to.
    LINK_BASE_URL: base URL of the REST API serving ``/reviews/{id}/approve|reject``; or
    LINK_BASE_URL_PARAMETER: name of an SSM String parameter holding it (read at run time,
        cached per container), for when the API is deployed after this function.
    REVIEW_TIMEOUT_SECONDS: how long the workflow waits (the task's timeout).
    REVIEW_DECISION_MARGIN_SECONDS: links stop working this long before the task times out,
        so a click never approves a review the workflow has already given up on. Default 0.
    REVIEW_TTL_DAYS: record TTL in days (garbage collection only). Default 7.
    REVIEW_SUBJECT: e-mail subject. Default "Approval needed".
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from . import environment as env
from . import signing
from .records import Conflict, KeyLayout, Review, ReviewStatus, ReviewStore

logger = logging.getLogger(__name__)
logger.setLevel(logging.INFO)

MAX_SUBJECT: Final = 100  # SNS e-mail subject limit
MAX_DETAILS: Final = 4000  # characters of caller-chosen details shown in the e-mail
_SECRET_MAX_AGE: Final = 300


class InvalidReviewRequest(ValueError):
    """The gate's payload is malformed (a construct/caller bug, not a transient error)."""


class ReviewWindowClosed(RuntimeError):
    """The task started too long ago: no time is left for a decision (the gate treats it as expiry)."""


@dataclass(frozen=True)
class Settings:
    table_name: str
    secret_arn: str
    topic_arn: str
    link_base_url: str | None
    link_base_url_parameter: str | None
    timeout_seconds: int
    margin_seconds: int
    ttl_days: int
    subject: str


@env.once
def settings() -> Settings:
    base_url = env.optional("LINK_BASE_URL")
    parameter = env.optional("LINK_BASE_URL_PARAMETER")
    if (base_url is None) == (parameter is None):
        raise env.SettingError("set exactly one of LINK_BASE_URL and LINK_BASE_URL_PARAMETER")
    timeout = env.integer("REVIEW_TIMEOUT_SECONDS", low=1)
    return Settings(
        table_name=env.require("TABLE_NAME"),
        secret_arn=env.require("REVIEW_SECRET_ARN"),
        topic_arn=env.require("REVIEWER_TOPIC_ARN"),
        link_base_url=base_url,
        link_base_url_parameter=parameter,
        timeout_seconds=timeout,
        margin_seconds=env.integer("REVIEW_DECISION_MARGIN_SECONDS", 0, low=0, high=timeout - 1),
        ttl_days=env.integer("REVIEW_TTL_DAYS", 7, low=1, high=365),
        subject=env.optional("REVIEW_SUBJECT", "Approval needed") or "Approval needed",
    )


@env.once
def store() -> ReviewStore:
    s = settings()
    return ReviewStore(s.table_name, layout=KeyLayout.from_environment(), review_ttl_days=s.ttl_days)


@env.once
def sns() -> Any:
    return env.client("sns")


@env.once
def link_base_url() -> str:
    """The base URL, from the environment or (once per container) from its SSM parameter."""
    s = settings()
    if s.link_base_url is not None:
        return s.link_base_url
    ssm = env.client("ssm")
    value = str(ssm.get_parameter(Name=s.link_base_url_parameter)["Parameter"]["Value"]).strip()
    if not value.startswith("https://") and not value.startswith("http://"):
        raise env.SettingError(f"SSM parameter {s.link_base_url_parameter} must hold an http(s) URL")
    return value


def signing_key() -> bytes:
    """The link signing key (Secrets Manager, cached for a few minutes per container)."""
    return signing.key_from_secret(env.secret_value(settings().secret_arn, max_age=_SECRET_MAX_AGE))


def review_id_for(task_token: str) -> str:
    """A stable review id for a task token: one token, one review, however often we run."""
    return str(uuid.UUID(bytes=hashlib.sha256(task_token.encode("utf-8")).digest()[:16]))


def parse_entered_time(value: Any) -> int:
    """Epoch seconds (rounded down) of the task's ``$$.State.EnteredTime`` (ISO 8601)."""
    if not isinstance(value, str) or not value:
        raise InvalidReviewRequest("entered_time must be the ISO 8601 $$.State.EnteredTime")
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidReviewRequest(f"entered_time is not ISO 8601 (given {value!r})") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp())


def decision_deadline(entered_at: int, timeout_seconds: int, margin_seconds: int) -> int:
    """When the links stop working: the task's timeout minus the margin (epoch seconds)."""
    return entered_at + timeout_seconds - margin_seconds


def _utc(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def compose_message(
    subject: str, review: Review, approve_url: str, reject_url: str, details: Any | None
) -> tuple[str, str]:
    """The e-mail's subject and body. Nothing secret: no task token, no serialised state."""
    lines = [
        subject,
        "",
        f"Requested by: {review.requested_by}",
        f"Review: {review.review_id}",
        f"Decide before: {_utc(review.expires_at)}",
    ]
    if details is not None:
        shown = json.dumps(details, indent=2, sort_keys=True, default=str)
        if len(shown) > MAX_DETAILS:
            shown = shown[:MAX_DETAILS] + "\n… (truncated)"
        lines += ["", "Details:", shown]
    lines += [
        "",
        f"Approve: {approve_url}",
        "",
        f"Reject: {reject_url}",
        "",
        "Each link can be used once, until the deadline above. If nobody decides in time, the",
        "request is treated as rejected (expired).",
    ]
    return _one_line(subject, MAX_SUBJECT), "\n".join(lines)


def _request(event: Any) -> tuple[str, dict[str, Any], str, int, Any]:
    if not isinstance(event, dict):
        raise InvalidReviewRequest("the event must be an object built by the approval gate")
    token = event.get("task_token")
    if not isinstance(token, str) or not token:
        raise InvalidReviewRequest("task_token is missing: the task must use waitForTaskToken")
    state = event.get("state")
    if not isinstance(state, dict):
        raise InvalidReviewRequest("state must be the JSON object the gate was given")
    requested_by = event.get("requested_by") or event.get("execution_id")
    if not isinstance(requested_by, str) or not requested_by.strip():
        raise InvalidReviewRequest("requested_by (or execution_id) must be a non-empty string")
    return token, state, requested_by[:256], parse_entered_time(event.get("entered_time")), event.get("details")


def request_review(event: Any, *, now: float | None = None) -> Review:
    """Checkpoint and notify; returns the (new or existing) pending review."""
    token, state, requested_by, entered_at, details = _request(event)
    s = settings()
    review_id = review_id_for(token)
    current = int(time.time() if now is None else now)
    lifetime = decision_deadline(entered_at, s.timeout_seconds, s.margin_seconds) - current
    if lifetime < 1:
        raise ReviewWindowClosed(f"no time left to decide review {review_id} (task entered at {entered_at})")
    try:
        review = store().put_review(
            state, requested_by=requested_by, review_id=review_id, expires_in_seconds=lifetime, task_token=token
        )
    except Conflict:
        existing = store().get_review(review_id)
        if existing is None or existing.status != ReviewStatus.PENDING:
            logger.info("review %s already handled, nothing to send", review_id)
            return existing if existing is not None else _missing(review_id)
        review = existing
        logger.info("review %s exists, sending its links again", review_id)
    key = signing_key()
    base = link_base_url()
    approve = signing.review_link(base, review.review_id, "approve", review.expires_at, key)
    reject = signing.review_link(base, review.review_id, "reject", review.expires_at, key)
    subject, body = compose_message(s.subject, review, approve, reject, details)
    sns().publish(
        TopicArn=s.topic_arn,
        Subject=subject,
        Message=body,
        MessageAttributes={"event_type": {"DataType": "String", "StringValue": "review_requested"}},
    )
    logger.info("review %s requested, decide before %s", review.review_id, review.expires_at)
    return review


def _missing(review_id: str) -> Review:
    raise InvalidReviewRequest(f"review {review_id} vanished while being requested")


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    review = request_review(event)
    # Step Functions ignores this result (the task waits for its token); it helps debugging.
    return {"review_id": review.review_id, "status": str(review.status), "expires_at": review.expires_at}
