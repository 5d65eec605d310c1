"""lambdas.api.inbox: an agent's inbox page, with the managers inbox for managers only."""

from __future__ import annotations

import pytest

from embedded.clock import FakeClock
from lambdas.api import inbox
from lambdas.shared import keys
from lambdas.shared.records import Agent, AgentStatus, HandoffStatus
from lambdas.shared.store import DynamoSessionStore


@pytest.fixture
def stage_store(store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch) -> DynamoSessionStore:
    monkeypatch.setattr(inbox, "store", lambda: store)
    return store


def test_a_manager_reads_the_managers_inbox_by_flag_or_by_the_stages_skill() -> None:
    assert inbox.reads_managers_inbox(Agent(agent_id="a", skills=(), is_manager=True))
    assert inbox.reads_managers_inbox(Agent(agent_id="a", skills=("manager",)))
    assert not inbox.reads_managers_inbox(Agent(agent_id="a", skills=("billing",)))


def test_a_page_names_the_inboxes_it_read_and_holds_their_items(stage_store: DynamoSessionStore) -> None:
    session_id = stage_store.sessions.create_session("c-1").session_id
    stage_store.handoffs.put_handoff(session_id, reason="billing", status=HandoffStatus.ESCALATED, handoff_id="h-1")
    stage_store.inbox.put_inbox_item(keys.MANAGERS_INBOX, session_id=session_id, handoff_id="h-1", reason="billing")
    agent = Agent(agent_id="a-1", skills=("billing",))
    assert inbox.read_inbox(agent, limit=20, cursor=None) == {
        "agent_id": "a-1",
        "inboxes": ["own", "waiting"],
        "items": [],
        "next": None,
        "next_cursor": None,
    }
    boss = Agent(agent_id="boss", skills=(), is_manager=True)
    page = inbox.read_inbox(boss, limit=20, cursor=None)
    assert page["inboxes"] == ["own", "waiting", "managers"]
    assert [(i["inbox"], i["handoff_id"]) for i in page["items"]] == [("managers", "h-1")]


def _waiting(store: DynamoSessionStore, handoff_id: str, priority: str, reason: str = "billing") -> str:
    session_id = store.sessions.create_session("c-1").session_id
    store.handoffs.queue_handoff(
        session_id, handoff_id=handoff_id, reason=reason, priority=priority, execution_arn=None, task_token="tok"
    )
    store.inbox.put_inbox_item(keys.WAITING_INBOX, session_id=session_id, handoff_id=handoff_id, reason=reason)
    return session_id


def test_an_available_agent_is_offered_the_most_urgent_longest_waiting_customer_it_can_take(
    stage_store: DynamoSessionStore, clock: FakeClock
) -> None:
    # Given a normal customer waiting 10 minutes, then an urgent one asking another skill, then an urgent one
    _waiting(stage_store, "h-normal", "normal")
    clock.advance(60)
    _waiting(stage_store, "h-other-skill", "urgent", reason="shipping")
    clock.advance(60)
    urgent = _waiting(stage_store, "h-urgent", "urgent")
    clock.advance(480)
    # When an available billing agent reads its inbox
    page = inbox.read_inbox(Agent(agent_id="a-1", skills=("billing",)), limit=20, cursor=None)
    # Then every waiting customer is listed in service order, with how long each waits
    assert [(i["handoff_id"], i["priority"], i["waiting_seconds"]) for i in page["items"]] == [
        ("h-other-skill", "urgent", 540),
        ("h-urgent", "urgent", 480),
        ("h-normal", "normal", 600),
    ]
    # and it is offered the urgent customer it can take, though the normal one waits longer
    assert page["next"] is not None
    assert (page["next"]["handoff_id"], page["next"]["session_id"]) == ("h-urgent", urgent)
    assert page["next"]["waiting_seconds"] == 480
    # A busy or away agent is offered nobody
    for status in (AgentStatus.BUSY, AgentStatus.AWAY):
        busy = Agent(agent_id="a-2", skills=("billing",), status=status)
        assert inbox.read_inbox(busy, limit=20, cursor=None)["next"] is None


def test_a_manager_is_offered_an_escalated_customer_before_a_waiting_one(
    stage_store: DynamoSessionStore, clock: FakeClock
) -> None:
    _waiting(stage_store, "h-urgent", "urgent")
    clock.advance(60)
    session_id = stage_store.sessions.create_session("c-2").session_id
    stage_store.handoffs.put_handoff(
        session_id, reason="billing", priority="low", status=HandoffStatus.ESCALATED, handoff_id="h-esc"
    )
    stage_store.inbox.put_inbox_item(keys.MANAGERS_INBOX, session_id=session_id, handoff_id="h-esc", reason="billing")
    boss = Agent(agent_id="boss", skills=("billing",), is_manager=True)
    assert inbox.read_inbox(boss, limit=20, cursor=None)["next"]["handoff_id"] == "h-esc"
    # Once nobody is escalated, the manager is offered the waiting customer it can take
    stage_store.handoffs.update_handoff(session_id, "h-esc", status=HandoffStatus.FAILED)
    assert inbox.read_inbox(boss, limit=20, cursor=None)["next"]["handoff_id"] == "h-urgent"


def test_a_long_inbox_is_read_page_by_page_with_its_cursor(stage_store: DynamoSessionStore) -> None:
    for n in range(3):
        _waiting(stage_store, f"h-{n}", "normal")
    agent = Agent(agent_id="a-1", skills=("billing",))
    first = inbox.read_inbox(agent, limit=2, cursor=None)
    assert len(first["items"]) == 2
    assert first["next_cursor"] is not None
    rest = inbox.read_inbox(agent, limit=2, cursor=first["next_cursor"])
    read = [i["handoff_id"] for i in first["items"] + rest["items"]]
    assert sorted(read) == ["h-0", "h-1", "h-2"]
