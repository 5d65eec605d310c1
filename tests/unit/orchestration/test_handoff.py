"""lambdas.orchestration.handoff: the workflow steps reserve an agent once and never undo a handoff that is over."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from contracts.workflows import InvalidPriority, ReassignmentLimitReached
from embedded.clock import FakeClock
from lambdas.orchestration import handoff as handoff_steps
from lambdas.shared import env as lambda_env
from lambdas.shared import keys
from lambdas.shared.records import Agent, AgentStatus, HandoffStatus, SessionStatus
from lambdas.shared.store import DynamoSessionStore
from tests.unit.handoffs import begin


@pytest.fixture
def steps_env(table_name: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TABLE_NAME", table_name)
    lambda_env.reset()
    yield
    lambda_env.reset()


def test_concurrent_reservations_never_share_an_agent(store: DynamoSessionStore, steps_env: None) -> None:
    # Given three available agents and ten handoffs asking at once
    for n in range(3):
        store.agents.put_agent(Agent(agent_id=f"agent-{n}", skills=("billing",)))
    winners: list[str | None] = []
    lock = threading.Lock()

    def ask(n: int) -> None:
        agent_id = handoff_steps._reserve_first("billing", f"session-{n}")
        with lock:
            winners.append(agent_id)

    threads = [threading.Thread(target=ask, args=(n,)) for n in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    # Then each agent went to exactly one handoff
    taken = [w for w in winners if w is not None]
    assert sorted(taken) == ["agent-0", "agent-1", "agent-2"]
    assert winners.count(None) == 7


@pytest.mark.parametrize(
    ("status", "after"),
    [
        (HandoffStatus.COMPLETED, HandoffStatus.COMPLETED),  # closed meanwhile: its completion stays
        (HandoffStatus.FAILED, HandoffStatus.FAILED),
        (HandoffStatus.QUEUED, HandoffStatus.FAILED),
        (HandoffStatus.ESCALATED, HandoffStatus.FAILED),
    ],
)
def test_a_late_failure_never_overwrites_a_handoff_that_is_over(
    store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch, status: HandoffStatus, after: HandoffStatus
) -> None:
    monkeypatch.setattr(handoff_steps, "store", lambda: store)
    session = store.sessions.create_session("cust-1")
    store.handoffs.put_handoff(session.session_id, reason="billing", status=status, handoff_id="h-1")
    state = {"session_id": session.session_id, "error": {"Error": "CustomerLeft"}}
    result = handoff_steps.fail.__wrapped__({"state": state, "handoff_id": "h-1"}, None)
    handoff = store.handoffs.get_handoff(session.session_id, "h-1")
    assert handoff is not None
    assert handoff.status == after
    assert result["marked_failed"] is (status != after)
    assert result["reason"] == "the customer left before an agent took the handoff"


# ------------------------------------------------------------------ priority


def _waiting(store: DynamoSessionStore, handoff_id: str, priority: str, reason: str = "billing") -> str:
    """A customer queued now and in the waiting inbox; its session id."""
    session_id = store.sessions.create_session("cust-waiting").session_id
    store.handoffs.queue_handoff(
        session_id, handoff_id=handoff_id, reason=reason, priority=priority, execution_arn=None, task_token="tok"
    )
    assert store.inbox.put_inbox_item(keys.WAITING_INBOX, session_id=session_id, handoff_id=handoff_id, reason=reason)
    return session_id


def _asking(store: DynamoSessionStore, priority: str, reason: str = "billing") -> dict[str, str]:
    """The agent check's input for a new handoff (no record yet, as on the workflow's first check)."""
    session_id = store.sessions.create_session("cust-new").session_id
    return {"session_id": session_id, "handoff_id": "h-new", "reason": reason, "priority": priority}


@pytest.mark.parametrize(
    ("waiting_priority", "new_priority"),
    [("urgent", "normal"), ("high", "low"), ("normal", "normal")],  # more urgent, or as urgent and waiting longer
)
def test_the_agent_check_leaves_a_free_agent_to_the_customer_served_first(
    store: DynamoSessionStore,
    monkeypatch: pytest.MonkeyPatch,
    clock: FakeClock,
    waiting_priority: str,
    new_priority: str,
) -> None:
    # Given a free agent, and a customer asking its skill who waits ahead of a new handoff
    monkeypatch.setattr(handoff_steps, "store", lambda: store)
    store.agents.put_agent(Agent(agent_id="agent-1", skills=("billing",)))
    _waiting(store, "h-waiting", waiting_priority)
    clock.advance(30)
    # When the workflow checks for an agent for the new one
    result = handoff_steps.check_agent.__wrapped__(_asking(store, new_priority), None)
    # Then nobody is reserved for it: it queues behind, and the agent stays free for the one ahead
    assert result == {"available": False, "behind": "h-waiting"}
    agent = store.agents.get_agent("agent-1")
    assert agent is not None
    assert agent.status == AgentStatus.AVAILABLE


@pytest.mark.parametrize(
    ("waiting", "new"),
    [
        (("normal", "billing"), ("urgent", "billing")),  # the newcomer is more urgent
        (("low", "billing"), ("normal", "billing")),
        (("urgent", "shipping"), ("low", "billing")),  # the one waiting needs another skill
    ],
)
def test_the_agent_check_reserves_a_free_agent_when_nobody_it_could_serve_waits_ahead(
    store: DynamoSessionStore,
    monkeypatch: pytest.MonkeyPatch,
    clock: FakeClock,
    waiting: tuple[str, str],
    new: tuple[str, str],
) -> None:
    monkeypatch.setattr(handoff_steps, "store", lambda: store)
    store.agents.put_agent(Agent(agent_id="agent-1", skills=("billing", "shipping")))
    _waiting(store, "h-waiting", *waiting)
    clock.advance(30)
    result = handoff_steps.check_agent.__wrapped__(_asking(store, *new), None)
    assert result == {"available": True, "agent_id": "agent-1"}


def test_a_reassigned_handoff_keeps_its_place_ahead_of_newer_customers(
    store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch, clock: FakeClock
) -> None:
    # Given a normal handoff whose idle agent was released, and a newer normal customer waiting
    monkeypatch.setattr(handoff_steps, "store", lambda: store)
    event = _asking(store, "normal")
    store.handoffs.queue_handoff(
        event["session_id"], handoff_id="h-new", reason="billing", priority="normal", execution_arn=None, task_token="t"
    )
    clock.advance(30)
    _waiting(store, "h-newer", "normal")
    store.agents.put_agent(Agent(agent_id="agent-1", skills=("billing",)))
    # When the workflow checks again for the older handoff
    result = handoff_steps.check_agent.__wrapped__(event, None)
    # Then it gets the free agent: it waited longer
    assert result == {"available": True, "agent_id": "agent-1"}


@pytest.mark.parametrize("priority", ["asap", "", None, 3, "URGENT"])
def test_the_agent_check_refuses_a_priority_outside_the_vocabulary(
    store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch, priority: object
) -> None:
    monkeypatch.setattr(handoff_steps, "store", lambda: store)
    store.agents.put_agent(Agent(agent_id="agent-1", skills=("billing",)))
    event: dict[str, object] = {**_asking(store, "normal"), "priority": priority}
    with pytest.raises(InvalidPriority, match="priority must be one of low, normal, high, urgent"):
        handoff_steps.check_agent.__wrapped__(event, None)
    agent = store.agents.get_agent("agent-1")
    assert agent is not None
    assert agent.status == AgentStatus.AVAILABLE  # nobody reserved
    # and HandoffFailed tells why
    state = {"session_id": event["session_id"], "error": {"Error": "InvalidPriority"}}
    reason = handoff_steps._failure_reason(state)
    assert reason == "the handoff's priority is not one of low, normal, high, urgent"


def _silent(store: DynamoSessionStore, *, replacement: str | None = "agent-2") -> str:
    """A session handed to agent-1 (one message, version 1) and, reserved to replace it, ``replacement``."""
    session = store.sessions.create_session("cust-1")
    for agent_id in ("agent-1", "agent-2"):
        store.agents.put_agent(Agent(agent_id=agent_id, skills=("billing",)))
    store.agents.reserve_agent("agent-1", session.session_id)
    begin(store, session.session_id, agent_id="agent-1")
    store.handoffs.record_activity(session.session_id, "h-1", "agent-1")
    if replacement:
        store.agents.reserve_agent(replacement, session.session_id)
    return session.session_id


def _replace(session_id: str, version: int, replacement: str | None = "agent-2") -> dict[str, Any]:
    """ReplaceIdleAgent's payload, as the workflow sends it."""
    state = {"session_id": session_id, "agent": {"agent_id": "agent-1", "available": True}}
    found = {"available": True, "agent_id": replacement} if replacement else {"available": False}
    event = {"state": state, "handoff_id": "h-1", "expected_version": version, "replacement": found}
    result: dict[str, Any] = handoff_steps.reassign.__wrapped__(event, None)
    return result


