"""lambdas.api.inbox: an agent's inbox page, with the managers inbox for managers only."""

from __future__ import annotations

import pytest

from lambdas.api import inbox
from lambdas.shared import keys
from lambdas.shared.records import Agent, HandoffStatus
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
