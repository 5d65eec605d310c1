"""SessionStore's listings refuse a cursor that points anywhere but the listing it was issued for.

Each case starts from a cursor the listing issued, changes one field of its position (or its
scope), and encodes it again, as a client forging one would.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest

from embedded.clock import START_TIME, FakeClock
from lambdas.shared import cursor as cursors
from lambdas.shared import keys
from lambdas.shared.errors import InvalidCursor, InvalidInput
from lambdas.shared.schema import CLEANUP, CUSTOMER_SESSIONS, SESSIONS_BY_STATUS
from lambdas.shared.store import DynamoSessionStore

OTHER_SESSION = "SESSION#00000000-0000-4000-8000-000000000000"


def _issued(listing: Callable[..., Any], scope: str, *shapes: dict[str, type]) -> dict[str, Any]:
    """The position of the cursor ``listing`` issues after its first item."""
    page = listing(limit=1)
    assert page.next_cursor is not None
    return dict(cursors.decode(page.next_cursor, scope, *shapes))


def _sessions(store: DynamoSessionStore, customer: str = "alice", count: int = 2) -> list[str]:
    return [store.sessions.create_session(customer).session_id for _ in range(count)]


CUSTOMER_SHAPE = {"PK": str, "SK": str, CUSTOMER_SESSIONS.partition_key: str, CUSTOMER_SESSIONS.sort_key: int}


@pytest.mark.parametrize(
    "forged",
    [
        {CUSTOMER_SESSIONS.partition_key: "bob"},
        {"SK": "TURN#0000000001"},
        {"PK": "AGENT#alice"},
    ],
)
def test_a_customers_listing_refuses_a_cursor_moved_off_her_sessions(
    store: DynamoSessionStore, forged: dict[str, Any]
) -> None:
    _sessions(store)
    scope = "customer:alice"
    position = _issued(functools.partial(store.sessions.list_customer_sessions, "alice"), scope, CUSTOMER_SHAPE)
    assert store.sessions.list_customer_sessions("alice", cursor=cursors.encode(scope, position)).items
    with pytest.raises(InvalidCursor):
        store.sessions.list_customer_sessions("alice", cursor=cursors.encode(scope, {**position, **forged}))


def test_a_customers_cursor_is_hers_alone(store: DynamoSessionStore) -> None:
    _sessions(store)
    listing = functools.partial(store.sessions.list_customer_sessions, "alice")
    position = _issued(listing, "customer:alice", CUSTOMER_SHAPE)
    with pytest.raises(InvalidCursor):
        store.sessions.list_customer_sessions("bob", cursor=cursors.encode("customer:alice", position))


STATUS_SHAPE = {"PK": str, "SK": str, SESSIONS_BY_STATUS.partition_key: str, SESSIONS_BY_STATUS.sort_key: str}


@pytest.mark.parametrize(
    "forged",
    [
        {SESSIONS_BY_STATUS.partition_key: keys.status_pk("deleted")},
        {"SK": "TURN#0000000001"},
        {"PK": "AGENT#00000000-0000-4000-8000-000000000000"},
        {"PK": "SESSION#not-a-session-id"},
        {"PK": OTHER_SESSION},  # its status sort key still names the issued session
    ],
)
def test_a_status_listing_refuses_a_cursor_moved_off_its_sessions(
    store: DynamoSessionStore, forged: dict[str, Any]
) -> None:
    _sessions(store)
    position = _issued(functools.partial(store.sessions.list_by_status, "active"), "status:active", STATUS_SHAPE)
    assert store.sessions.list_by_status("active", cursor=cursors.encode("status:active", position)).items
    with pytest.raises(InvalidCursor):
        store.sessions.list_by_status("active", cursor=cursors.encode("status:active", {**position, **forged}))


def test_a_status_cursor_naming_its_session_without_the_sessions_prefix_is_refused(store: DynamoSessionStore) -> None:
    _sessions(store)
    position = _issued(functools.partial(store.sessions.list_by_status, "active"), "status:active", STATUS_SHAPE)
    bare = str(position["PK"]).removeprefix(keys.SESSION_PREFIX)
    with pytest.raises(InvalidCursor):
        store.sessions.list_by_status("active", cursor=cursors.encode("status:active", {**position, "PK": bare}))


def test_fails_on_a_status_that_is_not_one_naming_it(store: DynamoSessionStore) -> None:
    with pytest.raises(InvalidInput, match="status"):
        store.sessions.list_by_status("sleeping")


CLEANUP_SHAPE = {"shard": int, "PK": str, "SK": str, CLEANUP.partition_key: str, CLEANUP.sort_key: int}


@pytest.fixture
def waiting_for_cleanup(store: DynamoSessionStore, clock: FakeClock) -> int:
    """Sessions disconnected at START_TIME; the ``older_than`` that lists them."""
    for session_id in _sessions(store, count=2 * store.table.cleanup_shards):
        store.sessions.update_status(session_id, "disconnected")
    clock.advance(10)
    return START_TIME + 5


def _cleanup_position(store: DynamoSessionStore, older_than: int) -> tuple[str, dict[str, Any]]:
    """A cursor's position the sweep issued in the middle of a shard (one that holds a key)."""
    scope = f"cleanup:{older_than}:{store.table.cleanup_shards}"
    cursor = None
    while True:
        page = store.sessions.sessions_awaiting_cleanup(older_than, limit=1, cursor=cursor)
        assert page.next_cursor is not None, "no shard held two sessions"
        cursor = page.next_cursor
        position = dict(cursors.decode(cursor, scope, {"shard": int}, CLEANUP_SHAPE))
        if CLEANUP.partition_key in position:
            return scope, position