def _status(store: DynamoSessionStore, agent_id: str) -> AgentStatus:
    agent = store.agents.get_agent(agent_id)
    assert agent is not None
    return agent.status


def test_a_silent_agent_is_let_go_and_its_replacement_stays_reserved(
    store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given agent-1 silent since version 1 and agent-2 reserved to take over
    monkeypatch.setattr(handoff_steps, "store", lambda: store)
    session_id = _silent(store)

    result = _replace(session_id, 1)

    # Then the handoff is re-queued for agent-2 to be assigned, agent-1 is free, the session is the assistant's
    assert result == {"count": 1, "closed": False, "released_agent_id": "agent-1"}
    handoff = store.handoffs.get_handoff(session_id, "h-1")
    assert handoff is not None
    assert handoff.status == HandoffStatus.QUEUED
    assert (_status(store, "agent-1"), _status(store, "agent-2")) == (AgentStatus.AVAILABLE, AgentStatus.BUSY)
    session = store.sessions.get_session(session_id)
    assert session is not None
    assert session.status == SessionStatus.ACTIVE


def test_an_agent_who_wrote_as_the_idle_limit_fired_keeps_the_handoff_and_the_replacement_is_freed(
    store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given agent-1's watch saw version 1, and agent-1 wrote again just before ReplaceIdleAgent ran
    monkeypatch.setattr(handoff_steps, "store", lambda: store)
    session_id = _silent(store)
    store.handoffs.record_activity(session_id, "h-1", "agent-1")

    result = _replace(session_id, 1)

    # Then nothing moved but the replacement's reservation, and the watch goes on from version 2
    assert result == {"count": 0, "closed": False, "replied": True, "version": 2}
    handoff = store.handoffs.get_handoff(session_id, "h-1")
    assert handoff is not None
    assert (handoff.status, handoff.agent_id) == (HandoffStatus.ASSIGNED, "agent-1")
    assert (_status(store, "agent-1"), _status(store, "agent-2")) == (AgentStatus.BUSY, AgentStatus.AVAILABLE)
    session = store.sessions.get_session(session_id)
    assert session is not None
    assert session.status == SessionStatus.HANDOFF


def test_a_handoff_closed_as_the_idle_limit_fired_frees_the_replacement(
    store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(handoff_steps, "store", lambda: store)
    session_id = _silent(store)
    store.handoffs.update_handoff(session_id, "h-1", status=HandoffStatus.COMPLETED)

    result = _replace(session_id, 1)

    assert result["closed"] is True
    assert _status(store, "agent-2") == AgentStatus.AVAILABLE


def test_past_the_reassignment_bound_the_replacement_is_freed_too(
    store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the stage allows no reassignment
    monkeypatch.setattr(handoff_steps, "store", lambda: store)
    bounded = replace(handoff_steps.settings(), max_reassignments=0)
    monkeypatch.setattr(handoff_steps, "settings", lambda: bounded)
    session_id = _silent(store)

    with pytest.raises(ReassignmentLimitReached):
        _replace(session_id, 1)

    assert (_status(store, "agent-1"), _status(store, "agent-2")) == (AgentStatus.AVAILABLE, AgentStatus.AVAILABLE)


def test_the_failure_step_frees_a_replacement_that_never_took_over(
    store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(handoff_steps, "store", lambda: store)
    session_id = _silent(store)
    state = {
        "session_id": session_id,
        "agent": {"agent_id": "agent-1"},
        "replacement": {"available": True, "agent_id": "agent-2"},
        "error": {"Error": "NoAgentToTakeOver"},
    }

    result = handoff_steps.fail.__wrapped__({"state": state, "handoff_id": "h-1"}, None)

    assert (_status(store, "agent-1"), _status(store, "agent-2")) == (AgentStatus.AVAILABLE, AgentStatus.AVAILABLE)
    assert result["reason"] == "the agent stopped answering and no other agent was free to take over"


def test_a_reply_wait_stores_its_token_only_while_the_handoff_is_assigned(
    store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an assigned handoff
    monkeypatch.setattr(handoff_steps, "store", lambda: store)
    session_id = _silent(store, replacement=None)
    event = {"session_id": session_id, "handoff_id": "h-1", "task_token": "watch-1"}

    # When MonitorHandoff or WatchAgent starts / Then its token waits for the agent's next message
    assert handoff_steps.await_reply.__wrapped__(event, None) == {"waiting_for": "reply"}
    assert store.handoffs.claim_callback(session_id, "h-1", "reply") == "watch-1"
    # When the handoff was closed before the next wait started (the agent closed at once after accepting)
    store.handoffs.update_handoff(session_id, "h-1", status=HandoffStatus.COMPLETED)
    ended: list[tuple[str, Any]] = []

    class Recording:
        def send_task_success(self, *, taskToken: str, output: str) -> None:
            ended.append((taskToken, json.loads(output)))

    monkeypatch.setattr(handoff_steps, "sfn", Recording)
    result = handoff_steps.await_reply.__wrapped__({**event, "task_token": "watch-2"}, None)
    # Then the wait ends itself as closed (nobody else would), and no token is stored
    assert result["closed"] is True
    assert ended == [("watch-2", {"closed": True})]
    assert store.handoffs.waiting_for(session_id, "h-1") is None


def test_a_reply_wait_that_begins_after_the_agent_wrote_ends_itself_with_the_agents_version(
    store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given agent-1 already wrote once (version 1), before MonitorHandoff's wait began
    monkeypatch.setattr(handoff_steps, "store", lambda: store)
    session_id = _silent(store, replacement=None)
    ended: list[tuple[str, Any]] = []

    class Recording:
        def send_task_success(self, *, taskToken: str, output: str) -> None:
            ended.append((taskToken, json.loads(output)))

    monkeypatch.setattr(handoff_steps, "sfn", Recording)
    event = {"session_id": session_id, "handoff_id": "h-1", "agent_id": "agent-1", "task_token": "monitor-1"}

    # When MonitorHandoff starts its wait expecting the agent to have written nothing
    result = handoff_steps.await_reply.__wrapped__({**event, "expected_version": 0}, None)

    # Then the wait ends itself as the reply would have, with its version, and stores no token
    assert result == {"waiting_for": "reply", "version": 1}
    assert ended == [("monitor-1", {"agent_id": "agent-1", "version": 1})]
    assert store.handoffs.waiting_for(session_id, "h-1") is None
    # And WatchAgent's wait at the version it saw waits for the agent's next message
    watching = handoff_steps.await_reply.__wrapped__({**event, "task_token": "watch-1", "expected_version": 1}, None)
    assert watching == {"waiting_for": "reply"}
    assert store.handoffs.claim_callback(session_id, "h-1", "reply") == "watch-1"
    assert len(ended) == 1


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"expected_version": -1}, "expected_version must be an activity version"),
        ({"expected_version": True}, "expected_version must be an activity version"),
        ({"expected_version": "1"}, "expected_version must be an activity version"),
        ({"expected_version": 0, "waiting_for": "agent"}, "reply wait only"),
    ],
)
def test_a_wait_refuses_an_expected_version_that_is_not_a_version(
    store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch, extra: dict[str, Any], message: str
) -> None:
    monkeypatch.setattr(handoff_steps, "store", lambda: store)
    session_id = _silent(store, replacement=None)
    event = {"session_id": session_id, "handoff_id": "h-1", "task_token": "t", **extra}
    with pytest.raises(ValueError, match=message):
        handoff_steps.await_reply.__wrapped__(event, None)
    assert store.handoffs.waiting_for(session_id, "h-1") is None
