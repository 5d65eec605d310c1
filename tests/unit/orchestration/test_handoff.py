"""lambdas.orchestration.handoff: the workflow steps reserve an agent once and never undo a handoff that is over."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from contracts.workflows import InvalidPriority
from embedded.clock import FakeClock
from lambdas.orchestration import handoff as handoff_steps
from lambdas.shared import env as lambda_env
from lambdas.shared import keys
from lambdas.shared.records import Agent, AgentStatus, HandoffStatus
from lambdas.shared.store import DynamoSessionStore


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
