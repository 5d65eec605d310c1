"""The chat's limits in the table: message-rate buckets and live-connection slots, on moto."""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from embedded.clock import FakeClock
from lambdas.shared import keys
from lambdas.shared.serialize import marshal_item, unmarshal_item
from lambdas.shared.store import Admission, DynamoSessionStore
from lambdas.shared.store.limits import CONNECTION_SCOPE, CUSTOMER_SCOPE, MAX_CONNECTION_SECONDS


def take(store: DynamoSessionStore, subject: str = "conn-1", per_minute: int = 6, burst: int = 3) -> Admission:
    return store.limits.take_message_token(CONNECTION_SCOPE, subject, per_minute=per_minute, burst=burst)


@contextmanager
def recorded_calls(store: DynamoSessionStore) -> Iterator[list[str]]:
    """Every DynamoDB operation the store's client makes inside the block."""
    calls: list[str] = []

    def record(**kwargs: Any) -> None:
        calls.append(kwargs["model"].name)

    store.table.client.meta.events.register("before-call.dynamodb.*", record)
    try:
        yield calls
    finally:
        store.table.client.meta.events.unregister("before-call.dynamodb.*", record)


def test_a_new_or_idle_bucket_admits_in_one_write_and_a_burst_in_two(
    store: DynamoSessionStore, clock: FakeClock
) -> None:
    # A new bucket: one conditional write
    with recorded_calls(store) as calls:
        assert take(store).admitted
    assert calls == ["UpdateItem"]
    # In a burst (the previous message less than an interval ago): the idle write fails, the burst write holds
    with recorded_calls(store) as calls:
        assert take(store).admitted
    assert calls == ["UpdateItem", "UpdateItem"]
    # A person typing, a message further apart than the interval: one write again
    clock.advance(60)
    with recorded_calls(store) as calls:
        assert take(store).admitted
    assert calls == ["UpdateItem"]


def test_a_bucket_item_outlives_the_moment_its_bucket_is_full_again(store: DynamoSessionStore) -> None:
    # TTL may remove a bucket only once it would be full anyway: earlier, a burst would start over
    for _ in range(3):
        assert take(store).admitted
        item = store.table.get(keys.rate_bucket_key(CONNECTION_SCOPE, "conn-1"))
        assert item is not None
        assert item["ttl"] >= math.ceil(int(item["tat"]) / 1000) + 60


def test_an_empty_bucket_refuses_after_one_call(store: DynamoSessionStore) -> None:
    for _ in range(3):
        take(store)
    with recorded_calls(store) as calls:
        assert take(store) == Admission(False, 10)
    assert calls == ["UpdateItem"]


def test_a_token_given_back_is_as_if_never_taken(store: DynamoSessionStore, clock: FakeClock) -> None:
    # Given a bucket with its last token taken
    for _ in range(3):
        take(store)
    # When one of those messages gives its token back
    store.limits.give_back_message_token(CONNECTION_SCOPE, "conn-1", per_minute=6)
    # Then exactly one more message is admitted now, and the refill goes on at the rate
    assert take(store).admitted
    assert take(store) == Admission(False, 10)
    clock.advance(10)
    assert take(store).admitted


def test_giving_back_to_a_bucket_that_is_gone_changes_nothing(store: DynamoSessionStore) -> None:
    store.limits.give_back_message_token(CONNECTION_SCOPE, "never-used", per_minute=6)
    item = store.table.client.get_item(
        TableName=store.table.table_name, Key=marshal_item(keys.rate_bucket_key(CONNECTION_SCOPE, "never-used"))
    )
    assert "Item" not in item
    assert [take(store, "never-used").admitted for _ in range(4)] == [True, True, True, False]


def test_a_token_given_back_after_the_bucket_idled_earns_no_more_than_a_full_bucket(
    store: DynamoSessionStore, clock: FakeClock
) -> None:
    take(store)
    clock.advance(3600)
    store.limits.give_back_message_token(CONNECTION_SCOPE, "conn-1", per_minute=6)
    assert [take(store).admitted for _ in range(4)] == [True, True, True, False]


def test_a_full_bucket_admits_its_burst_then_refuses_with_the_wait(store: DynamoSessionStore) -> None:
    # 6 a minute: one message every 10 s; a burst of 3
    assert [take(store).admitted for _ in range(3)] == [True, True, True]
    refused = take(store)
    assert refused == Admission(False, 10)


def test_the_bucket_refills_at_the_rate(store: DynamoSessionStore, clock: FakeClock) -> None:
    for _ in range(3):
        take(store)
    clock.advance(5)
    assert take(store) == Admission(False, 5)
    clock.advance(5)
    assert take(store).admitted
    assert not take(store).admitted


def test_an_idle_bucket_holds_no_more_than_its_burst(store: DynamoSessionStore, clock: FakeClock) -> None:
    take(store)
    clock.advance(3600)  # an hour idle earns no more than a full bucket
    assert [take(store).admitted for _ in range(4)] == [True, True, True, False]


