"""SessionStore: turns (atomic numbering, compression, pagination, cursors) and summaries."""

from __future__ import annotations

import base64
import itertools
import json
import threading
import zlib
from typing import Any

import pytest

from embedded.clock import START_TIME, FakeClock
from lambdas.shared import cursor as cursors
from lambdas.shared import keys
from lambdas.shared.errors import Conflict, InvalidCursor, InvalidInput, SessionClosed, SessionNotFound
from lambdas.shared.serialize import marshal_item
from lambdas.shared.store import DynamoSessionStore


def _new_session(store: DynamoSessionStore, customer_id: str = "cust-1") -> str:
    return store.sessions.create_session(customer_id).session_id


def _all_pages(store: DynamoSessionStore, session_id: str, limit: int) -> list[list[int]]:
    pages: list[list[int]] = []
    cursor = None
    while True:
        page = store.turns.list_turns(session_id, limit=limit, cursor=cursor)
        pages.append([turn.turn_number for turn in page.items])
        cursor = page.next_cursor
        if cursor is None:
            return pages


# ------------------------------------------------------------------ add_turn


def test_add_turn_numbers_from_the_counter_and_compresses_content(store: DynamoSessionStore, clock: FakeClock) -> None:
    # Given a session
    session_id = _new_session(store)
    clock.advance(30)
    # When two turns are added
    first = store.turns.add_turn(session_id, "user", "Is volume 3 of Frieren out?")
    second = store.turns.add_turn(session_id, "assistant", "Yes, since March.")
    # Then they are numbered 1, 2, the counter and updated_at moved, content is zlib binary
    assert (first.turn_number, second.turn_number) == (1, 2)
    session = store.sessions.get_session(session_id)
    assert session is not None
    assert session.turn_count == 2
    assert session.updated_at == START_TIME + 30
    assert session.ttl == START_TIME + 30 + 24 * 3600  # sliding TTL
    raw = store.table.client.get_item(TableName=store.table.table_name, Key=marshal_item(keys.turn_key(session_id, 1)))[
        "Item"
    ]
    assert raw["SK"]["S"] == "TURN#0000000001"
    assert zlib.decompress(raw["content"]["B"]).decode() == "Is volume 3 of Frieren out?"
    assert store.turns.turns_between(session_id, 1, 2) == [first, second]


def test_add_turn_takes_exactly_two_writes(store: DynamoSessionStore) -> None:
    # Given a session and a hook that records every DynamoDB operation
    session_id = _new_session(store)
    calls: list[str] = []

    def record(**kwargs: Any) -> None:
        calls.append(kwargs["model"].name)

    store.table.client.meta.events.register("before-call.dynamodb.*", record)
    # When a turn is added
    store.turns.add_turn(session_id, "user", "hi")
    store.table.client.meta.events.unregister("before-call.dynamodb.*", record)
    # Then it took one UpdateItem and one PutItem, no transaction
    assert calls == ["UpdateItem", "PutItem"]


def test_unicode_and_empty_content_round_trip(store: DynamoSessionStore) -> None:
    session_id = _new_session(store)
    store.turns.add_turn(session_id, "user", "進撃の巨人 第34巻 🙂")
    store.turns.add_turn(session_id, "system", "")
    assert [t.content for t in store.turns.list_turns(session_id).items] == ["進撃の巨人 第34巻 🙂", ""]


def test_concurrent_add_turn_yields_gapless_unique_numbers(store: DynamoSessionStore) -> None:
    # Given a session and 8 threads that start together
    session_id = _new_session(store)
    threads, per_thread = 8, 25
    barrier = threading.Barrier(threads)
    numbers: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker(n: int) -> None:
        try:
            barrier.wait()
            for i in range(per_thread):
                turn = store.turns.add_turn(session_id, "user", f"thread {n} message {i}")
                with lock:
                    numbers.append(turn.turn_number)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    # When all of them add turns at once
    pool = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    # Then the numbers are exactly 1..N and turn_count == N
    total = threads * per_thread
    assert errors == []
    assert sorted(numbers) == list(range(1, total + 1))
    session = store.sessions.get_session(session_id)
    assert session is not None
    assert session.turn_count == total
    stored = store.turns.turns_between(session_id, 1, total)
    assert [t.turn_number for t in stored] == list(range(1, total + 1))