@pytest.mark.parametrize(
    "forged",
    [
        {CLEANUP.partition_key: "CLEANUP#elsewhere"},
        {"SK": "TURN#0000000001"},
        {"PK": "AGENT#alice"},
    ],
)
def test_a_cleanup_sweep_refuses_a_cursor_moved_off_its_shard(
    store: DynamoSessionStore, waiting_for_cleanup: int, forged: dict[str, Any]
) -> None:
    scope, position = _cleanup_position(store, waiting_for_cleanup)
    sweep = store.sessions.sessions_awaiting_cleanup
    assert sweep(waiting_for_cleanup, cursor=cursors.encode(scope, position)).items
    with pytest.raises(InvalidCursor):
        sweep(waiting_for_cleanup, cursor=cursors.encode(scope, {**position, **forged}))


def test_a_cleanup_cursor_at_or_past_the_sweeps_bound_or_last_shard_is_refused(
    store: DynamoSessionStore, waiting_for_cleanup: int
) -> None:
    scope, position = _cleanup_position(store, waiting_for_cleanup)
    sweep = store.sessions.sessions_awaiting_cleanup
    with pytest.raises(InvalidCursor):
        sweep(waiting_for_cleanup, cursor=cursors.encode(scope, {**position, CLEANUP.sort_key: waiting_for_cleanup}))
    with pytest.raises(InvalidCursor):
        sweep(waiting_for_cleanup, cursor=cursors.encode(scope, {"shard": store.table.cleanup_shards}))


@pytest.mark.parametrize("older_than", [-1, True, "5", 1.5])
def test_fails_on_a_sweep_bound_that_is_not_epoch_seconds(store: DynamoSessionStore, older_than: Any) -> None:
    with pytest.raises(InvalidInput, match="older_than must be epoch seconds"):
        store.sessions.sessions_awaiting_cleanup(older_than)


def test_a_sweep_bound_of_zero_finds_nothing_and_is_no_error(store: DynamoSessionStore) -> None:
    assert store.sessions.sessions_awaiting_cleanup(0).items == []
