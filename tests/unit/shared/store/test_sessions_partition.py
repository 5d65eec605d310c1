"""SessionStore: whole-partition operations (archive listing, invalidation, batch deletes)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from lambdas.shared import keys
from lambdas.shared.errors import BatchWriteIncomplete, InvalidCursor, InvalidInput
from lambdas.shared.records import Handoff, Session, Summary, Turn
from lambdas.shared.store import DynamoSessionStore


def _session_with_items(store: DynamoSessionStore, turns: int) -> str:
    """A session with ``turns`` turns, one summary per 10 turns and one handoff."""
    session_id = store.sessions.create_session("cust-1").session_id
    for n in range(1, turns + 1):
        store.turns.add_turn(session_id, "user", f"m{n}")
        if n % 10 == 0:
            store.turns.put_summary(
                session_id,
                n // 10,
                summary_text=f"up to {n}",
                window_start=n - 9,
                window_end=n,
                turn_count_at_summary=n,
            )
    store.handoffs.put_handoff(session_id, reason="billing")
    return session_id


def _partition_sks(store: DynamoSessionStore, session_id: str) -> list[str]:
    resp = store.table.client.query(
        TableName=store.table.table_name,
        KeyConditionExpression="PK = :pk",
        ExpressionAttributeValues={":pk": {"S": keys.session_pk(session_id)}},
    )
    return [item["SK"]["S"] for item in resp["Items"]]


class FlakyBatchWrites:
    """Wraps a client's batch_write_item to inject UnprocessedItems.

    Call ``i`` really writes only the first ``processed[i]`` requests and hands the rest back
    as UnprocessedItems, the way DynamoDB does under throttling; calls beyond the schedule
    behave normally.
    """

    def __init__(self, client: Any, processed: list[int]) -> None:
        self._real = client.batch_write_item
        self.processed = processed
        self.calls: list[int] = []

    def __call__(self, **params: Any) -> dict[str, Any]:
        ((table, requests),) = params["RequestItems"].items()
        call = len(self.calls)
        self.calls.append(len(requests))
        if call >= len(self.processed):
            return self._real(**params)
        done, left = requests[: self.processed[call]], requests[self.processed[call] :]
        if done:
            self._real(RequestItems={table: done})
        return {"UnprocessedItems": {table: left} if left else {}}


# ------------------------------------------------------------------ list_session_items


def test_list_session_items_returns_every_record_typed_and_paged(
    store: DynamoSessionStore,
) -> None:
    # Given a session with 25 turns, 2 summaries and a handoff
    session_id = _session_with_items(store, 25)
    # When all its items are listed 7 at a time
    records: list[Any] = []
    cursor = None
    while True:
        page = store.sessions.list_session_items(session_id, limit=7, cursor=cursor)
        records += page.items
        cursor = page.next_cursor
        if cursor is None:
            break
    # Then every item comes once, as its record type
    kinds = [type(record) for record in records]
    assert kinds.count(Session) == 1
    assert kinds.count(Turn) == 25
    assert kinds.count(Summary) == 2
    assert kinds.count(Handoff) == 1
    assert sorted(t.turn_number for t in records if isinstance(t, Turn)) == list(range(1, 26))


def test_items_cursor_cannot_read_another_session(store: DynamoSessionStore) -> None:
    mine, theirs = _session_with_items(store, 3), _session_with_items(store, 3)
    cursor = store.sessions.list_session_items(mine, limit=2).next_cursor
    assert cursor is not None
    with pytest.raises(InvalidCursor):
        store.sessions.list_session_items(theirs, limit=2, cursor=cursor)


# ------------------------------------------------------------------ invalidate


def test_invalidate_deletes_only_the_given_prefixes(store: DynamoSessionStore) -> None:
    # Given a session with turns, summaries and a handoff, and another session
    session_id = _session_with_items(store, 30)
    other = _session_with_items(store, 10)
    # When its summaries are invalidated
    deleted = store.sessions.invalidate(session_id, [keys.SUMMARY_PREFIX])
    # Then exactly the 3 summaries are gone, everything else stays
    assert deleted == 3
    remaining = _partition_sks(store, session_id)
    assert not [sk for sk in remaining if sk.startswith(keys.SUMMARY_PREFIX)]
    assert len(remaining) == 1 + 30 + 1
    assert len(_partition_sks(store, other)) == 1 + 10 + 1 + 1


def test_invalidate_several_prefixes(store: DynamoSessionStore) -> None:
    session_id = _session_with_items(store, 12)
    assert store.sessions.invalidate(session_id, [keys.TURN_PREFIX, keys.HANDOFF_PREFIX]) == 13
    assert _partition_sks(store, session_id) == ["META", keys.summary_sk(1)]


@pytest.mark.parametrize("prefixes", [[], ["META"], [""], ["SESSION#"], "TURN#"])
def test_invalidate_refuses_meta_and_unknown_prefixes(store: DynamoSessionStore, prefixes: Any) -> None:
    session_id = _session_with_items(store, 1)
    with pytest.raises(InvalidInput):
        store.sessions.invalidate(session_id, prefixes)
    assert "META" in _partition_sks(store, session_id)


# ------------------------------------------------------------------ delete_session_items


def test_delete_session_items_keeps_meta_by_default(store: DynamoSessionStore) -> None:
    # Given a session with 60 children and a hook counting BatchWriteItem calls
    session_id = _session_with_items(store, 53)
    calls: list[str] = []
    store.table.client.meta.events.register("before-call.dynamodb.BatchWriteItem", lambda **kw: calls.append("batch"))
    # When its items are deleted
    deleted = store.sessions.delete_session_items(session_id)
    # Then all 59 children are gone in ceil(59/25) batches and META stays
    assert deleted == 53 + 5 + 1
    assert len(calls) == math.ceil(59 / 25)
    assert _partition_sks(store, session_id) == ["META"]
    assert store.sessions.get_session(session_id) is not None


def test_delete_session_items_can_delete_meta_too(store: DynamoSessionStore) -> None:
    session_id = _session_with_items(store, 5)
    assert store.sessions.delete_session_items(session_id, keep_meta=False) == 1 + 5 + 1
    assert _partition_sks(store, session_id) == []
    assert store.sessions.delete_session_items(session_id, keep_meta=False) == 0


def test_batch_deletes_survive_unprocessed_items(
    store: DynamoSessionStore, sleeps: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given 60 items and a client whose first 4 batch writes only process 10 items each
    session_id = _session_with_items(store, 54)
    flaky = FlakyBatchWrites(store.table.client, processed=[10, 10, 10, 10])
    monkeypatch.setattr(store.table.client, "batch_write_item", flaky)
    # When the session's items are deleted
    deleted = store.sessions.delete_session_items(session_id)
    # Then every item is gone, the unprocessed ones were resent with exponential backoff
    assert deleted == 54 + 5 + 1
    assert _partition_sks(store, session_id) == ["META"]
    assert flaky.calls[:5] == [25, 15, 5, 25, 15]
    assert sleeps[:3] == [0.05, 0.1, 0.05]  # rand() == 1.0: each delay is its cap


def test_batch_deletes_raise_with_the_count_left_when_the_bound_is_hit(
    make_store: Callable[..., DynamoSessionStore],
    sleeps: list[float],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given 40 items and a table that throttles every write after the first 20 deletes
    store = make_store(max_batch_retries=3, backoff_base_seconds=0.1, backoff_cap_seconds=0.3)
    session_id = _session_with_items(store, 36)
    flaky = FlakyBatchWrites(store.table.client, processed=[20] + [0] * 100)
    monkeypatch.setattr(store.table.client, "batch_write_item", flaky)
    # When the session's items are deleted
    with pytest.raises(BatchWriteIncomplete) as caught:
        store.sessions.delete_session_items(session_id)
    # Then it gave up after 3 retries, saying 20 items are left (5 unprocessed + 15 unsent)
    assert caught.value.remaining == 20
    assert caught.value.deleted == 20
    assert flaky.calls == [25, 5, 5, 5]
    assert sleeps == [0.1, 0.2, 0.3]  # exponential, capped
    assert len(_partition_sks(store, session_id)) == 1 + 20
    # And a later run, once throttling is over, finishes the job
    monkeypatch.setattr(store.table.client, "batch_write_item", flaky._real)
    assert store.sessions.delete_session_items(session_id) == 20
    assert _partition_sks(store, session_id) == ["META"]


def test_backoff_uses_full_jitter(make_store: Callable[..., DynamoSessionStore]) -> None:
    store = make_store(rand=lambda: 0.25, backoff_base_seconds=1.0, backoff_cap_seconds=4.0)
    assert [store.table.backoff(n) for n in range(4)] == [0.25, 0.5, 1.0, 1.0]
