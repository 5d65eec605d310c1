"""Review records: one item per review in a DynamoDB table, with conditional decisions.

Where the items live is the caller's choice (:class:`KeyLayout`): the table's key attribute
names, the partition key prefix (``REVIEW#<id>`` by default) and, for a table with a sort key,
the sort key value (``META`` by default). Expiry is ``expires_at`` against the store's clock,
never TTL, whose deletion lags by up to two days.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum
from typing import Any, Final

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError

from . import environment

MAX_ID_LENGTH: Final = 256
_CONDITION_FAILED: Final = "ConditionalCheckFailedException"
_SERIALIZER = TypeSerializer()
_DESERIALIZER = TypeDeserializer()


class ReviewError(Exception):
    """Base of the errors the review records raise."""


class InvalidInput(ReviewError, ValueError):
    """An argument is malformed; the message says which and why."""


class Conflict(ReviewError):
    """The write's condition failed: the record is not in the state the write needs."""


class ReviewNotFound(ReviewError):
    def __init__(self, review_id: str) -> None:
        super().__init__(f"review {review_id!r} not found")
        self.review_id = review_id


class ReviewNotPending(Conflict):
    """The review was decided already."""

    def __init__(self, review_id: str, status: str) -> None:
        super().__init__(f"review {review_id!r} is {status!r}, not pending_review")
        self.review_id = review_id
        self.status = status


class ReviewExpired(Conflict):
    """The review's ``expires_at`` has passed (TTL deletion may lag by days)."""

    def __init__(self, review_id: str, expires_at: int) -> None:
        super().__init__(f"review {review_id!r} expired at {expires_at}")
        self.review_id = review_id
        self.expires_at = expires_at


class ReviewStatus(StrEnum):
    PENDING = "pending_review"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"


@dataclass(frozen=True)
class KeyLayout:
    """Where review items live in the table: key attribute names and the key values' shape."""

    partition_key: str = "PK"
    sort_key: str | None = "SK"
    key_prefix: str = "REVIEW#"
    sort_key_value: str = "META"
    ttl_attribute: str = "ttl"

    @classmethod
    def from_environment(cls) -> KeyLayout:
        """The layout the construct wrote into the function's environment."""
        return cls(
            partition_key=environment.optional("REVIEW_PARTITION_KEY", "PK") or "PK",
            sort_key=environment.optional("REVIEW_SORT_KEY"),
            key_prefix=environment.optional("REVIEW_KEY_PREFIX", "REVIEW#") or "REVIEW#",
            sort_key_value=environment.optional("REVIEW_SORT_KEY_VALUE", "META") or "META",
            ttl_attribute=environment.optional("REVIEW_TTL_ATTRIBUTE", "ttl") or "ttl",
        )

    def key(self, review_id: str) -> dict[str, str]:
        key = {self.partition_key: f"{self.key_prefix}{review_id}"}
        if self.sort_key:
            key[self.sort_key] = self.sort_key_value
        return key


