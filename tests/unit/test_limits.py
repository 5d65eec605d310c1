"""The chat's limits in the table: message-rate buckets and live-connection slots, on moto."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from lambdas.shared import keys
from lambdas.shared.serialize import marshal_item, unmarshal_item
from lambdas.shared.store import Admission, DynamoSessionStore
from lambdas.shared.store.limits import CONNECTION_SCOPE, CUSTOMER_SCOPE, MAX_CONNECTION_SECONDS
from tests.support.clock import FakeClock


def take(store: DynamoSessionStore, subject: str = "conn-1", per_minute: int = 6, burst: int = 3) -> Admission:
    return store.take_message_token(CONNECTION_SCOPE, subject, per_minute=per_minute, burst=burst)


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
    assert store.take_message_token(CUSTOMER_SCOPE, "conn-1", per_minute=6, burst=3).admitted


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
    item = store.client.get_item(
        TableName=store.table_name, Key=marshal_item(keys.rate_bucket_key(CONNECTION_SCOPE, "conn-1"))
    )["Item"]
    assert int(unmarshal_item(item)["ttl"]) > clock()


@pytest.mark.parametrize(("per_minute", "burst"), [(0, 3), (6, 0), (True, 3)])
def test_fails_with_a_limit_that_is_not_positive(store: DynamoSessionStore, per_minute: Any, burst: Any) -> None:
    with pytest.raises(ValueError, match="must be an int >= 1"):
        take(store, per_minute=per_minute, burst=burst)


def test_connection_slots_cap_a_customer_and_free_on_close(store: DynamoSessionStore) -> None:
    assert store.open_connection_slot("alice", "c1", cap=2).admitted
    assert store.open_connection_slot("alice", "c2", cap=2).admitted
    assert store.open_connection_slot("alice", "c1", cap=2).admitted  # a retried $connect keeps its slot
    refused = store.open_connection_slot("alice", "c3", cap=2)
    assert not refused.admitted
    assert refused.retry_after_seconds == MAX_CONNECTION_SECONDS
    assert store.open_connection_slot("bob", "c9", cap=2).admitted  # another customer is not counted
    store.close_connection_slot("alice", "c1")
    store.close_connection_slot("alice", "c1")  # twice is harmless
    store.close_connection_slot("nobody", "c1")
    assert store.open_connection_slot("alice", "c3", cap=2).admitted


def test_slots_of_connections_that_must_have_ended_are_freed(store: DynamoSessionStore, clock: FakeClock) -> None:
    # Given two slots whose $disconnect never came
    store.open_connection_slot("alice", "c1", cap=2)
    store.open_connection_slot("alice", "c2", cap=2)
    # When API Gateway's maximum connection duration has passed
    clock.advance(MAX_CONNECTION_SECONDS)
    # Then new connections get their slots
    assert store.open_connection_slot("alice", "c3", cap=2).admitted
    assert store.open_connection_slot("alice", "c4", cap=2).admitted
    assert not store.open_connection_slot("alice", "c5", cap=2).admitted
