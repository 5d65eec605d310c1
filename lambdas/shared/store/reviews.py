"""Review records of the human-approval gate: a pending review, decided once before it expires."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError

from lambdas.shared import keys
from lambdas.shared.errors import Conflict, InvalidInput, ReviewExpired, ReviewNotFound, ReviewNotPending
from lambdas.shared.records import Review, ReviewStatus
from lambdas.shared.schema import PARTITION_KEY
from lambdas.shared.store.table import (
    CONDITION_FAILED,
    Expr,
    TableCore,
    Update,
    code_of,
    old_item,
    parse_enum,
    require_id,
)


class Reviews(TableCore):
    """Review operations."""

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
        """
        require_id(requested_by, "requested_by")
        if isinstance(state, Mapping):
            state_text = json.dumps(state, sort_keys=True, separators=(",", ":"))
        elif isinstance(state, str):
            try:
                json.loads(state)
            except ValueError:
                raise InvalidInput("state must be JSON text or an object") from None
            state_text = state
        else:
            raise InvalidInput("state must be JSON text or an object")
        lifetime = self.review_ttl_seconds if expires_in_seconds is None else expires_in_seconds
        if isinstance(lifetime, bool) or not isinstance(lifetime, int) or lifetime < 1:
            raise InvalidInput(f"expires_in_seconds must be >= 1 (given {lifetime!r})")
        now = self._now()
        review = Review(
            review_id=require_id(review_id or str(uuid.uuid4()), "review_id"),
            status=ReviewStatus.PENDING,
            state=state_text,
            requested_by=requested_by,
            created_at=now,
            expires_at=now + lifetime,
            ttl=now + max(lifetime, self.review_ttl_seconds),
            task_token=task_token or None,
        )
        try:
            self._put_new(review.to_item())
        except ClientError as err:
            if code_of(err) == CONDITION_FAILED:
                raise Conflict(f"review {review.review_id!r} exists already") from None
            raise
        return review

    def get_review(self, review_id: str) -> Review | None:
        require_id(review_id, "review_id")
        item = self._get(keys.review_key(review_id))
        return Review.from_item(item) if item else None

    def decide_review(
        self,
        review_id: str,
        decision: ReviewStatus | str,
        *,
        decided_by: str,
        note: str | None = None,
    ) -> Review:
        """Approve or reject a review: one UpdateItem conditioned on pending and unexpired.

        Expiry is ``expires_at`` against the store's clock, not TTL (whose deletion lags).
        Raises ReviewNotFound, ReviewNotPending or ReviewExpired; an expired pending review is
        marked ``expired`` on the way (best effort).
        """
        require_id(review_id, "review_id")
        require_id(decided_by, "decided_by")
        outcome = parse_enum(ReviewStatus, decision, "decision")
        if outcome not in (ReviewStatus.APPROVED, ReviewStatus.REJECTED):
            raise InvalidInput(f"decision must be approved or rejected (given {decision!r})")
        now = self._now()
        expr = Expr()
        update = Update(expr)
        update.set("status", str(outcome))
        update.set("decided_at", now)
        update.set("decided_by", decided_by)
        if note is not None:
            update.set("note", note)
        status, now_value = expr.n("status"), expr.v(now)
        condition = (
            f"attribute_exists({expr.n(PARTITION_KEY)}) AND "
            f"{status} = {expr.v(str(ReviewStatus.PENDING))} AND "
            f"{expr.n('expires_at')} > {now_value}"
        )
        try:
            item = self._update(keys.review_key(review_id), update, condition)
        except ClientError as err:
            if code_of(err) != CONDITION_FAILED:
                raise
            old = old_item(err)
            if old is None:
                raise ReviewNotFound(review_id) from None
            if old.get("status") != ReviewStatus.PENDING:
                raise ReviewNotPending(review_id, str(old.get("status"))) from None
            self._mark_review_expired(review_id, now)
            raise ReviewExpired(review_id, int(old["expires_at"])) from None
        return Review.from_item(item)

    def _mark_review_expired(self, review_id: str, now: int) -> None:
        expr = Expr()
        update = Update(expr)
        update.set("status", str(ReviewStatus.EXPIRED))
        status = expr.n("status")
        condition = f"{status} = {expr.v(str(ReviewStatus.PENDING))} AND {expr.n('expires_at')} <= {expr.v(now)}"
        try:
            self._update(keys.review_key(review_id), update, condition, return_values="NONE")
        except ClientError as err:
            if code_of(err) != CONDITION_FAILED:
                raise
