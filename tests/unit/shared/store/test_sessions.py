"""SessionStore: sessions, the status machine, the cleanup index and customer listings."""

from __future__ import annotations

import itertools
import uuid
from typing import Any

import pytest

from embedded.clock import START_TIME, FakeClock
from lambdas.shared import keys
from lambdas.shared.errors import (
    Conflict,
    InvalidCursor,
    InvalidInput,
    InvalidTransition,
    SessionClosed,
    SessionNotFound,
    UnexpectedStatus,
)
from lambdas.shared.records import Agent, AgentStatus, SessionStatus
from lambdas.shared.schema import CLEANUP
from lambdas.shared.serialize import marshal_item, unmarshal_item
from lambdas.shared.store import DynamoSessionStore
from lambdas.usecases.close_handoff import close_handoff
from tests.unit.handoffs import begin

# The architecture page (docs ARCHITECTURE.md, "Single table"), verbatim. The expected legal
# transitions are parsed from this text, not copied from the store's own table.
ARCHITECTURE_RULE = (
    "active -> handoff -> active; active|handoff -> disconnected; disconnected|deleted -> archived; any -> deleted"
)
STATUSES = [s.value for s in SessionStatus]


def _legal_pairs(rule: str) -> set[tuple[str, str]]:
    """Pairs (from, to) the rule allows; ``any`` is every *other* status (no self-moves)."""
    pairs: set[tuple[str, str]] = set()
    for chain in rule.split(";"):
        steps = [step.strip() for step in chain.split("->")]
        for sources, target in itertools.pairwise(steps):
            froms = STATUSES if sources == "any" else sources.split("|")
            pairs.update((src, target) for src in froms if src != target)
    return pairs


LEGAL = _legal_pairs(ARCHITECTURE_RULE)
ILLEGAL = sorted(set(itertools.product(STATUSES, STATUSES)) - LEGAL)

# How to reach each status from a new (active) session using legal moves only.
PATH_TO = {
    "active": [],
    "handoff": ["handoff"],
    "disconnected": ["disconnected"],
    "deleted": ["deleted"],
    "archived": ["disconnected", "archived"],
}


def _session_in(store: DynamoSessionStore, status: str, customer_id: str = "cust-1") -> str:
    session_id = store.sessions.create_session(customer_id).session_id
    for step in PATH_TO[status]:
        store.sessions.update_status(session_id, step)
    return session_id


def _raw_meta(store: DynamoSessionStore, session_id: str) -> dict[str, Any]:
    resp = store.table.client.get_item(TableName=store.table.table_name, Key=marshal_item(keys.session_key(session_id)))
    return unmarshal_item(resp["Item"])


def _cleanup_index_contents(store: DynamoSessionStore) -> set[str]:
    """Every session id in the CleanupIndex, read by querying each shard without a time bound."""
    found: set[str] = set()
    for shard in keys.cleanup_shards(store.table.cleanup_shards):
        resp = store.table.client.query(
            TableName=store.table.table_name,
            IndexName=CLEANUP.name,
            KeyConditionExpression="#s = :s",
            ExpressionAttributeNames={"#s": CLEANUP.partition_key},
            ExpressionAttributeValues={":s": {"S": shard}},
        )
        found.update(item["session_id"]["S"] for item in resp["Items"])
    return found


def test_the_rule_parses_into_the_ten_moves_the_architecture_lists() -> None:
    assert len(LEGAL) == 10
    assert ("handoff", "active") in LEGAL
    assert ("deleted", "archived") in LEGAL
    assert ("archived", "deleted") in LEGAL
    assert ("archived", "active") not in LEGAL
    assert len(ILLEGAL) == 15


# ------------------------------------------------------------------ create / get


def test_create_session_writes_an_active_session_with_ttl(store: DynamoSessionStore, clock: FakeClock) -> None:
    session = store.sessions.create_session("cust-1", metadata={"source": "web", "score": 0.5})

    assert session.status == SessionStatus.ACTIVE
    assert session.turn_count == 0
    assert session.created_at == session.updated_at == START_TIME
    assert session.ttl == START_TIME + 24 * 3600
    assert store.sessions.get_session(session.session_id) == session
    assert _raw_meta(store, session.session_id)["metadata"]["score"] == 0.5