@dataclass(frozen=True)
class Review:
    """A human-approval checkpoint.

    ``state`` is the serialised (JSON) state of the paused workflow. ``expires_at`` is the hard
    deadline for a decision; ``ttl`` only garbage-collects the item, days later at worst.
    """

    review_id: str
    status: ReviewStatus
    state: str
    requested_by: str
    created_at: int
    expires_at: int
    ttl: int
    decided_at: int | None = None
    decided_by: str | None = None
    note: str | None = None
    # Step Functions task token of the paused workflow: kept server-side, never in a link or e-mail.
    task_token: str | None = field(default=None, repr=False)

    def to_item(self, layout: KeyLayout) -> dict[str, Any]:
        attributes: dict[str, Any] = {
            "review_id": self.review_id,
            "status": str(self.status),
            "state": self.state,
            "requested_by": self.requested_by,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            layout.ttl_attribute: self.ttl,
            "decided_at": self.decided_at,
            "decided_by": self.decided_by,
            "note": self.note,
            "task_token": self.task_token,
        }
        return {**layout.key(self.review_id), **{k: v for k, v in attributes.items() if v is not None}}

    @classmethod
    def from_item(cls, item: Mapping[str, Any], layout: KeyLayout | None = None) -> Review:
        ttl_attribute = (layout or KeyLayout()).ttl_attribute
        return cls(
            review_id=str(item["review_id"]),
            status=ReviewStatus(item["status"]),
            state=str(item["state"]),
            requested_by=str(item["requested_by"]),
            created_at=_int(item["created_at"]),
            expires_at=_int(item["expires_at"]),
            ttl=_int(item[ttl_attribute]),
            decided_at=_opt_int(item.get("decided_at")),
            decided_by=_opt_str(item.get("decided_by")),
            note=_opt_str(item.get("note")),
            task_token=_opt_str(item.get("task_token")),
        )


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, Decimal)):
        raise ValueError(f"expected a number (given {value!r})")
    return int(value)


def _opt_int(value: Any) -> int | None:
    return None if value is None else _int(value)


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _marshal(item: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _SERIALIZER.serialize(v) for k, v in item.items()}


def _unmarshal(item: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _DESERIALIZER.deserialize(v) for k, v in item.items()}