# ------------------------------------------------------------------ reserve_turn, put_turn, turns_before


def test_reserve_turn_returns_the_session_as_the_write_left_it(store: DynamoSessionStore, clock: FakeClock) -> None:
    # Given a session with one turn
    session_id = _new_session(store)
    store.turns.add_turn(session_id, "assistant", "Hi!")
    clock.advance(30)
    # When the next number is reserved for its customer
    session = store.turns.reserve_turn(session_id, customer_id="cust-1")
    # Then the session comes back from the write itself: the number, status and sliding TTL
    assert session.turn_count == 2
    assert session.status == "active"
    assert session.customer_id == "cust-1"
    assert session.updated_at == START_TIME + 30
    assert session == store.sessions.get_session(session_id)
    # and nothing is stored under the number until put_turn
    assert store.turns.turns_between(session_id, 2, 2) == []


@pytest.mark.parametrize("status", ["disconnected", "deleted", "archived"])
def test_reserve_turn_refuses_a_session_that_does_not_accept_turns_and_moves_nothing(
    store: DynamoSessionStore, status: str
) -> None:
    # Given a session that has ended
    session_id = _new_session(store)
    store.turns.add_turn(session_id, "assistant", "Hi!")
    store.sessions.update_status(session_id, "deleted" if status == "archived" else status)
    if status == "archived":
        store.sessions.update_status(session_id, status)
    before = store.sessions.get_session(session_id)
    # When a number is reserved
    with pytest.raises(SessionClosed) as caught:
        store.turns.reserve_turn(session_id, customer_id="cust-1")
    # Then the refusal names the status, the counter and the session are as they were
    assert caught.value.status == status
    assert store.sessions.get_session(session_id) == before


def test_reserve_turn_for_another_customer_is_not_found_and_moves_nothing(store: DynamoSessionStore) -> None:
    session_id = _new_session(store, "alice")
    with pytest.raises(SessionNotFound):
        store.turns.reserve_turn(session_id, customer_id="mallory")
    assert store.sessions.get_session(session_id).turn_count == 0  # type: ignore[union-attr]
    with pytest.raises(SessionNotFound):
        store.turns.reserve_turn("no-such-session", customer_id="alice")


def test_put_turn_stores_under_the_reserved_number_once(store: DynamoSessionStore) -> None:
    session_id = _new_session(store)
    number = store.turns.reserve_turn(session_id).turn_count
    turn = store.turns.put_turn(session_id, number, "user", "Is volume 3 out?")
    assert store.turns.turns_between(session_id, 1, 1) == [turn]
    with pytest.raises(Conflict):
        store.turns.put_turn(session_id, number, "user", "overwrite?")
    assert store.turns.turns_between(session_id, 1, 1) == [turn]


def test_a_put_that_finds_its_own_turn_stored_is_that_turn_and_not_a_conflict(
    store: DynamoSessionStore, clock: FakeClock
) -> None:
    # Given a turn stored, whose answer the writer never got (a read timeout), retried later by the SDK
    session_id = _new_session(store)
    number = store.turns.reserve_turn(session_id).turn_count
    stored = store.turns.put_turn(session_id, number, "user", "Is volume 3 out?")
    clock.advance(2)
    # When the same write meets it, it is that turn, as first stored
    assert store.turns.put_turn(session_id, number, "user", "Is volume 3 out?") == stored
    # But the same text by another author, or other text, is another turn: refused
    with pytest.raises(Conflict):
        store.turns.put_turn(session_id, number, "assistant", "Is volume 3 out?")
    with pytest.raises(Conflict):
        store.turns.put_turn(session_id, number, "user", "Is volume 4 out?")
    assert store.turns.turns_between(session_id, 1, 1) == [stored]


