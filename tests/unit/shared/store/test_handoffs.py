"""lambdas.shared.store.handoffs: callback tokens taken once, re-queueing, late assignment messages, on moto."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from botocore.exceptions import ClientError

from embedded.clock import START_TIME, FakeClock
from lambdas.shared import keys
from lambdas.shared.errors import Conflict, HandoffNotFound, InvalidInput, SessionNotFound
from lambdas.shared.records import HandoffStatus, SessionStatus
from lambdas.shared.store import AgentActive, DynamoSessionStore, HandoffClosed
from lambdas.shared.store.handoffs import MAX_MOVE_READS, PREVIOUS_AGENT
from lambdas.shared.store.table import Cancelled
from tests.unit.handoffs import begin, inbox_of


def test_a_callback_token_is_taken_exactly_once_even_concurrently(store: DynamoSessionStore) -> None:
    session = store.sessions.create_session("c-1")
    store.handoffs.put_handoff(session.session_id, reason="billing", handoff_id="h-1")
    store.handoffs.await_callback(session.session_id, "h-1", "reply", "token-1")

    assert store.handoffs.claim_callback(session.session_id, "h-1", "agent") is None  # waits for something else
    results: list[str | None] = []
    threads = [
        threading.Thread(
            target=lambda: results.append(store.handoffs.claim_callback(session.session_id, "h-1", "reply"))
        )
        for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert results.count("token-1") == 1
    assert results.count(None) == 7
    assert not {"callback_token", "waiting_for"} & _raw(store, session.session_id).keys()  # the wait is over


def test_requeue_drops_the_agent_and_any_token(store: DynamoSessionStore) -> None:
    session = store.sessions.create_session("c-1")
    begin(store, session.session_id)
    store.handoffs.await_callback(session.session_id, "h-1", "reply", "token-1")

    store.handoffs.requeue_handoff(session.session_id, "h-1")

    handoff = store.handoffs.get_handoff(session.session_id, "h-1")
    assert handoff is not None
    assert (handoff.status, handoff.agent_id) == (HandoffStatus.QUEUED, None)
    assert store.handoffs.claim_callback(session.session_id, "h-1", "reply") is None


def test_a_stored_callback_token_never_leaves_through_public(store: DynamoSessionStore) -> None:
    from lambdas.shared import keys
    from lambdas.shared.serialize import marshal_item, public, unmarshal_item

    session = store.sessions.create_session("c-1")
    store.handoffs.put_handoff(session.session_id, reason="billing", handoff_id="h-1")
    store.handoffs.await_callback(session.session_id, "h-1", "agent", "secret-token")
    raw = store.table.client.get_item(
        TableName=store.table.table_name, Key=marshal_item(keys.handoff_key(session.session_id, "h-1"))
    )
    item = unmarshal_item(raw["Item"])
    assert item["callback_token"] == "secret-token"
    assert "callback_token" not in public(item)
    assert public(item)["waiting_for"] == "agent"


@pytest.mark.parametrize(
    ("status", "after"),
    [
        (HandoffStatus.COMPLETED, HandoffStatus.COMPLETED),  # closed meanwhile: its completion stays
        (HandoffStatus.FAILED, HandoffStatus.FAILED),
        (HandoffStatus.QUEUED, HandoffStatus.FAILED),
        (HandoffStatus.ESCALATED, HandoffStatus.FAILED),
    ],
)
def queue(store: DynamoSessionStore, session_id: str, token: str) -> Any:
    return store.handoffs.queue_handoff(
        session_id, handoff_id="h-1", reason="billing", priority="normal", execution_arn="arn:exec", task_token=token
    )


def test_a_queued_handoff_records_its_priority_and_the_execution_that_waits_on_it(
    store: DynamoSessionStore, clock: FakeClock
) -> None:
    session = store.sessions.create_session("c-1")
    clock.advance(5)
    queued = store.handoffs.queue_handoff(
        session.session_id, handoff_id="h-1", reason="billing", priority="urgent", execution_arn="arn:x", task_token="t"
    )
    assert queued is not None
    assert (queued.status, queued.priority, queued.execution_arn) == (HandoffStatus.QUEUED, "urgent", "arn:x")
    # The wait's token is stamped on the record when it is stored
    raw = store.table.get(keys.handoff_key(session.session_id, "h-1"))
    assert raw is not None
    assert (raw["callback_token"], raw["waiting_for"], raw["updated_at"]) == ("t", "agent", int(clock()))
    clock.advance(5)
    assert store.handoffs.claim_callback(session.session_id, "h-1", "agent") == "t"
    assert store.handoffs.await_callback(session.session_id, "h-1", "agent", "t2")
    again = store.table.get(keys.handoff_key(session.session_id, "h-1"))
    assert again is not None
    assert again["updated_at"] == int(clock())


def test_a_late_assignment_message_never_replaces_the_live_wait(store: DynamoSessionStore) -> None:
    # Given a handoff that was queued with its token, then assigned, and now waits for the reply
    session = store.sessions.create_session("c-1")
    queued = queue(store, session.session_id, "token-agent")
    assert queued is not None
    assert queued.status == HandoffStatus.QUEUED
    begin(store, session.session_id)
    store.handoffs.await_callback(session.session_id, "h-1", "reply", "token-reply")

    # When the assignment message comes again (a redelivery, or a redrive from its DLQ)
    again = queue(store, session.session_id, "token-agent")

    # Then nothing is written: the live wait's token and what it waits for are untouched
    assert again is None
    assert store.handoffs.waiting_for(session.session_id, "h-1") == "reply"
    assert store.handoffs.claim_callback(session.session_id, "h-1", "reply") == "token-reply"
    handoff = store.handoffs.get_handoff(session.session_id, "h-1")
    assert handoff is not None
    assert handoff.status == HandoffStatus.ASSIGNED


def test_a_redelivered_assignment_message_of_a_waiting_handoff_is_stored_again(store: DynamoSessionStore) -> None:
    session = store.sessions.create_session("c-1")
    assert queue(store, session.session_id, "token-1") is not None
    assert queue(store, session.session_id, "token-1") is not None
    assert store.handoffs.claim_callback(session.session_id, "h-1", "agent") == "token-1"


def test_a_managers_wait_is_stored_only_while_the_handoff_is_escalated(store: DynamoSessionStore) -> None:
    session = store.sessions.create_session("c-1")
    store.handoffs.put_handoff(session.session_id, reason="billing", handoff_id="h-1")
    assert not store.handoffs.await_callback(
        session.session_id, "h-1", "agent", "token-1", while_status=HandoffStatus.ESCALATED
    )
    assert store.handoffs.waiting_for(session.session_id, "h-1") is None
    with pytest.raises(HandoffNotFound):
        store.handoffs.await_callback(
            session.session_id, "h-9", "agent", "token-1", while_status=HandoffStatus.ESCALATED
        )


def test_a_reply_wait_is_stored_only_while_the_agent_has_written_nothing_since_the_version_given(
    store: DynamoSessionStore,
) -> None:
    # Given a handoff just assigned to agent-1, who has written nothing yet
    session = store.sessions.create_session("c-1")
    begin(store, session.session_id, agent_id="agent-1")

    def wait(token: str, version: int) -> bool:
        """A reply wait stored while the handoff is assigned and its activity is at ``version``."""
        return store.handoffs.await_callback(
            session.session_id, "h-1", "reply", token, while_status=HandoffStatus.ASSIGNED, while_version=version
        )

    # When the first reply wait starts at version 0 / Then its token is stored
    assert wait("monitor-1", 0)
    assert store.handoffs.claim_callback(session.session_id, "h-1", "reply") == "monitor-1"
    # When the agent wrote before the next wait, which still expects version 0
    store.handoffs.record_activity(session.session_id, "h-1", "agent-1")
    with pytest.raises(AgentActive) as active:
        wait("monitor-2", 0)
    # Then nothing is stored, and the refusal carries the version the agent reached
    assert active.value.version == 1
    assert store.handoffs.waiting_for(session.session_id, "h-1") is None
    # And a wait at the version the agent reached is stored; one at a stale version (1 of 2) is not
    assert wait("watch-1", 1)
    assert store.handoffs.claim_callback(session.session_id, "h-1", "reply") == "watch-1"
    store.handoffs.record_activity(session.session_id, "h-1", "agent-1")
    with pytest.raises(AgentActive) as stale:
        wait("watch-2", 1)
    assert stale.value.version == 2
    # And a closed handoff answers False whatever the version: the close, not the message, ends the wait
    store.handoffs.update_handoff(session.session_id, "h-1", status=HandoffStatus.COMPLETED)
    assert not wait("watch-3", 1)
    with pytest.raises(ValueError, match="activity version"):
        store.handoffs.await_callback(session.session_id, "h-1", "reply", "t", while_version=-1)


def test_a_reply_wait_ahead_of_a_record_nobody_has_written_to_is_refused_at_version_0(
    store: DynamoSessionStore,
) -> None:
    # Given a handoff just assigned (written anew: no activity version at all yet)
    session = store.sessions.create_session("c-1")
    begin(store, session.session_id, agent_id="agent-1")
    # When a reply wait expects a version read before the record was written anew
    with pytest.raises(AgentActive) as ahead:
        store.handoffs.await_callback(
            session.session_id, "h-1", "reply", "watch-1", while_status=HandoffStatus.ASSIGNED, while_version=2
        )
    # Then nothing is stored, and the refusal carries the record's own version: 0, where the next wait starts
    assert ahead.value.version == 0
    assert store.handoffs.waiting_for(session.session_id, "h-1") is None


def test_a_new_handoff_waits_queued_and_no_status_exists_that_nothing_writes(store: DynamoSessionStore) -> None:
    # Given a session
    session = store.sessions.create_session("cust-1")
    # When a handoff is created without a status
    handoff = store.handoffs.put_handoff(session.session_id, reason="billing", handoff_id="h-1")
    # Then it waits for an agent, as the workflow's queue step writes it
    assert handoff.status == HandoffStatus.QUEUED
    assert store.handoffs.get_handoff(session.session_id, "h-1") == handoff
    # And "requested", which no step ever wrote, is not a status a handoff may take
    with pytest.raises(ValueError, match="requested"):
        store.handoffs.put_handoff(session.session_id, reason="billing", handoff_id="h-2", status="requested")


def test_the_first_reply_of_the_assigned_agent_is_recorded_once(store: DynamoSessionStore) -> None:
    # Given a handoff assigned to a-1 (its assignment time recorded)
    session = store.sessions.create_session("c-1")
    begin(store, session.session_id)
    assigned = store.handoffs.get_handoff(session.session_id, "h-1")
    assert assigned is not None
    assert assigned.assigned_at is not None
    assert assigned.first_reply_at is None

    # When another agent, then a-1, then a-1 again reply
    assert store.handoffs.mark_first_reply(session.session_id, "h-1", "a-2") is False
    assert store.handoffs.mark_first_reply(session.session_id, "h-1", "a-1") is True
    first = store.handoffs.get_handoff(session.session_id, "h-1")
    assert store.handoffs.mark_first_reply(session.session_id, "h-1", "a-1") is False

    # Then only a-1's first reply is recorded, and never moved
    assert first is not None
    assert first.first_reply_at is not None
    again = store.handoffs.get_handoff(session.session_id, "h-1")
    assert again is not None
    assert again.first_reply_at == first.first_reply_at


def test_a_reassigned_handoff_records_the_new_agents_assignment_and_first_reply_afresh(
    store: DynamoSessionStore, clock: FakeClock
) -> None:
    # Given a-1 answered, then the handoff was re-queued (the session back with the assistant)
    session = store.sessions.create_session("c-1")
    begin(store, session.session_id)
    store.handoffs.mark_first_reply(session.session_id, "h-1", "a-1")
    store.handoffs.requeue_handoff(session.session_id, "h-1", previous_agent_id="a-1")
    store.sessions.update_status(session.session_id, SessionStatus.ACTIVE)
    # When a-2 takes it a minute later
    clock.advance(60)
    begin(store, session.session_id, agent_id="a-2")
    # Then the assignment is a-2's and no reply of a-2 is recorded yet
    handoff = store.handoffs.get_handoff(session.session_id, "h-1")
    assert handoff is not None
    assert (handoff.agent_id, handoff.assigned_at, handoff.first_reply_at) == ("a-2", int(clock()), None)
    assert store.handoffs.mark_first_reply(session.session_id, "h-1", "a-1") is False
    assert store.handoffs.mark_first_reply(session.session_id, "h-1", "a-2") is True


def test_an_agent_message_counts_activity_only_while_that_agent_holds_the_handoff(store: DynamoSessionStore) -> None:
    session = store.sessions.create_session("c-1")
    begin(store, session.session_id, agent_id="a-1")

    assert store.handoffs.record_activity(session.session_id, "h-1", "a-1") == 1
    assert store.handoffs.record_activity(session.session_id, "h-1", "a-1") == 2
    with pytest.raises(HandoffClosed):
        store.handoffs.record_activity(session.session_id, "h-1", "a-2")  # not its agent
    store.handoffs.requeue_handoff(session.session_id, "h-1", expected_version=2)
    with pytest.raises(HandoffClosed):
        store.handoffs.record_activity(session.session_id, "h-1", "a-1")  # re-queued: the agent lost it


def test_a_requeue_for_idleness_loses_to_a_message_counted_since_the_version_it_knew(
    store: DynamoSessionStore,
) -> None:
    # Given an assigned handoff whose agent wrote twice since the watch saw version 1
    session = store.sessions.create_session("c-1")
    begin(store, session.session_id, agent_id="a-1")
    store.handoffs.record_activity(session.session_id, "h-1", "a-1")
    store.handoffs.record_activity(session.session_id, "h-1", "a-1")

    # When the idle limit re-queues it for version 1 / Then the agent keeps it, and the error says the version
    with pytest.raises(AgentActive) as active:
        store.handoffs.requeue_handoff(session.session_id, "h-1", previous_agent_id="a-1", expected_version=1)
    assert active.value.version == 2
    handoff = store.handoffs.get_handoff(session.session_id, "h-1")
    assert handoff is not None
    assert (handoff.status, handoff.agent_id) == (HandoffStatus.ASSIGNED, "a-1")
    # And a handoff with no message yet is re-queued only for version 0
    other = store.sessions.create_session("c-2")
    begin(store, other.session_id, agent_id="a-2")
    with pytest.raises(AgentActive):
        store.handoffs.requeue_handoff(other.session_id, "h-1", expected_version=1)
    store.handoffs.requeue_handoff(other.session_id, "h-1", expected_version=0)


def test_a_message_counted_between_the_requeues_read_and_its_write_keeps_the_agent(
    store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an assigned handoff at version 1, and the agent's next message landing just after the re-queue's read
    session = store.sessions.create_session("c-1")
    begin(store, session.session_id, agent_id="a-1")
    store.handoffs.record_activity(session.session_id, "h-1", "a-1")
    commit = store.table.commit
    raced: list[int] = []

    def message_first(tx: Any) -> None:
        if not raced:
            raced.append(store.handoffs.record_activity(session.session_id, "h-1", "a-1"))
        commit(tx)

    monkeypatch.setattr(store.table, "commit", message_first)

    # When the idle limit re-queues it for version 1
    with pytest.raises(AgentActive) as active:
        store.handoffs.requeue_handoff(session.session_id, "h-1", expected_version=1)

    # Then the transaction's version condition refused the write: the message won, the agent keeps the handoff
    assert raced == [2]
    assert active.value.version == 2
    handoff = store.handoffs.get_handoff(session.session_id, "h-1")
    assert handoff is not None
    assert (handoff.status, handoff.agent_id) == (HandoffStatus.ASSIGNED, "a-1")


def test_a_session_whose_handoff_waits_is_shown_in_handoff_until_the_handoff_ends(store: DynamoSessionStore) -> None:
    session = store.sessions.create_session("customer-1")
    assert store.handoffs.shown_status(session) == SessionStatus.ACTIVE
    store.handoffs.queue_handoff(
        session.session_id, handoff_id="h-1", reason="billing", priority="normal", execution_arn=None, task_token="t"
    )
    waiting = store.sessions.get_session(session.session_id)
    assert waiting is not None
    assert (waiting.status, waiting.current_handoff_id) == (SessionStatus.ACTIVE, "h-1")
    assert store.handoffs.shown_status(waiting) == SessionStatus.HANDOFF
    store.handoffs.update_handoff(session.session_id, "h-1", status="escalated")
    assert store.handoffs.shown_status(waiting) == SessionStatus.HANDOFF
    store.handoffs.update_handoff(session.session_id, "h-1", status="failed")
    assert store.handoffs.shown_status(waiting) == SessionStatus.ACTIVE


# ------------------------------------------------------------------ the record's life


def test_handoff_lifecycle(store: DynamoSessionStore, clock: FakeClock) -> None:
    # Given a session with two handoffs created a moment apart
    session_id = store.sessions.create_session("cust-1").session_id
    first = store.handoffs.put_handoff(session_id, reason="billing", priority="high")
    clock.advance(0.002)
    second = store.handoffs.put_handoff(session_id, reason="damaged item")
    # Then the latest is the second, and each can be read back
    assert store.handoffs.current_handoff(session_id) == second
    assert store.handoffs.get_handoff(session_id, first.handoff_id) == first
    assert first.status == HandoffStatus.QUEUED
    # When the second is assigned (only from a waiting status)
    clock.advance(30)
    assigned = store.handoffs.update_handoff(
        session_id,
        second.handoff_id,
        status="assigned",
        agent_id="a-1",
        execution_arn="arn:aws:states:us-east-1:123456789012:execution:handoff:x",
        expected_status="queued",
    )
    assert (assigned.status, assigned.agent_id) == (HandoffStatus.ASSIGNED, "a-1")
    assert assigned.updated_at == START_TIME + 30
    with pytest.raises(Conflict):
        store.handoffs.update_handoff(session_id, second.handoff_id, status="completed", expected_status="queued")


def test_handoff_errors(store: DynamoSessionStore) -> None:
    session_id = store.sessions.create_session("cust-1").session_id
    assert store.handoffs.current_handoff(session_id) is None
    store.handoffs.put_handoff(session_id, reason="x", handoff_id="exec-1")
    with pytest.raises(Conflict):
        store.handoffs.put_handoff(session_id, reason="x", handoff_id="exec-1")
    with pytest.raises(HandoffNotFound):
        store.handoffs.update_handoff(session_id, "nope", status="failed")
    with pytest.raises(InvalidInput):
        store.handoffs.update_handoff(session_id, "exec-1")
    with pytest.raises(InvalidInput, match=r"^handoff status must be one of"):
        store.handoffs.put_handoff(session_id, reason="x", status="lost")


def test_a_handoff_of_no_session_is_refused_and_writes_nothing(store: DynamoSessionStore) -> None:
    # The session META must exist: the write would otherwise create a bare session item naming the handoff
    with pytest.raises(SessionNotFound) as missing:
        store.handoffs.put_handoff("no-such-session", reason="x", handoff_id="h-1")
    assert missing.value.session_id == "no-such-session"
    assert store.table.get(keys.session_key("no-such-session")) is None
    assert store.table.get(keys.handoff_key("no-such-session", "h-1")) is None


def _queued_in_the_waiting_inbox(store: DynamoSessionStore) -> str:
    session_id = store.sessions.create_session("cust-1").session_id
    store.handoffs.put_handoff(session_id, reason="billing", handoff_id="h-1")
    store.inbox.put_inbox_item(keys.WAITING_INBOX, session_id=session_id, handoff_id="h-1", reason="billing")
    assert inbox_of(store, keys.WAITING_INBOX) == ["h-1"]
    return session_id


def test_a_new_status_alone_takes_the_handoff_out_of_the_inbox_it_leaves(
    store: DynamoSessionStore, clock: FakeClock
) -> None:
    session_id = _queued_in_the_waiting_inbox(store)
    clock.advance(5)
    failed = store.handoffs.update_handoff(session_id, "h-1", status="failed")
    assert inbox_of(store, keys.WAITING_INBOX) == []
    assert store.handoffs.get_handoff(session_id, "h-1") == failed
    assert (failed.status, failed.updated_at) == (HandoffStatus.FAILED, START_TIME + 5)


def test_a_new_agent_alone_takes_the_handoff_out_of_the_previous_agents_inbox(store: DynamoSessionStore) -> None:
    # Given a handoff assigned to agent-1, in agent-1's inbox
    session_id = _queued_in_the_waiting_inbox(store)
    store.handoffs.update_handoff(session_id, "h-1", status="assigned", agent_id="agent-1")
    store.inbox.put_inbox_item("agent-1", session_id=session_id, handoff_id="h-1", reason="billing")
    assert (inbox_of(store, keys.WAITING_INBOX), inbox_of(store, "agent-1")) == ([], ["h-1"])
    # When only its agent changes / Then it left agent-1's inbox, and its status is kept
    moved = store.handoffs.update_handoff(session_id, "h-1", agent_id="agent-2")
    assert inbox_of(store, "agent-1") == []
    assert (moved.status, moved.agent_id) == (HandoffStatus.ASSIGNED, "agent-2")
    assert store.handoffs.get_handoff(session_id, "h-1") == moved


def test_an_execution_arn_alone_is_recorded_and_moves_nothing(store: DynamoSessionStore, clock: FakeClock) -> None:
    session_id = _queued_in_the_waiting_inbox(store)
    arn = "arn:aws:states:us-east-1:123456789012:execution:handoff:h-1"
    clock.advance(7)
    annotated = store.handoffs.update_handoff(session_id, "h-1", execution_arn=arn, expected_status="queued")
    stored = store.handoffs.get_handoff(session_id, "h-1")
    assert stored is not None
    assert (annotated.execution_arn, stored.execution_arn, stored.status) == (arn, arn, HandoffStatus.QUEUED)
    assert stored.updated_at == START_TIME + 7
    assert inbox_of(store, keys.WAITING_INBOX) == ["h-1"]


def test_an_execution_arn_for_a_missing_handoff_or_one_that_moved_on_is_refused(store: DynamoSessionStore) -> None:
    session_id = _queued_in_the_waiting_inbox(store)
    arn = "arn:aws:states:us-east-1:123456789012:execution:handoff:h-1"
    with pytest.raises(HandoffNotFound):
        store.handoffs.update_handoff(session_id, "h-2", execution_arn=arn)
    with pytest.raises(Conflict, match="handoff 'h-1' is 'queued', not 'assigned'"):
        store.handoffs.update_handoff(session_id, "h-1", execution_arn=arn, expected_status="assigned")
    stored = store.handoffs.get_handoff(session_id, "h-1")
    assert stored is not None
    assert stored.execution_arn is None


def _always_moved(store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every transaction the store commits is cancelled, as when the record moves each time; the list of them."""
    commits: list[object] = []

    def cancelled(transaction: object) -> None:
        commits.append(transaction)
        raise Cancelled(frozenset(), ClientError({"Error": {"Code": "TransactionCanceledException"}}, "Transact"))

    monkeypatch.setattr(store.table, "commit", cancelled)
    return commits