def _require_id(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_ID_LENGTH:
        raise InvalidInput(f"{what} must be a non-empty string of at most {MAX_ID_LENGTH} chars")
    return value


def _code(err: ClientError) -> str:
    return str(err.response.get("Error", {}).get("Code", ""))


class ReviewStore:
    """Review records in one table, through a low-level boto3 DynamoDB client.

    ``client`` defaults to one created on first use (standard retry mode); ``clock`` returns
    epoch seconds and defaults to ``time.time``; every timestamp and expiry check uses it.
    ``review_ttl_days``: a review's ``ttl`` is ``created_at`` + this, never earlier than its expiry.
    """

    def __init__(
        self,
        table_name: str,
        *,
        layout: KeyLayout | None = None,
        review_ttl_days: int = 7,
        client: Any | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if isinstance(review_ttl_days, bool) or not isinstance(review_ttl_days, int) or review_ttl_days < 1:
            raise InvalidInput(f"review_ttl_days must be an int >= 1 (given {review_ttl_days!r})")
        self.table_name = table_name
        self.layout = layout or KeyLayout()
        self.review_ttl_seconds = review_ttl_days * 86400
        self._client = client
        self._clock = clock

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = environment.client("dynamodb")
        return self._client

    def _now(self) -> int:
        return int(self._clock())

    def put_review(
        self,
        state: str | Mapping[str, Any],
        *,
        requested_by: str,
        review_id: str | None = None,
        expires_in_seconds: int | None = None,
        task_token: str | None = None,
    ) -> Review:
        """A pending review holding the paused workflow's ``state`` (JSON text or an object).

        ``expires_at`` defaults to now + review_ttl_days; ``ttl`` is never earlier than it.
        ``task_token`` (the paused Step Functions task's) stays on the record for the decider.
        Raises :class:`Conflict` when the review exists already (it is never overwritten).
        """
        _require_id(requested_by, "requested_by")
        state_text = _state_text(state)
        lifetime = self.review_ttl_seconds if expires_in_seconds is None else expires_in_seconds
        if isinstance(lifetime, bool) or not isinstance(lifetime, int) or lifetime < 1:
            raise InvalidInput(f"expires_in_seconds must be >= 1 (given {lifetime!r})")
        now = self._now()
        review = Review(
            review_id=_require_id(review_id or str(uuid.uuid4()), "review_id"),
            status=ReviewStatus.PENDING,
            state=state_text,
            requested_by=requested_by,
            created_at=now,
            expires_at=now + lifetime,
            ttl=now + max(lifetime, self.review_ttl_seconds),
            task_token=task_token or None,
        )
        try:
            self.client.put_item(
                TableName=self.table_name,
                Item=_marshal(review.to_item(self.layout)),
                ConditionExpression="attribute_not_exists(#pk)",
                ExpressionAttributeNames={"#pk": self.layout.partition_key},
            )
        except ClientError as err:
            if _code(err) == _CONDITION_FAILED:
                raise Conflict(f"review {review.review_id!r} exists already") from None
            raise
        return review

    def get_review(self, review_id: str) -> Review | None:
        _require_id(review_id, "review_id")
        response = self.client.get_item(
            TableName=self.table_name, Key=_marshal(self.layout.key(review_id)), ConsistentRead=True
        )
        item = response.get("Item")
        return Review.from_item(_unmarshal(item), self.layout) if item else None

    def decide_review(
        self,
        review_id: str,
        decision: ReviewStatus | str,
        *,
        decided_by: str,
        note: str | None = None,
    ) -> Review:
        """Approve or reject a review: one UpdateItem conditioned on pending and unexpired.

        Raises ReviewNotFound, ReviewNotPending or ReviewExpired; an expired pending review is
        marked ``expired`` on the way (best effort).
        """
        _require_id(review_id, "review_id")
        _require_id(decided_by, "decided_by")
        outcome = _decision(decision)
        now = self._now()
        values: dict[str, Any] = {":status": str(outcome), ":at": now, ":by": decided_by, ":pending": "pending_review"}
        update = "SET #status = :status, decided_at = :at, decided_by = :by"
        if note is not None:
            update += ", note = :note"
            values[":note"] = note
        try:
            response = self.client.update_item(
                TableName=self.table_name,
                Key=_marshal(self.layout.key(review_id)),
                UpdateExpression=update,
                ConditionExpression="attribute_exists(#pk) AND #status = :pending AND expires_at > :at",
                ExpressionAttributeNames={"#pk": self.layout.partition_key, "#status": "status"},
                ExpressionAttributeValues=_marshal(values),
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as err:
            if _code(err) != _CONDITION_FAILED:
                raise
            old = _unmarshal(err.response["Item"]) if err.response.get("Item") else None
            if old is None:
                raise ReviewNotFound(review_id) from None
            if old.get("status") != ReviewStatus.PENDING:
                raise ReviewNotPending(review_id, str(old.get("status"))) from None
            self._mark_expired(review_id, now)
            raise ReviewExpired(review_id, int(old["expires_at"])) from None
        return Review.from_item(_unmarshal(response.get("Attributes", {})), self.layout)

    def _mark_expired(self, review_id: str, now: int) -> None:
        try:
            self.client.update_item(
                TableName=self.table_name,
                Key=_marshal(self.layout.key(review_id)),
                UpdateExpression="SET #status = :expired",
                ConditionExpression="#status = :pending AND expires_at <= :now",
                ExpressionAttributeNames={"#status": "status"},
                ExpressionAttributeValues=_marshal(
                    {":expired": str(ReviewStatus.EXPIRED), ":pending": "pending_review", ":now": now}
                ),
            )
        except ClientError as err:
            if _code(err) != _CONDITION_FAILED:
                raise


def _state_text(state: str | Mapping[str, Any]) -> str:
    if isinstance(state, Mapping):
        return json.dumps(state, sort_keys=True, separators=(",", ":"))
    if isinstance(state, str):
        try:
            json.loads(state)
        except ValueError:
            raise InvalidInput("state must be JSON text or an object") from None
        return state
    raise InvalidInput("state must be JSON text or an object")


def _decision(value: ReviewStatus | str) -> ReviewStatus:
    try:
        outcome = ReviewStatus(value)
    except ValueError:
        outcome = None
    if outcome not in (ReviewStatus.APPROVED, ReviewStatus.REJECTED):
        raise InvalidInput(f"decision must be approved or rejected (given {value!r})")
    return outcome