def test_add_turn_refuses_bad_content_before_any_write(store: DynamoSessionStore) -> None:
    session_id = _new_session(store)
    with pytest.raises(InvalidInput, match="content"):
        store.turns.add_turn(session_id, "user", 42)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="too large"):
        store.turns.add_turn(session_id, "user", "".join(chr(0x4E00 + (n * 7919) % 20000) for n in range(400_000)))
    assert store.sessions.get_session(session_id).turn_count == 0  # type: ignore[union-attr]


def test_turns_before_reads_the_newest_below_the_number_in_order(store: DynamoSessionStore) -> None:
    # Given turns 1..6 and a summary
    session_id = _new_session(store)
    for n in range(1, 7):
        store.turns.add_turn(session_id, "user", f"turn {n}")
    store.turns.put_summary(session_id, 1, summary_text="s", window_start=1, window_end=4, turn_count_at_summary=4)
    # Then the newest three below 6 come back oldest first, and nothing sorts in from the summary
    assert [t.turn_number for t in store.turns.turns_before(session_id, 6, limit=3)] == [3, 4, 5]
    assert [t.turn_number for t in store.turns.turns_before(session_id, 3, limit=10)] == [1, 2]
    assert [t.turn_number for t in store.turns.turns_before(session_id, 2, limit=10)] == [1]
    assert store.turns.turns_before(session_id, 1, limit=10) == []


@pytest.mark.parametrize("before", [0, -1, True, "3"])
def test_turns_before_refuses_a_number_that_is_not_a_turn(store: DynamoSessionStore, before: Any) -> None:
    with pytest.raises(InvalidInput, match="before"):
        store.turns.turns_before("s-1", before, limit=3)


def test_add_turn_to_missing_session_raises_not_found(store: DynamoSessionStore) -> None:
    with pytest.raises(SessionNotFound):
        store.turns.add_turn("no-such-session", "user", "hello")


@pytest.mark.parametrize("status", ["disconnected", "deleted"])
def test_add_turn_refuses_sessions_that_do_not_accept_turns(store: DynamoSessionStore, status: str) -> None:
    # Given a session that is no longer open
    session_id = _new_session(store)
    store.sessions.update_status(session_id, status)
    # When a turn is added
    with pytest.raises(SessionClosed) as caught:
        store.turns.add_turn(session_id, "user", "hello?")
    # Then the error names the status and nothing was counted
    assert caught.value.status == status
    assert store.sessions.get_session(session_id).turn_count == 0  # type: ignore[union-attr]


def test_add_turn_accepts_turns_during_handoff(store: DynamoSessionStore) -> None:
    session_id = _new_session(store)
    store.sessions.update_status(session_id, "handoff")
    assert store.turns.add_turn(session_id, "agent", "Hi, I am Aiko.").turn_number == 1


@pytest.mark.parametrize("role", ["bot", "", "USER"])
def test_add_turn_validates_role(store: DynamoSessionStore, role: str) -> None:
    session_id = _new_session(store)
    with pytest.raises(InvalidInput, match="role"):
        store.turns.add_turn(session_id, role, "x")


# ------------------------------------------------------------------ list_turns


def test_pagination_of_250_turns_visits_each_once_newest_page_first(
    store: DynamoSessionStore,
) -> None:
    # Given 250 turns
    session_id = _new_session(store)
    for n in range(250):
        store.turns.add_turn(session_id, "user" if n % 2 == 0 else "assistant", f"m{n + 1}")
    # When paging 20 at a time
    pages = _all_pages(store, session_id, 20)
    # Then every turn is visited exactly once, each page chronological, pages going back
    flat = [n for page in pages for n in page]
    assert sorted(flat) == list(range(1, 251))
    assert len(flat) == len(set(flat))
    assert all(page == sorted(page) for page in pages)
    assert pages[0] == list(range(231, 251))
    assert pages[-1] == list(range(1, 11))
    assert all(later[0] > earlier[-1] for later, earlier in itertools.pairwise(pages))
    assert len(pages) == 13


