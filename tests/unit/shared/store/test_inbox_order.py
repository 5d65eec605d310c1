"""The shared inboxes in service order: the most urgent priority first, then the customer waiting longest."""

from __future__ import annotations

import pytest

from embedded.clock import START_TIME, FakeClock
from lambdas.shared import keys
from lambdas.shared.errors import InvalidInput
from lambdas.shared.records import HandoffStatus
from lambdas.shared.store import DynamoSessionStore

#: (handoff id, priority, seconds after START_TIME its customer started waiting), in the order they arrive.
ARRIVALS = (
    ("h-a", "normal", 100),
    ("h-b", "low", 50),
    ("h-c", "urgent", 300),
    ("h-d", "high", 200),
    ("h-e", "urgent", 250),
    ("h-f", "normal", 20),
)
#: Urgent first (the one waiting longest first), then high, normal, low.
SERVICE_ORDER = ["h-e", "h-c", "h-d", "h-f", "h-a", "h-b"]


def wait(
    store: DynamoSessionStore, clock: FakeClock, handoff_id: str, priority: str, at: int, reason: str = "billing"
) -> str:
    """A customer whose handoff is queued at ``START_TIME + at`` and in the waiting inbox; its session id."""
    clock.now = START_TIME + at
    session_id = store.sessions.create_session("customer-1").session_id
    store.handoffs.queue_handoff(
        session_id, handoff_id=handoff_id, reason=reason, priority=priority, execution_arn=None, task_token="tok"
    )
    assert store.inbox.put_inbox_item(keys.WAITING_INBOX, session_id=session_id, handoff_id=handoff_id, reason=reason)
    return session_id


def test_the_waiting_inbox_lists_the_most_urgent_first_then_the_customer_waiting_longest(
    store: DynamoSessionStore, clock: FakeClock
) -> None:
    # Given customers arriving with mixed priorities, in neither priority nor id nor time order
    for handoff_id, priority, at in ARRIVALS:
        wait(store, clock, handoff_id, priority, at)
    clock.now = START_TIME + 400
    # When an agent reads the inbox, whole or a page at a time
    whole = store.inbox.list_inbox("agent-1").items
    paged, cursor = [], None
    while True:
        page = store.inbox.list_inbox("agent-1", limit=4, cursor=cursor)
        paged += [item.handoff_id for item in page.items]
        if (cursor := page.next_cursor) is None:
            break
    # Then they come in service order, with their priority and since when they wait
    assert [item.handoff_id for item in whole] == SERVICE_ORDER
    assert paged == SERVICE_ORDER
    assert [(item.priority, item.waiting_since - START_TIME) for item in whole[:3]] == [
        ("urgent", 250),
        ("urgent", 300),
        ("high", 200),
    ]


def test_a_requeued_customer_keeps_its_place_by_the_time_it_first_waited(
    store: DynamoSessionStore, clock: FakeClock
) -> None:
    # Given a normal customer served, then put back (its agent stayed idle), after a newer normal one queued
    first = wait(store, clock, "h-first", "normal", 10)
    store.handoffs.update_handoff(first, "h-first", status=HandoffStatus.ASSIGNED, agent_id="agent-9")
    wait(store, clock, "h-newer", "normal", 60)
    clock.now = START_TIME + 90
    store.handoffs.requeue_handoff(first, "h-first", previous_agent_id="agent-9")
    # When it is in the waiting inbox again
    assert store.inbox.put_inbox_item(keys.WAITING_INBOX, session_id=first, handoff_id="h-first", reason="billing")
    # Then it is still ahead of the newer one
    assert [item.handoff_id for item in store.inbox.list_inbox("agent-1").items] == ["h-first", "h-newer"]


def test_first_in_is_the_first_customer_still_waiting_for_one_of_the_skills(
    store: DynamoSessionStore, clock: FakeClock
) -> None:
    for handoff_id, priority, at in ARRIVALS:
        wait(store, clock, handoff_id, priority, at)
    shipping = wait(store, clock, "h-ship", "low", 500, reason="shipping")

    def first(**kwargs: object) -> str | None:
        item = store.inbox.first_in(keys.WAITING_INBOX, **kwargs)  # type: ignore[arg-type]
        return item.handoff_id if item else None

    assert first() == "h-e"
    assert first(reasons=["billing", "shipping"]) == "h-e"
    assert first(reasons=["shipping"]) == "h-ship"  # the only one with that skill, however low
    assert first(reasons=["returns"]) is None
    assert first(reasons=[]) is None
    # Only those ahead of a place: an urgent newcomer at +260 waits behind h-e alone; one at +240 behind nobody
    assert first(reasons=["billing"], before=keys.queue_sk("urgent", START_TIME + 260, "h-new")) == "h-e"
    assert first(reasons=["billing"], before=keys.queue_sk("urgent", START_TIME + 240, "h-new")) is None
    assert first(reasons=["billing"], before=keys.queue_sk("low", START_TIME + 10, "h-new")) == "h-e"
    # A customer no longer waiting is never first, even while its item is still there
    store.handoffs.update_handoff(shipping, "h-ship", status=HandoffStatus.FAILED)
    assert first(reasons=["shipping"]) is None


def test_first_in_reads_only_a_shared_inbox(store: DynamoSessionStore) -> None:
    with pytest.raises(ValueError, match="inbox must be one of"):
        store.inbox.first_in("agent-1")


def test_a_handoff_with_an_unknown_priority_is_refused_and_nothing_is_stored(store: DynamoSessionStore) -> None:
    session_id = store.sessions.create_session("customer-1").session_id
    with pytest.raises(InvalidInput, match="priority must be one of low, normal, high, urgent"):
        store.handoffs.put_handoff(session_id, reason="billing", priority="asap", handoff_id="h-1")
    assert store.handoffs.get_handoff(session_id, "h-1") is None


def test_first_in_before_a_handoffs_own_place_is_someone_ahead_of_it_never_itself(
    store: DynamoSessionStore, clock: FakeClock
) -> None:
    wait(store, clock, "h-e", "urgent", 250)
    wait(store, clock, "h-c", "urgent", 300)
    own = keys.queue_sk("urgent", START_TIME + 250, "h-e")
    assert store.inbox.first_in(keys.WAITING_INBOX, before=own) is None
    item = store.inbox.first_in(keys.WAITING_INBOX, before=keys.queue_sk("urgent", START_TIME + 300, "h-c"))
    assert item is not None
    assert item.handoff_id == "h-e"


def test_first_in_reads_past_a_page_of_customers_no_longer_waiting(store: DynamoSessionStore, clock: FakeClock) -> None:
    # Given more customers than a page who stopped waiting, their items not yet removed, ahead of one still waiting
    gone = [wait(store, clock, f"h-{n:02}", "urgent", n) for n in range(26)]
    wait(store, clock, "h-live", "normal", 100)
    for n, session_id in enumerate(gone):
        store.table.client.update_item(
            TableName=store.table.table_name,
            Key={"PK": {"S": f"SESSION#{session_id}"}, "SK": {"S": f"HANDOFF#h-{n:02}"}},
            UpdateExpression="SET #s = :f",
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues={":f": {"S": "failed"}},
        )
    # Then the next page is read, and the one still waiting is first
    item = store.inbox.first_in(keys.WAITING_INBOX)
    assert item is not None
    assert item.handoff_id == "h-live"