def test_buckets_are_separate_per_subject_and_scope(store: DynamoSessionStore) -> None:
    for _ in range(3):
        take(store, "conn-1")
    assert not take(store, "conn-1").admitted
    assert take(store, "conn-2").admitted
    assert store.limits.take_message_token(CUSTOMER_SCOPE, "conn-1", per_minute=6, burst=3).admitted


def test_concurrent_takers_never_share_a_token(make_store: Any, ddb_client: Any) -> None:
    # Given 20 threads, each with its own store (as separate Lambdas), racing for a burst of 5
    results: list[bool] = []
    lock = threading.Lock()

    def racer() -> None:
        outcome = take(make_store(), "hot", per_minute=1, burst=5).admitted
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=racer) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Then exactly the burst is admitted
    assert results.count(True) == 5


def test_a_bucket_item_expires_after_it_is_full_again(store: DynamoSessionStore, clock: FakeClock) -> None:
    take(store)
    item = store.table.client.get_item(
        TableName=store.table.table_name, Key=marshal_item(keys.rate_bucket_key(CONNECTION_SCOPE, "conn-1"))
    )["Item"]
    assert int(unmarshal_item(item)["ttl"]) > clock()


@pytest.mark.parametrize(("per_minute", "burst"), [(0, 3), (6, 0), (True, 3)])
def test_fails_with_a_limit_that_is_not_positive(store: DynamoSessionStore, per_minute: Any, burst: Any) -> None:
    with pytest.raises(ValueError, match="must be an int >= 1"):
        take(store, per_minute=per_minute, burst=burst)


def test_the_slots_item_expires_a_minute_after_its_latest_slot_could_end(
    store: DynamoSessionStore, clock: FakeClock
) -> None:
    # The first slot creates the item, a later one extends it: TTL never removes a live slot
    assert store.limits.open_connection_slot("alice", "c1", cap=2).admitted
    first = store.table.get(keys.connection_slots_key("alice"))
    assert first is not None
    assert first["ttl"] == int(clock()) + MAX_CONNECTION_SECONDS + 60
    clock.advance(600)
    assert store.limits.open_connection_slot("alice", "c2", cap=2).admitted
    later = store.table.get(keys.connection_slots_key("alice"))
    assert later is not None
    assert later["ttl"] == int(clock()) + MAX_CONNECTION_SECONDS + 60


def test_connection_slots_cap_a_customer_and_free_on_close(store: DynamoSessionStore) -> None:
    assert store.limits.open_connection_slot("alice", "c1", cap=2).admitted
    assert store.limits.open_connection_slot("alice", "c2", cap=2).admitted
    assert store.limits.open_connection_slot("alice", "c1", cap=2).admitted  # a retried $connect keeps its slot
    refused = store.limits.open_connection_slot("alice", "c3", cap=2)
    assert not refused.admitted
    assert refused.retry_after_seconds == MAX_CONNECTION_SECONDS
    assert store.limits.open_connection_slot("bob", "c9", cap=2).admitted  # another customer is not counted
    store.limits.close_connection_slot("alice", "c1")
    store.limits.close_connection_slot("alice", "c1")  # twice is harmless
    store.limits.close_connection_slot("nobody", "c1")
    assert store.limits.open_connection_slot("alice", "c3", cap=2).admitted


def test_slots_of_connections_that_must_have_ended_are_freed(store: DynamoSessionStore, clock: FakeClock) -> None:
    # Given two slots whose $disconnect never came
    store.limits.open_connection_slot("alice", "c1", cap=2)
    store.limits.open_connection_slot("alice", "c2", cap=2)
    # When API Gateway's maximum connection duration has passed
    clock.advance(MAX_CONNECTION_SECONDS)
    # Then new connections get their slots
    assert store.limits.open_connection_slot("alice", "c3", cap=2).admitted
    assert store.limits.open_connection_slot("alice", "c4", cap=2).admitted
    assert not store.limits.open_connection_slot("alice", "c5", cap=2).admitted


# ------------------------------------------------------------------ the stage's cap on model calls


def take_call(
    store: DynamoSessionStore, per_second: int = 4, buckets: int = 1, picks: list[int] | None = None
) -> Admission:
    queue = list(picks or [])
    return store.limits.take_model_call(
        per_second=per_second, buckets=buckets, pick=lambda n: queue.pop(0) if queue else 0
    )


def test_the_model_call_cap_admits_a_seconds_worth_then_refuses_for_a_second(
    store: DynamoSessionStore, clock: FakeClock
) -> None:
    # 4 calls a second in one bucket: a burst of 4, then a wait of at least one whole second
    assert [take_call(store).admitted for _ in range(4)] == [True, True, True, True]
    assert take_call(store) == Admission(False, 1)
    clock.advance(1)
    assert take_call(store).admitted
    item = store.table.client.get_item(
        TableName=store.table.table_name, Key=marshal_item(keys.rate_bucket_key("model", "0"))
    )["Item"]
    assert "ttl" in unmarshal_item(item)