def test_create_session_never_overwrites(store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a uuid generator that repeats itself
    fixed = uuid.UUID("00000000-0000-4000-8000-000000000001")
    monkeypatch.setattr("lambdas.shared.store.sessions.uuid.uuid4", lambda: fixed)
    first = store.sessions.create_session("cust-1")
    # When a second session gets the same id
    with pytest.raises(Conflict):
        store.sessions.create_session("cust-2")
    # Then the first session is untouched
    assert store.sessions.get_session(str(fixed)) == first


def test_ttl_hours_is_configurable(make_store: Any) -> None:
    session = make_store(ttl_hours=2).sessions.create_session("cust-1")
    assert session.ttl == START_TIME + 7200


def test_get_session_of_unknown_id_is_none(store: DynamoSessionStore) -> None:
    assert store.sessions.get_session("no-such-session") is None


@pytest.mark.parametrize("customer_id", ["", "   ", "x" * 300])
def test_create_session_rejects_bad_customer_ids(store: DynamoSessionStore, customer_id: str) -> None:
    with pytest.raises(InvalidInput):
        store.sessions.create_session(customer_id)


# ------------------------------------------------------------------ status machine


@pytest.mark.parametrize(("current", "new"), ILLEGAL)
def test_every_illegal_transition_is_refused(store: DynamoSessionStore, current: str, new: str) -> None:
    # Given a session in status `current`
    session_id = _session_in(store, current)
    before = _raw_meta(store, session_id)
    # When it is asked to move to `new`
    with pytest.raises(InvalidTransition) as caught:
        store.sessions.update_status(session_id, new)
    # Then the error names both statuses and nothing was written
    assert (caught.value.current, caught.value.requested) == (current, new)
    assert current in str(caught.value)
    assert new in str(caught.value)
    assert _raw_meta(store, session_id) == before


@pytest.mark.parametrize(("current", "new"), sorted(LEGAL))
def test_every_legal_transition_succeeds(store: DynamoSessionStore, clock: FakeClock, current: str, new: str) -> None:
    # Given a session in status `current`
    session_id = _session_in(store, current)
    clock.advance(60)
    # When it moves to `new`
    session = store.sessions.update_status(session_id, new, expected=current)
    # Then the returned and stored session agree and the cleanup attributes follow the status
    assert session.status == new
    assert session.updated_at == START_TIME + 60
    assert store.sessions.get_session(session_id) == session
    waiting = new in ("disconnected", "deleted")
    assert (session.cleanup_shard is not None) is waiting
    assert (session.cleanup_at == START_TIME + 60) is waiting


def test_update_status_of_missing_session_raises_not_found(store: DynamoSessionStore) -> None:
    with pytest.raises(SessionNotFound):
        store.sessions.update_status("no-such-session", "disconnected")


def test_expected_status_is_part_of_the_condition(store: DynamoSessionStore) -> None:
    # Given a session that someone else moved to handoff
    session_id = _session_in(store, "handoff")
    # When a caller who still believes it is active disconnects it
    with pytest.raises(UnexpectedStatus) as caught:
        store.sessions.update_status(session_id, "disconnected", expected="active")
    # Then the legal move is still refused, naming what the status really is
    assert caught.value.current == "handoff"
    assert caught.value.expected == "active"
    assert store.sessions.get_session(session_id).status == "handoff"  # type: ignore[union-attr]


def test_expected_status_that_can_never_lead_to_the_target_is_refused(
    store: DynamoSessionStore,
) -> None:
    session_id = _session_in(store, "active")
    with pytest.raises(InvalidTransition):
        store.sessions.update_status(session_id, "archived", expected="active")


def test_update_status_sets_extra_attributes_and_removes_none(store: DynamoSessionStore) -> None:
    # Given a session with a connection
    session_id = _session_in(store, "active")
    store.sessions.set_connection(session_id, "conn-1")
    # When it disconnects at a given time, dropping the connection
    session = store.sessions.update_status(
        session_id, "disconnected", disconnected_at=START_TIME - 10, connection_id=None
    )
    # Then the given time is the cleanup time and the connection is gone
    assert session.disconnected_at == START_TIME - 10
    assert session.cleanup_at == START_TIME - 10
    assert session.connection_id is None


def test_update_status_rejects_unknown_attributes(store: DynamoSessionStore) -> None:
    session_id = _session_in(store, "active")
    with pytest.raises(InvalidInput):
        store.sessions.update_status(session_id, "disconnected", turn_count=0)
    with pytest.raises(InvalidInput):
        store.sessions.update_status(session_id, "paused")
    with pytest.raises(InvalidInput):
        store.sessions.update_status(session_id, "disconnected", disconnected_at="yesterday")


def test_archive_records_the_archive_key(store: DynamoSessionStore) -> None:
    session_id = _session_in(store, "disconnected")
    session = store.sessions.update_status(session_id, "archived", archive_key="sessions/x.json")
    assert session.archive_key == "sessions/x.json"
    assert session.archived_at == START_TIME


# ------------------------------------------------------------------ cleanup index


def test_cleanup_index_holds_exactly_the_sessions_waiting_for_cleanup(
    store: DynamoSessionStore, clock: FakeClock
) -> None:
    # Given sessions in every status, several of each
    by_status = {status: [_session_in(store, status) for _ in range(4)] for status in STATUSES}
    # When the index is queried shard by shard
    contents = _cleanup_index_contents(store)
    # Then it holds the disconnected and deleted sessions and nothing else
    assert contents == set(by_status["disconnected"] + by_status["deleted"])

    # When some of them are archived, and a handoff session returns to active
    for session_id in by_status["disconnected"][:2] + by_status["deleted"][:1]:
        store.sessions.update_status(session_id, "archived")
    store.sessions.update_status(by_status["handoff"][0], "active")
    # Then the archived ones left the index
    assert _cleanup_index_contents(store) == set(by_status["disconnected"][2:] + by_status["deleted"][1:])


def test_cleanup_sessions_spread_over_shards(store: DynamoSessionStore) -> None:
    session_ids = [_session_in(store, "disconnected") for _ in range(40)]
    shards = {_raw_meta(store, sid)[CLEANUP.partition_key] for sid in session_ids}
    assert len(shards) > 4
    assert shards <= set(keys.cleanup_shards(store.table.cleanup_shards))


def test_sessions_awaiting_cleanup_filters_by_age_and_pages_across_shards(
    store: DynamoSessionStore, clock: FakeClock
) -> None:
    # Given 30 sessions that disconnected two hours ago and 5 that just did
    old = {_session_in(store, "disconnected") for _ in range(20)}
    old |= {_session_in(store, "deleted") for _ in range(10)}
    clock.advance(7200)
    fresh = {_session_in(store, "disconnected") for _ in range(5)}
    _session_in(store, "active")
    older_than = int(clock()) - 3600
    # When paging through "waiting for more than an hour" 7 at a time
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = store.sessions.sessions_awaiting_cleanup(older_than, limit=7, cursor=cursor)
        assert len(page.items) <= 7
        seen += [candidate.session_id for candidate in page.items]
        pages += 1
        cursor = page.next_cursor
        if cursor is None:
            break
    # Then every old session comes exactly once and no fresh one
    assert sorted(seen) == sorted(old)
    assert not fresh & set(seen)
    assert pages >= 5


def test_cleanup_cursor_is_bound_to_its_query(store: DynamoSessionStore) -> None:
    for _ in range(12):
        _session_in(store, "disconnected")
    page = store.sessions.sessions_awaiting_cleanup(START_TIME + 1, limit=2)
    assert page.next_cursor is not None
    with pytest.raises(InvalidCursor):
        store.sessions.sessions_awaiting_cleanup(START_TIME + 2, limit=2, cursor=page.next_cursor)
    with pytest.raises(InvalidCursor):
        store.turns.list_turns("some-session", cursor=page.next_cursor)


# ------------------------------------------------------------------ customer sessions


def test_list_customer_sessions_pages_newest_first_each_once(store: DynamoSessionStore, clock: FakeClock) -> None:
    # Given 23 sessions of one customer (some sharing an updated_at) and one of another
    created = []
    for n in range(23):
        created.append(store.sessions.create_session("cust-1").session_id)
        if n % 3 == 0:
            clock.advance(1)
    store.sessions.create_session("cust-2")
    # When listing 5 at a time
    seen: list[str] = []
    stamps: list[int] = []
    cursor = None
    while True:
        page = store.sessions.list_customer_sessions("cust-1", limit=5, cursor=cursor)
        seen += [s.session_id for s in page.items]
        stamps += [s.updated_at for s in page.items]
        cursor = page.next_cursor
        if cursor is None:
            break
    # Then each session comes exactly once, newest first
    assert sorted(seen) == sorted(created)
    assert stamps == sorted(stamps, reverse=True)


def test_customer_cursor_cannot_list_another_customer(store: DynamoSessionStore) -> None:
    for _ in range(3):
        store.sessions.create_session("cust-1")
        store.sessions.create_session("cust-2")
    cursor = store.sessions.list_customer_sessions("cust-1", limit=1).next_cursor
    assert cursor is not None
    with pytest.raises(InvalidCursor):
        store.sessions.list_customer_sessions("cust-2", limit=1, cursor=cursor)


# ------------------------------------------------------------------ connection on META


def test_set_and_clear_connection(store: DynamoSessionStore) -> None:
    session_id = _session_in(store, "active")
    assert store.sessions.set_connection(session_id, "conn-1").connection_id == "conn-1"
    assert store.sessions.set_connection(session_id, "conn-2").connection_id == "conn-2"

    assert store.sessions.clear_connection(session_id, "conn-1") is False  # replaced already
    assert store.sessions.clear_connection(session_id, "conn-2") is True
    assert store.sessions.get_session(session_id).connection_id is None  # type: ignore[union-attr]


def test_set_connection_refuses_closed_and_missing_sessions(store: DynamoSessionStore) -> None:
    closed = _session_in(store, "disconnected")
    with pytest.raises(SessionClosed) as refused:
        store.sessions.set_connection(closed, "conn-1")
    # The refusal names the session and the status it found (the handler's 409 says which)
    assert (refused.value.session_id, refused.value.status) == (closed, "disconnected")
    with pytest.raises(SessionNotFound) as missing:
        store.sessions.set_connection("no-such-session", "conn-1")
    assert missing.value.session_id == "no-such-session"


def test_set_connection_stamps_the_session_as_updated(store: DynamoSessionStore, clock: FakeClock) -> None:
    session_id = _session_in(store, "active")
    clock.advance(90)
    assert store.sessions.set_connection(session_id, "conn-1").updated_at == int(clock())
    assert _raw_meta(store, session_id)["updated_at"] == int(clock())


# ------------------------------------------------------------------ sessions by status


def _listed(store: DynamoSessionStore, status: str, limit: int = 100) -> list[str]:
    """Every session id the StatusIndex lists under ``status``, page by page, in listing order."""
    seen: list[str] = []
    cursor = None
    while True:
        page = store.sessions.list_by_status(status, limit=limit, cursor=cursor)
        seen += [listing.session_id for listing in page.items]
        cursor = page.next_cursor
        if cursor is None:
            return seen


def test_a_new_session_is_listed_as_active_with_what_the_index_projects(
    store: DynamoSessionStore, clock: FakeClock
) -> None:
    session = store.sessions.create_session("cust-1")
    page = store.sessions.list_by_status("active")
    assert page.next_cursor is None
    assert [(x.session_id, x.customer_id, x.status, x.created_at, x.status_since) for x in page.items] == [
        (session.session_id, "cust-1", SessionStatus.ACTIVE, START_TIME, START_TIME)
    ]
    assert _raw_meta(store, session.session_id)["status_key"] == "STATUS#active"


@pytest.mark.parametrize("status", STATUSES)
def test_every_status_change_moves_the_session_to_exactly_its_new_listing(
    store: DynamoSessionStore, clock: FakeClock, status: str
) -> None:
    # Given a session moved along legal steps into ``status``, one step per second
    session_id = store.sessions.create_session("cust-1").session_id
    for step in PATH_TO[status]:
        clock.advance(1)
        store.sessions.update_status(session_id, step)
    # Then it is listed under that status only, since the last move
    assert {s: _listed(store, s) for s in STATUSES} == {s: [session_id] if s == status else [] for s in STATUSES}
    listing = store.sessions.list_by_status(status).items[0]
    assert listing.status_since == START_TIME + len(PATH_TO[status])


def test_a_handoff_begun_and_closed_in_transactions_moves_between_listings(store: DynamoSessionStore) -> None:
    # Given an active session
    session_id = store.sessions.create_session("cust-1").session_id
    store.agents.put_agent(Agent(agent_id="a-1", skills=("billing",), status=AgentStatus.AVAILABLE))
    store.agents.reserve_agent("a-1", session_id)
    # When the workflow hands it to an agent (one transaction)
    begin(store, session_id)
    # Then it left the active listing for the handoff one
    assert (_listed(store, "active"), _listed(store, "handoff")) == ([], [session_id])
    # And when the agent ends it (another transaction), it waits in the disconnected listing
    close_handoff(store, session_id, "h-1", closed_by="a-1", resolution="done", outcome=SessionStatus.DISCONNECTED)
    assert (_listed(store, "handoff"), _listed(store, "disconnected")) == ([], [session_id])


def test_list_by_status_pages_newest_first_each_once(store: DynamoSessionStore, clock: FakeClock) -> None:
    # Given 12 sessions in handoff (some entering it in the same second) and 3 active ones
    handed: list[str] = []
    for n in range(12):
        handed.append(_session_in(store, "handoff", customer_id=f"cust-{n}"))
        if n % 3 == 0:
            clock.advance(1)
    for _ in range(3):
        _session_in(store, "active")
    # When listing 5 at a time
    pages: list[int] = []
    stamps: list[int] = []
    seen: list[str] = []
    cursor = None
    while True:
        page = store.sessions.list_by_status("handoff", limit=5, cursor=cursor)
        pages.append(len(page.items))
        seen += [x.session_id for x in page.items]
        stamps += [x.status_since for x in page.items]
        cursor = page.next_cursor
        if cursor is None:
            break
    # Then three pages hold each of them once, newest into handoff first
    assert pages == [5, 5, 2]
    assert sorted(seen) == sorted(handed)
    assert stamps == sorted(stamps, reverse=True)
    assert stamps[0] > stamps[-1]


def test_a_full_last_page_carries_no_cursor(store: DynamoSessionStore) -> None:
    for _ in range(4):
        _session_in(store, "deleted")
    first = store.sessions.list_by_status("deleted", limit=2)
    assert first.next_cursor is not None
    assert store.sessions.list_by_status("deleted", limit=2, cursor=first.next_cursor).next_cursor is None


def test_status_cursor_cannot_list_another_status(store: DynamoSessionStore) -> None:
    for _ in range(2):
        _session_in(store, "handoff")
        _session_in(store, "active")
    cursor = store.sessions.list_by_status("handoff", limit=1).next_cursor
    assert cursor is not None
    with pytest.raises(InvalidCursor):
        store.sessions.list_by_status("active", limit=1, cursor=cursor)
    with pytest.raises(InvalidCursor):
        store.sessions.list_by_status("handoff", limit=1, cursor=cursor[:-2])


@pytest.mark.parametrize(("status", "limit"), [("paused", 10), ("active", 0), ("active", 101), ("active", True)])
def test_fails_to_list_an_unknown_status_or_a_limit_out_of_bounds(
    store: DynamoSessionStore, status: str, limit: int
) -> None:
    with pytest.raises(InvalidInput):
        store.sessions.list_by_status(status, limit=limit)


# ---------------------------------------------------------------------- resume and the cleanup's claim


def _disconnected(store: DynamoSessionStore, clock: FakeClock) -> str:
    session_id = store.sessions.create_session("alice").session_id
    store.sessions.update_status(session_id, SessionStatus.DISCONNECTED)
    return session_id


def test_resume_session_reopens_a_session_disconnected_within_its_grace_and_leaves_the_cleanup_index(
    store: DynamoSessionStore, clock: FakeClock
) -> None:
    # Given a session disconnected 10 minutes ago
    session_id = _disconnected(store, clock)
    clock.advance(600)
    # When its customer resumes it with a grace period of an hour
    resumed = store.sessions.resume_session(session_id, "alice", "conn-2", since=int(clock()) - 3600)
    # Then it is active on the new connection, out of the cleanup index, under active in the status index
    assert (resumed.status, resumed.connection_id) == (SessionStatus.ACTIVE, "conn-2")
    assert (resumed.disconnected_at, resumed.cleanup_at, resumed.cleanup_shard) == (None, None, None)
    assert resumed.updated_at == _raw_meta(store, session_id)["updated_at"] == int(clock())
    assert store.sessions.sessions_awaiting_cleanup(int(clock()) + 1).items == []
    assert [s.session_id for s in store.sessions.list_by_status(SessionStatus.ACTIVE).items] == [session_id]


@pytest.mark.parametrize(
    ("case", "why"),
    [("past_grace", "past its grace period"), ("other_customer", "past its grace period"), ("active", "active")],
)
def test_resume_session_refuses_and_changes_nothing(
    store: DynamoSessionStore, clock: FakeClock, case: str, why: str
) -> None:
    session_id = _disconnected(store, clock) if case != "active" else store.sessions.create_session("alice").session_id
    clock.advance(3601)
    since = int(clock()) - 3600
    before = store.sessions.get_session(session_id)
    with pytest.raises(SessionClosed) as refused:
        store.sessions.resume_session(
            session_id,
            "mallory" if case == "other_customer" else "alice",
            "conn-2",
            since=since - 3600 * (case != "past_grace"),
        )
    # The status it gives is what the resume found ("active"), or why a disconnected one is closed to it
    assert (refused.value.session_id, refused.value.status) == (session_id, why)
    assert store.sessions.get_session(session_id) == before


def test_resume_session_of_an_unknown_session_is_not_found(store: DynamoSessionStore) -> None:
    unknown = str(uuid.uuid4())
    with pytest.raises(SessionNotFound) as missing:
        store.sessions.resume_session(unknown, "alice", "conn-2", since=0)
    assert missing.value.session_id == unknown


@pytest.mark.parametrize("bad", ["session_id", "customer_id", "connection_id"])
def test_resume_session_names_the_id_that_is_not_an_id(store: DynamoSessionStore, bad: str) -> None:
    ids = {"session_id": str(uuid.uuid4()), "customer_id": "alice", "connection_id": "conn-2"} | {bad: " "}
    with pytest.raises(InvalidInput, match=rf"^{bad} must be a non-empty string"):
        store.sessions.resume_session(ids["session_id"], ids["customer_id"], ids["connection_id"], since=0)


def test_claim_for_cleanup_takes_only_a_session_still_waiting_past_the_given_time(
    store: DynamoSessionStore, clock: FakeClock
) -> None:
    # Given a session disconnected now, one deleted now, one active
    waiting = _disconnected(store, clock)
    deleted = store.sessions.create_session("alice").session_id
    store.sessions.update_status(deleted, SessionStatus.DELETED)
    active = store.sessions.create_session("alice").session_id
    now = int(clock())
    # Then a claim for sessions disconnected before now takes the deleted one only
    assert store.sessions.claim_for_cleanup(waiting, eligible_before=now) is False
    assert store.sessions.claim_for_cleanup(deleted, eligible_before=now) is True
    assert store.sessions.claim_for_cleanup(active, eligible_before=now + 10) is False
    assert store.sessions.claim_for_cleanup(str(uuid.uuid4()), eligible_before=now + 10) is False
    # And one second later the disconnected one is taken, and can no longer be resumed
    assert store.sessions.claim_for_cleanup(waiting, eligible_before=now + 1) is True
    with pytest.raises(SessionClosed):
        store.sessions.resume_session(waiting, "alice", "conn-2", since=0)
    assert store.sessions.get_session(waiting).status == SessionStatus.DISCONNECTED  # type: ignore[union-attr]


def test_a_resumed_session_is_refused_by_a_cleanup_claim(store: DynamoSessionStore, clock: FakeClock) -> None:
    session_id = _disconnected(store, clock)
    store.sessions.resume_session(session_id, "alice", "conn-2", since=int(clock()) - 3600)
    assert store.sessions.claim_for_cleanup(session_id, eligible_before=int(clock()) + 3600) is False
    assert store.sessions.get_session(session_id).status == SessionStatus.ACTIVE  # type: ignore[union-attr]
