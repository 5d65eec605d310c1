"""The approval gate's review records: conditional writes, expiry by the clock, never overwritten."""

from __future__ import annotations

import json

import pytest

from constructs_lib.approval_gate.gate_runtime.records import (
    Conflict,
    InvalidInput,
    ReviewExpired,
    ReviewNotFound,
    ReviewNotPending,
    ReviewStatus,
    ReviewStore,
)
from embedded.clock import START_TIME, FakeClock

WEEK = 7 * 86400


def test_put_review_stores_pending_state_with_seven_day_ttl(store: ReviewStore) -> None:
    review = store.put_review({"export_id": "e-1", "step": 3}, requested_by="ops@example.com")

    assert review.status == ReviewStatus.PENDING
    assert json.loads(review.state) == {"export_id": "e-1", "step": 3}
    assert review.expires_at == START_TIME + WEEK
    assert review.ttl == START_TIME + WEEK
    assert store.get_review(review.review_id) == review


def test_put_review_with_short_expiry_keeps_the_week_long_ttl(store: ReviewStore) -> None:
    review = store.put_review("{}", requested_by="ops", expires_in_seconds=3600)
    assert review.expires_at == START_TIME + 3600
    assert review.ttl == START_TIME + WEEK


def test_put_review_never_overwrites_and_validates_state(store: ReviewStore) -> None:
    store.put_review("{}", requested_by="ops", review_id="r-1")
    with pytest.raises(Conflict):
        store.put_review("{}", requested_by="ops", review_id="r-1")
    with pytest.raises(InvalidInput):
        store.put_review("{not json", requested_by="ops")


@pytest.mark.parametrize("decision", ["approved", "rejected"])
def test_decide_a_pending_unexpired_review(store: ReviewStore, clock: FakeClock, decision: str) -> None:
    # Given a pending review, an hour later
    review = store.put_review("{}", requested_by="ops")
    clock.advance(3600)
    # When a reviewer decides it
    decided = store.decide_review(review.review_id, decision, decided_by="lead", note="ok")
    # Then it records the decision, who and when
    assert decided.status == decision
    assert (decided.decided_by, decided.decided_at, decided.note) == (
        "lead",
        START_TIME + 3600,
        "ok",
    )
    assert store.get_review(review.review_id) == decided


def test_a_decided_review_cannot_be_decided_again(store: ReviewStore) -> None:
    review = store.put_review("{}", requested_by="ops")
    store.decide_review(review.review_id, "approved", decided_by="lead")
    with pytest.raises(ReviewNotPending) as caught:
        store.decide_review(review.review_id, "rejected", decided_by="other")
    assert caught.value.status == "approved"
    assert store.get_review(review.review_id).decided_by == "lead"  # type: ignore[union-attr]


@pytest.mark.parametrize("late_by", [0, 1, 86400])
def test_an_expired_review_cannot_be_decided_even_before_ttl_deletes_it(
    store: ReviewStore, clock: FakeClock, late_by: int
) -> None:
    # Given a review that expires in an hour, and the clock at or past that moment
    review = store.put_review("{}", requested_by="ops", expires_in_seconds=3600)
    clock.advance(3600 + late_by)
    # When someone approves it (the item is still there: TTL deletion lags)
    with pytest.raises(ReviewExpired) as caught:
        store.decide_review(review.review_id, "approved", decided_by="lead")
    # Then it is refused and marked expired
    assert caught.value.expires_at == START_TIME + 3600
    stored = store.get_review(review.review_id)
    assert stored is not None
    assert stored.status == ReviewStatus.EXPIRED
    assert stored.decided_by is None


def test_decide_review_just_before_expiry_succeeds(store: ReviewStore, clock: FakeClock) -> None:
    review = store.put_review("{}", requested_by="ops", expires_in_seconds=3600)
    clock.advance(3599)
    assert store.decide_review(review.review_id, "rejected", decided_by="lead").status == "rejected"


def test_decide_review_errors(store: ReviewStore) -> None:
    with pytest.raises(ReviewNotFound):
        store.decide_review("no-such-review", "approved", decided_by="lead")
    review = store.put_review("{}", requested_by="ops")
    for bad in ("pending_review", "expired", "maybe"):
        with pytest.raises(InvalidInput):
            store.decide_review(review.review_id, bad, decided_by="lead")