def test_a_handoff_that_keeps_changing_is_a_conflict_after_a_bounded_number_of_reads(
    store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    session_id = _queued_in_the_waiting_inbox(store)
    commits = _always_moved(store, monkeypatch)
    with pytest.raises(Conflict, match="'h-1' kept changing; retry"):
        store.handoffs.update_handoff(session_id, "h-1", status="failed")
    assert len(commits) == MAX_MOVE_READS


@pytest.mark.parametrize(
    ("change", "named"), [({"status": "lost"}, "handoff status"), ({"expected_status": "lost"}, "expected_status")]
)
def test_fails_on_a_status_that_is_not_one_naming_which(
    store: DynamoSessionStore, change: dict[str, str], named: str
) -> None:
    session_id = _queued_in_the_waiting_inbox(store)
    with pytest.raises(InvalidInput, match=named):
        store.handoffs.update_handoff(session_id, "h-1", agent_id="agent-1", **change)


def _raw(store: DynamoSessionStore, session_id: str, handoff_id: str = "h-1") -> dict[str, Any]:
    item = store.table.get(keys.handoff_key(session_id, handoff_id))
    assert item is not None
    return dict(item)


def test_a_requeue_forgets_the_wait_and_the_agent_and_remembers_who_it_was(
    store: DynamoSessionStore, clock: FakeClock
) -> None:
    # Given a handoff assigned to a-1, in a-1's inbox, its workflow waiting on a reply
    session_id = store.sessions.create_session("c-1").session_id
    begin(store, session_id)
    store.inbox.put_inbox_item("a-1", session_id=session_id, handoff_id="h-1", reason="billing")
    store.handoffs.await_callback(session_id, "h-1", "reply", "token-1")
    clock.advance(7)
    # When it is re-queued for a-1's idleness
    store.handoffs.requeue_handoff(session_id, "h-1", previous_agent_id="a-1")
    # Then no token, wait or agent is left on it, it names a-1 as the one before, and a-1's inbox lost it
    raw = _raw(store, session_id)
    assert not {"agent_id", "callback_token", "waiting_for"} & raw.keys()
    assert (raw["status"], raw[PREVIOUS_AGENT], int(raw["updated_at"])) == ("queued", "a-1", START_TIME + 7)
    assert inbox_of(store, "a-1") == []


def test_a_requeue_that_keeps_losing_its_write_is_a_conflict_after_a_bounded_number_of_reads(
    store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    session_id = store.sessions.create_session("c-1").session_id
    begin(store, session_id)
    commits = _always_moved(store, monkeypatch)
    with pytest.raises(Conflict, match="'h-1' kept changing; not re-queued"):
        store.handoffs.requeue_handoff(session_id, "h-1")
    assert len(commits) == MAX_MOVE_READS


def test_served_before_tells_an_agent_whose_access_ended_from_one_serving_and_from_a_stranger(
    store: DynamoSessionStore,
) -> None:
    session_id = store.sessions.create_session("c-1").session_id
    assert not store.handoffs.served_before(session_id, "a-1")  # no handoff yet
    begin(store, session_id)
    assert not store.handoffs.served_before(session_id, "a-1")  # serving it now
    # Re-queued away from a-1: a-1 served it before, a-2 never did
    store.handoffs.requeue_handoff(session_id, "h-1", previous_agent_id="a-1")
    assert store.handoffs.served_before(session_id, "a-1")
    assert not store.handoffs.served_before(session_id, "a-2")
    # Closed while a-1's: a-1 served it before
    other = store.sessions.create_session("c-2").session_id
    begin(store, other)
    store.handoffs.update_handoff(other, "h-1", status="completed")
    assert store.handoffs.served_before(other, "a-1")
    assert not store.handoffs.served_before(other, "a-2")


def test_a_new_handoff_is_stored_with_what_it_was_given_and_an_id_that_sorts_by_time(
    store: DynamoSessionStore, clock: FakeClock
) -> None:
    session_id = store.sessions.create_session("c-1").session_id
    arn = "arn:aws:states:us-east-1:123456789012:execution:handoff:x"
    handoff = store.handoffs.put_handoff(
        session_id, reason="billing", status="assigned", agent_id="a-1", execution_arn=arn
    )
    assert store.handoffs.get_handoff(session_id, handoff.handoff_id) == handoff
    assert (handoff.agent_id, handoff.execution_arn, handoff.status) == ("a-1", arn, HandoffStatus.ASSIGNED)
    assert handoff.ttl == int(clock()) + store.table.ttl_seconds
    stamp, _, suffix = handoff.handoff_id.partition("-")
    assert stamp == f"{int(clock() * 1000):013d}"
    assert len(suffix) == 12
    assert int(suffix, 16) >= 0


def test_fails_on_a_new_handoffs_status_that_is_not_one_naming_it(store: DynamoSessionStore) -> None:
    session_id = store.sessions.create_session("c-1").session_id
    with pytest.raises(InvalidInput, match="handoff status"):
        store.handoffs.put_handoff(session_id, reason="billing", status="lost")
