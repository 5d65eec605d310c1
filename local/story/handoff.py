"""The story's handoff-life steps: the agent closes the handoff, the assistant answers again, a second handoff.

A mixin of :class:`local.story.Story`, which provides the stage, the config, the tokens, the
REST and WebSocket plumbing and the step bookkeeping declared here.
"""

from __future__ import annotations

import time

from lambdas.shared.records import AgentStatus, HandoffStatus, SessionStatus
from local.story.base import Step, StoryError, StoryParts, expect, streamed_replies

#: The second handoff's Idempotency-Key (its execution name and handoff id): it sorts before
#: the first handoff's id, so only a "current" that ignores the spelling reaches its agent.
SECOND_HANDOFF_ID = "0-second-handoff"
RESOLVED = {"resolution": "Volume 3 ships on the 14th; pre-order placed.", "outcome": "resume"}


class HandoffLifeSteps(StoryParts):
    """A handoff's whole life on the deployed stage (see the module docstring)."""

    def _close(self, step: Step, who: str) -> None:
        """``who`` closes the current handoff (resume); the customer is told; a second close is 409."""
        before, agent_id = len(self.frames()), self.subject(who)
        response = self.rest(step, "POST", f"/handoffs/{self.session_id}/close", who, body=RESOLVED)
        expect(response.status == 200, f"close answered {response.status}: {response.body}")
        answer = response.json()
        expect(
            (answer["session_status"], answer["released_agent_id"]) == ("active", agent_id),
            f"close did not resume the session and release {who}: {answer}",
        )
        # The customer notifier tells the customer from the router's "completed" event, once.
        self.stage.settle(
            until=lambda: any(f.get("type") == "handoff_closed" for f in self.frames()[before:]),
            timeout=20,
            wait_executions=False,
        )
        self.stage.settle(timeout=5, wait_executions=False)
        new = [f.get("type") for f in self.frames()[before:]]
        expect(new.count("handoff_closed") == 1, f"the customer was not told once that the handoff closed: {new}")
        again = self.rest(step, "POST", f"/handoffs/{self.session_id}/close", who, body=RESOLVED)
        expect(again.status == 409, f"a second close answered {again.status}: {again.body}")
        agent = self.store().agents.get_agent(agent_id)
        expect(agent is not None and agent.status == AgentStatus.AVAILABLE, f"{who} not released: {agent}")

    def agent_closes_handoff(self) -> None:
        started, step = (
            time.monotonic(),
            self.step("The agent closes the handoff; the session is the assistant's again"),
        )
        self._close(step, "agent-7")
        handoff = self.store().handoffs.current_handoff(self.session_id)
        expect(
            handoff is not None and handoff.status == HandoffStatus.COMPLETED,
            f"handoff not completed: {handoff}",
        )
        turns = self.rest(step, "GET", f"/sessions/{self.session_id}/turns", "agent-7")
        reply = self.rest(step, "POST", f"/handoffs/{self.session_id}/messages", "agent-7", body={"text": "still here"})
        expect((turns.status, reply.status) == (403, 403), f"agent-7 still in: {turns.status}, {reply.status}")
        step.changes.append("handoff completed; agent-7 available, its access ended (403); second close 409")
        self.done(step, started)

    def assistant_answers_again(self) -> None:
        started, step = time.monotonic(), self.step("The customer chats with the assistant again")
        text = "Thanks! Anything else like Frieren?"
        reply, new = None, []
        for _ in range(3):
            before = len(self.frames())
            self.stage.websocket.send(self.connection_id, {"action": "sendMessage", "text": text})
            step.calls.append("sendMessage")
            new = self.frames()[before:]
            reply = next(iter(streamed_replies(new)), None)
            limited = next((f for f in new if f.get("code") == "rate_limited"), None)
            if reply is not None or limited is None:
                break
            # The chat step used this connection's burst: wait (on the stage's clock) as the frame says.
            self.stage.clock.advance(float(limited["retry_after_seconds"]) + 1)
            step.changes.append(f"rate_limited; clock +{limited['retry_after_seconds']}s")
        expect(reply is not None and reply.text == f"You said: {text}", f"no assistant answer: {new}")
        step.changes.append(f"assistant reply 'You said: ...' streamed (turn {reply.turn_number if reply else '?'})")
        self.done(step, started)

    def second_handoff_reaches_a_new_agent(self) -> None:
        started, step = time.monotonic(), self.step("A second handoff (an id that sorts first) reaches a new agent")
        store = self.store()
        first_id = str(self.values["handoff_id"])
        expect(first_id > SECOND_HANDOFF_ID, f"{SECOND_HANDOFF_ID!r} does not sort before {first_id!r}")
        self.set_presence(step, "agent-7", "away")
        self.register_agent(step, "agent-8", display_name="Agent Eight", available=True)
        response = self.rest(
            step,
            "POST",
            f"/sessions/{self.session_id}/handoff",
            "alice",
            body={"reason": "general", "priority": "normal"},
            headers={"Idempotency-Key": SECOND_HANDOFF_ID},
        )
        expect(response.status == 202, f"second handoff answered {response.status}: {response.body}")
        execution = response.json()["execution_arn"]

        def assigned() -> bool:
            handoff = store.handoffs.current_handoff(self.session_id)
            return handoff is not None and handoff.status == HandoffStatus.ASSIGNED

        try:
            self.stage.settle(until=assigned, timeout=20)
        except TimeoutError:
            raise StoryError(f"second handoff not assigned: {self.stage.execution_errors(execution)}") from None
        handoff = store.handoffs.current_handoff(self.session_id)
        expect(
            handoff is not None
            and (handoff.handoff_id, handoff.agent_id) == (SECOND_HANDOFF_ID, self.subject("agent-8")),
            f"the current handoff is {handoff}",
        )
        reads = [
            self.rest(step, "GET", f"/sessions/{self.session_id}/turns", who).status for who in ("agent-8", "agent-7")
        ]
        expect(reads == [200, 404], f"turns: agent-8 {reads[0]}, agent-7 {reads[1]} (want 200, 404)")
        # agent-7 holds a valid agent token, but this handoff is agent-8's: it may neither write nor close
        intruder = [
            self.rest(step, "POST", f"/handoffs/{self.session_id}/messages", "agent-7", body={"text": "me too"}).status,
            self.rest(step, "POST", f"/handoffs/{self.session_id}/close", "agent-7", body=RESOLVED).status,
        ]
        expect(intruder == [403, 403], f"agent-7 on agent-8's handoff: message {intruder[0]}, close {intruder[1]}")
        reply = self.rest(
            step, "POST", f"/handoffs/{self.session_id}/messages", "agent-8", body={"text": "Agent Eight here."}
        )
        expect(reply.status == 201, f"agent-8's message answered {reply.status}: {reply.body}")
        done = self.stage.wait_execution(execution, timeout=20)
        expect(done["status"] == "SUCCEEDED", f"second handoff execution ended {done['status']}")
        self._close(step, "agent-8")
        session = store.sessions.get_session(self.session_id)
        expect(session is not None and session.status == SessionStatus.ACTIVE, f"session not active: {session}")
        step.changes.append(f"handoff {SECOND_HANDOFF_ID} assigned to agent-8, answered, closed; session active")
        self.done(step, started)