def test_full_last_page_has_no_cursor(store: DynamoSessionStore) -> None:
    session_id = _new_session(store)
    for _ in range(40):
        store.turns.add_turn(session_id, "user", "x")
    assert [len(page) for page in _all_pages(store, session_id, 20)] == [20, 20]


def test_empty_session_lists_no_turns(store: DynamoSessionStore) -> None:
    page = store.turns.list_turns(_new_session(store))
    assert page.items == []
    assert page.next_cursor is None


@pytest.mark.parametrize("limit", [0, 101, -1, True])
def test_list_turns_validates_limit(store: DynamoSessionStore, limit: Any) -> None:
    with pytest.raises(InvalidInput):
        store.turns.list_turns(_new_session(store), limit=limit)


def _forge(scope: str, position: dict[str, Any]) -> str:
    raw = json.dumps({"v": 1, "s": scope, "k": position}).encode()
    return base64.urlsafe_b64encode(raw).decode()


def test_forged_and_foreign_cursors_are_rejected(store: DynamoSessionStore) -> None:
    # Given two sessions with turns and a genuine cursor of the first
    mine, theirs = _new_session(store, "cust-1"), _new_session(store, "cust-2")
    for _ in range(5):
        store.turns.add_turn(mine, "user", "mine")
        store.turns.add_turn(theirs, "user", "secret")
    genuine = store.turns.list_turns(mine, limit=2).next_cursor
    assert genuine is not None
    forged = [
        "not-a-cursor!",
        "",
        base64.urlsafe_b64encode(b"\xff\xfe").decode(),
        base64.urlsafe_b64encode(b"[1, 2]").decode(),
        _forge(f"turns:{mine}", {"PK": keys.session_pk(mine)}),  # missing SK
        _forge(f"turns:{mine}", {"PK": keys.session_pk(mine), "SK": 5}),  # wrong type
        _forge(f"turns:{mine}", {"PK": keys.session_pk(mine), "SK": "META"}),  # not a turn
        # right scope, other partition: would read another customer's turns
        _forge(f"turns:{mine}", {"PK": keys.session_pk(theirs), "SK": keys.turn_sk(3)}),
        _forge(f"turns:{mine}", {**json.loads(_b64(genuine))["k"], "extra": "x"}),
        genuine[:-4],
        "A" * 5000,
    ]
    # When any of them is used, or the genuine cursor is used for the other session
    for cursor in forged:
        with pytest.raises(InvalidCursor):
            store.turns.list_turns(mine, limit=2, cursor=cursor)
    with pytest.raises(InvalidCursor):
        store.turns.list_turns(theirs, limit=2, cursor=genuine)
    with pytest.raises(InvalidCursor):
        store.sessions.list_session_items(mine, cursor=genuine)
    # Then the genuine cursor still works where it belongs
    assert [t.turn_number for t in store.turns.list_turns(mine, limit=2, cursor=genuine).items] == [2, 3]


def _b64(token: str) -> bytes:
    return base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))


def test_cursor_is_opaque_urlsafe_text(store: DynamoSessionStore) -> None:
    session_id = _new_session(store)
    for _ in range(3):
        store.turns.add_turn(session_id, "user", "x")
    token = store.turns.list_turns(session_id, limit=1).next_cursor
    assert token is not None
    assert set(token) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    assert cursors.decode(token, f"turns:{session_id}", {"PK": str, "SK": str})["SK"] == (keys.turn_sk(3))


# ------------------------------------------------------------------ turns_between


def test_turns_between_is_an_exact_inclusive_range(store: DynamoSessionStore) -> None:
    session_id = _new_session(store)
    for n in range(1, 26):
        store.turns.add_turn(session_id, "user", f"m{n}")
    store.turns.put_summary(
        session_id,
        1,
        summary_text="s",
        window_start=1,
        window_end=10,
        turn_count_at_summary=10,
    )
    window = store.turns.turns_between(session_id, 11, 20)
    assert [t.turn_number for t in window] == list(range(11, 21))
    assert window[0].content == "m11"
    assert store.turns.turns_between(session_id, 30, 40) == []
    with pytest.raises(InvalidInput):
        store.turns.turns_between(session_id, 5, 4)
    with pytest.raises(InvalidInput):
        store.turns.turns_between(session_id, 0, 4)


