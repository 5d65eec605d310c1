"""The handoff workflow's idle limit after the first reply, on the embedded stage with its clock frozen.

No timer fires because the machine is slow: the stage's clock stands still and each test moves it
past (or short of) the stage's ``handoff_reply_idle_seconds`` itself.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from embedded import EmbeddedStage, embedded_stage
from embedded.synth import StageAssembly
from local.story.base import token_subject
from local.story.chat import Chat, open_chat, sign_in, store_of
from local.story.stage import story_config

pytestmark = pytest.mark.slow

_numbers = itertools.count()


@pytest.fixture(scope="module")
def stage(synthesized: StageAssembly) -> Iterator[EmbeddedStage]:
    with embedded_stage(synthesized.assembly_dir) as running, running.clock.frozen():
        yield running


@dataclass
class Handoff:
    """A customer's session handed to the first of the agents of its own skill (the handoff's reason)."""

    stage: EmbeddedStage
    chat: Chat
    reason: str
    execution_arn: str

    def current(self) -> Any:
        return store_of(self.stage).handoffs.current_handoff(self.chat.session_id)

    def held_by(self, agent: str) -> bool:
        handoff = self.current()
        return handoff is not None and str(handoff.status) == "assigned" and handoff.agent_id == token_subject(agent)

    def watching(self) -> bool:
        """The workflow waits for the agent's next message (its token stored after a reply)."""
        entered = self.stage.states_entered(self.execution_arn)
        handoff = self.current()
        return (
            bool(entered)
            and entered[-1] == "WatchAgent"
            and handoff is not None
            and store_of(self.stage).handoffs.waiting_for(self.chat.session_id, handoff.handoff_id) == "reply"
        )

    def write(self, agent: str, text: str) -> int:
        response = self.stage.rest.request(
            "POST",
            f"/handoffs/{self.chat.session_id}/messages",
            headers={"Authorization": f"Bearer {agent}"},
            body={"text": text},
        )
        return int(response.status)


def _admin(stage: EmbeddedStage) -> dict[str, str]:
    return {"Authorization": f"Bearer {sign_in(stage, 'idle-admin', 'admin')}"}


def agent_of(stage: EmbeddedStage, reason: str, name: str, *, online: bool = True) -> str:
    """A registered agent with the one skill ``reason`` (available when ``online``); its ID token."""
    token = sign_in(stage, name, "agent")
    body = {"agent_id": token_subject(token), "display_name": name, "skills": [reason]}
    assert stage.rest.request("POST", "/admin/agents", headers=_admin(stage), body=body).status == 201
    if online:
        response = stage.rest.request(
            "POST", "/agents/me/presence", headers={"Authorization": f"Bearer {token}"}, body={"status": "available"}
        )
        assert response.status == 200, response.body
    return token


def handed_to(stage: EmbeddedStage, agent_name: str) -> tuple[Handoff, str]:
    """A new customer handed to a new agent, the only one of its skill, who has answered once."""
    n = next(_numbers)
    reason = f"idle{n}"
    agent = agent_of(stage, reason, f"idle-agent-{n}")
    chat = open_chat(stage, f"idle-customer-{n}")
    response = stage.rest.request(
        "POST", f"/sessions/{chat.session_id}/handoff", headers=chat.auth(), body={"reason": reason}
    )
    assert response.status == 202, response.body
    handoff = Handoff(stage, chat, reason, str(response.json()["execution_arn"]))
    stage.settle(until=lambda: handoff.held_by(agent), timeout=30)
    stage.settle(until=lambda: waits_for_reply(handoff), timeout=30)
    assert handoff.write(agent, "Hello, I am here.") == 201
    stage.settle(until=handoff.watching, timeout=30)
    return handoff, agent


def waits_for_reply(handoff: Handoff) -> bool:
    current = handoff.current()
    return (
        current is not None
        and store_of(handoff.stage).handoffs.waiting_for(handoff.chat.session_id, current.handoff_id) == "reply"
    )


def agent_status(stage: EmbeddedStage, agent: str) -> str:
    record = store_of(stage).agents.get_agent(token_subject(agent))
    assert record is not None
    return str(record.status)