def test_a_cap_split_over_buckets_tries_a_second_bucket_before_refusing(store: DynamoSessionStore) -> None:
    # 4 a second over 2 buckets: 2 each; bucket 0 is emptied, then a call that picks it lands on bucket 1
    assert [take_call(store, buckets=2, picks=[0, 0]).admitted for _ in range(2)] == [True, True]
    assert take_call(store, buckets=2, picks=[0, 0]).admitted  # bucket 0 empty: bucket 1 admits
    assert take_call(store, buckets=2, picks=[1, 0]).admitted  # bucket 1's second call
    refused = take_call(store, buckets=2, picks=[0, 0])
    assert refused == Admission(False, 1)
    assert store.table.client.get_item(
        TableName=store.table.table_name, Key=marshal_item(keys.rate_bucket_key("model", "1"))
    ).get("Item")


@pytest.mark.parametrize(
    ("per_second", "buckets", "named"),
    [(0, 1, "per_second must be an int"), (4, 0, "buckets must be an int"), (2, 3, r"buckets must be <= per_second")],
)
def test_fails_with_a_model_call_cap_that_cannot_hold(
    store: DynamoSessionStore, per_second: int, buckets: int, named: str
) -> None:
    with pytest.raises(ValueError, match=named):
        take_call(store, per_second=per_second, buckets=buckets)


def test_fails_with_a_slot_cap_that_is_not_positive(store: DynamoSessionStore) -> None:
    with pytest.raises(ValueError, match="cap must be an int >= 1"):
        store.limits.open_connection_slot("alice", "c1", cap=0)


def _slots_item(store: DynamoSessionStore, customer: str = "alice") -> dict[str, Any]:
    item = store.table.get(keys.connection_slots_key(customer))
    assert item is not None
    return item


def test_the_slots_item_expires_a_minute_after_its_latest_slot_must_have_ended(
    store: DynamoSessionStore, clock: FakeClock
) -> None:
    store.limits.open_connection_slot("alice", "c1", cap=2)  # creates the item
    assert int(_slots_item(store)["ttl"]) == clock() + MAX_CONNECTION_SECONDS + 60
    clock.advance(30)
    store.limits.open_connection_slot("alice", "c2", cap=2)  # updates it
    assert int(_slots_item(store)["ttl"]) == clock() + MAX_CONNECTION_SECONDS + 60


def test_a_refused_slot_waits_for_the_first_slot_to_end_and_never_less_than_a_second(
    store: DynamoSessionStore, clock: FakeClock
) -> None:
    store.limits.open_connection_slot("alice", "c1", cap=1)
    clock.advance(MAX_CONNECTION_SECONDS - 1)
    assert store.limits.open_connection_slot("alice", "c2", cap=1) == Admission(False, 1)


def test_a_first_slot_created_by_a_concurrent_connection_is_shared_not_lost(
    store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given another $connect of alice that creates her slots item just before this one does
    put_new = store.table.put_new

    def raced(item: Any) -> None:
        monkeypatch.setattr(store.table, "put_new", put_new)
        put_new({**item, "live": {"c2": item["live"]["c1"]}})
        put_new(item)

    monkeypatch.setattr(store.table, "put_new", raced)
    # When this one opens its slot, Then it takes one beside the other's
    assert store.limits.open_connection_slot("alice", "c1", cap=2).admitted
    assert sorted(_slots_item(store)["live"]) == ["c1", "c2"]


def test_a_split_cap_falls_back_on_a_bucket_other_than_the_first_and_any_of_the_others(
    store: DynamoSessionStore,
) -> None:
    # 4 calls a second over 4 buckets: one each; bucket 2 is emptied first
    asked: list[int] = []

    def take_picking(first: int, other: int) -> Admission:
        picks = [first, other]

        def pick(n: int) -> int:
            asked.append(n)
            return picks.pop(0)

        return store.limits.take_model_call(per_second=4, buckets=4, pick=pick)

    assert take_picking(2, 0).admitted
    assert asked == [4, 3]  # the first among all four buckets, the fallback among the three others
    # Each of the other three is reachable as the fallback: 3, 0, 1, never 2 again
    for other in range(3):
        assert take_picking(2, other).admitted
    assert take_picking(2, 0) == Admission(False, 1)
    written = {bucket: store.table.get(keys.rate_bucket_key("model", str(bucket))) is not None for bucket in range(4)}
    assert written == {0: True, 1: True, 2: True, 3: True}


def test_a_cap_of_one_call_a_second_admits_one_and_the_next_a_second_later(
    store: DynamoSessionStore, clock: FakeClock
) -> None:
    assert take_call(store, per_second=1).admitted
    assert take_call(store, per_second=1) == Admission(False, 1)
    clock.advance(1)
    assert take_call(store, per_second=1).admitted


def test_as_many_buckets_as_calls_a_second_is_a_cap_that_holds(store: DynamoSessionStore) -> None:
    assert take_call(store, per_second=2, buckets=2).admitted