# ------------------------------------------------------------------ summaries


def test_put_summary_twice_is_a_no_op(store: DynamoSessionStore, clock: FakeClock) -> None:
    # Given a stored summary
    session_id = _new_session(store)
    first = store.turns.put_summary(
        session_id, 1, summary_text="first", window_start=1, window_end=10, turn_count_at_summary=10
    )
    clock.advance(5)
    # When the same number is written again (a retried stream batch) with other text
    again = store.turns.put_summary(
        session_id,
        1,
        summary_text="second",
        window_start=1,
        window_end=10,
        turn_count_at_summary=10,
    )
    # Then no error, nothing changed, and the stored summary is returned
    assert again == first
    assert store.turns.latest_summary(session_id) == first


def test_latest_summary_is_the_highest_number(store: DynamoSessionStore) -> None:
    session_id = _new_session(store)
    assert store.turns.latest_summary(session_id) is None
    for n in (1, 2, 11, 3):
        store.turns.put_summary(
            session_id,
            n,
            summary_text=f"summary {n}",
            window_start=10 * n - 9,
            window_end=10 * n,
            turn_count_at_summary=10 * n,
        )
    latest = store.turns.latest_summary(session_id)
    assert latest is not None
    assert (latest.summary_number, latest.window_start, latest.window_end) == (11, 101, 110)


def test_put_summary_validates_its_window(store: DynamoSessionStore, clock: FakeClock) -> None:
    session_id = _new_session(store)
    # A window of one turn is a window; the summary lives as long as the session's records
    one = store.turns.put_summary(
        session_id, 1, summary_text="s", window_start=3, window_end=3, turn_count_at_summary=3
    )
    assert (one.window_start, one.window_end) == (3, 3)
    assert one.ttl == int(clock()) + store.table.ttl_seconds
    with pytest.raises(InvalidInput):
        store.turns.put_summary(session_id, 1, summary_text="s", window_start=10, window_end=1, turn_count_at_summary=1)
    with pytest.raises(InvalidInput):
        store.turns.put_summary(session_id, 0, summary_text="s", window_start=1, window_end=1, turn_count_at_summary=1)


# ------------------------------------------------------------------ claim_continuation


def test_a_cut_reply_is_claimed_by_one_continuation_until_its_lease_ends(
    store: DynamoSessionStore, clock: FakeClock
) -> None:
    # Given a reply the model stopped at its output budget, and a complete one
    session_id = _new_session(store)
    store.turns.add_turn(session_id, "user", "What is Frieren about?")
    cut = store.turns.add_turn(session_id, "assistant", "Frieren is a fantasy series", stopped="max_tokens")
    whole = store.turns.add_turn(session_id, "assistant", "A complete answer.")
    # When a continuation claims the cut reply, a second one at once is refused
    assert store.turns.claim_continuation(session_id, cut.turn_number, lease_seconds=30)
    clock.advance(30)
    assert not store.turns.claim_continuation(session_id, cut.turn_number, lease_seconds=30)
    # Then once the lease has passed (the first one failed), the reply can be claimed again
    clock.advance(1)
    assert store.turns.claim_continuation(session_id, cut.turn_number, lease_seconds=30)
    # And a complete reply, or a turn that does not exist, is never claimed and nothing is written
    assert not store.turns.claim_continuation(session_id, whole.turn_number, lease_seconds=30)
    assert not store.turns.claim_continuation(session_id, 99, lease_seconds=30)
    assert store.table.get(keys.turn_key(session_id, 99)) is None
    assert "continuing_at" not in (store.table.get(keys.turn_key(session_id, whole.turn_number)) or {})