def test_each_message_restarts_the_idle_limit(stage: EmbeddedStage) -> None:
    # Given an agent who answered once
    limit = story_config().handoff_reply_idle_seconds
    handoff, agent = handed_to(stage, "restart")
    # When the agent writes again a little before the limit, and the clock then moves most of a limit again
    stage.clock.advance(limit - 30)
    assert handoff.write(agent, "Still checking the stock.") == 201
    stage.settle(until=lambda: stage.states_entered(handoff.execution_arn).count("WatchAgent") >= 2, timeout=30)
    stage.settle(until=handoff.watching, timeout=30)
    stage.clock.advance(limit - 30)
    stage.settle(timeout=5, wait_executions=False)
    # Then nobody was replaced: the limit counts from the last message
    assert handoff.held_by(agent)
    assert "FindReplacementAgent" not in stage.states_entered(handoff.execution_arn)
    # When the agent stays silent past the limit from its last message
    stage.clock.advance(31)
    stage.settle(until=lambda: "FindReplacementAgent" in stage.states_entered(handoff.execution_arn), timeout=30)
    stage.wait_execution(handoff.execution_arn, timeout=30)


def test_a_silent_agent_is_replaced_then_with_nobody_free_the_customer_is_back_with_the_assistant(
    stage: EmbeddedStage,
) -> None:
    # Given an agent who answered once, and a second agent of the same skill who comes online
    limit = story_config().handoff_reply_idle_seconds
    handoff, silent = handed_to(stage, "silent")
    second = agent_of(stage, handoff.reason, f"idle-second-{next(_numbers)}")
    handoff_id = handoff.current().handoff_id

    # When the first agent stays silent past the limit
    stage.clock.advance(limit + 1)
    stage.settle(until=lambda: handoff.held_by(second), timeout=30)

    # Then the same handoff is the second agent's; the silent one is free and its late message is refused
    assert handoff.current().handoff_id == handoff_id
    assert agent_status(stage, silent) == "available"
    assert handoff.write(silent, "Sorry, I was away.") == 403
    session = store_of(stage).sessions.get_session(handoff.chat.session_id)
    assert session is not None
    assert str(session.status) == "handoff"
    # And once the second agent answered, it is watched too
    stage.settle(until=lambda: waits_for_reply(handoff), timeout=30)
    assert handoff.write(second, "Hi, I am taking over.") == 201
    stage.settle(until=lambda: handoff.watching() and handoff.held_by(second), timeout=30)

    # When the first agent went away and the second one goes silent too
    away = stage.rest.request(
        "POST", "/agents/me/presence", headers={"Authorization": f"Bearer {silent}"}, body={"status": "away"}
    )
    assert away.status == 200, away.body
    stage.settle(timeout=10, wait_executions=False)  # the takeover's own notices are in
    before = len(handoff.chat.frames())
    stage.clock.advance(limit + 1)
    done = stage.wait_execution(handoff.execution_arn, timeout=60)

    # Then the customer is the assistant's again and told so, once; the second agent is free
    assert done["status"] == "FAILED", done
    assert "no other agent was free" in str(done.get("cause")), done
    stage.settle(until=lambda: any(f.get("type") == "notification" for f in handoff.chat.frames()[before:]), timeout=30)
    stage.settle(timeout=5, wait_executions=False)
    notices = [f for f in handoff.chat.frames()[before:] if isinstance(f, dict) and f.get("type") == "notification"]
    assert [n.get("event_type") for n in notices] == ["handoff_failed"], notices
    session = store_of(stage).sessions.get_session(handoff.chat.session_id)
    assert session is not None
    assert str(session.status) == "active"
    assert str(handoff.current().status) == "failed"
    assert agent_status(stage, second) == "available"
    assert handoff.write(second, "Back now.") == 403
    states = stage.states_entered(handoff.execution_arn)
    assert states[-5:] == [
        "IdleAgentReplaced",
        "NoAgentToTakeOver",
        "HandoffFailed",
        "NotifyCustomerHandoffFailed",
        "HandoffAborted",
    ]
    assert not stage.refusals
