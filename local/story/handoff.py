"""The story's handoff-life steps: a handoff requested, queued while no agent is free, accepted, notified,
answered and closed; the assistant answers again; a second handoff reaches a new agent.

A mixin of :class:`local.story.Story`, which provides the stage, the config, the tokens, the
REST and WebSocket plumbing and the step bookkeeping declared here.
"""

from __future__ import annotations

import time

from embedded.services.sns import published
from lambdas.shared.records import AgentStatus, HandoffStatus, SessionStatus
from local.story.base import Step, StoryError, StoryParts, expect, present, streamed_replies
from local.story.privacy import AGENT_REPLY

#: The second handoff's Idempotency-Key (its execution name and handoff id): it sorts before
#: the first handoff's id, so only a "current" that ignores the spelling reaches its agent.
SECOND_HANDOFF_ID = "0-second-handoff"
RESOLVED = {"resolution": "Volume 3 ships on the 14th; pre-order placed.", "outcome": "resume"}


class HandoffLifeSteps(StoryParts):
    """A handoff's whole life on the deployed stage (see the module docstring)."""

    def _queue_label(self, queue_arn: str) -> str:
        """A queue named by what consumes it (the handler of its mapping), from the template."""
        for function in self.stage.functions():
            if any(m.event_source_arn == queue_arn for m in self.stage.mappings_of(function.name)):
                return function.handler.rsplit(".", 2)[-2]
        return queue_arn.rsplit(":", 1)[-1]

    def request_handoff(self) -> None:
        started, step = time.monotonic(), self.step("Request a handoff (REST -> Step Functions, request template)")
        self.register_agent(step, "agent-7", display_name="Agent Seven")
        response = self.rest(
            step,
            "POST",
            f"/sessions/{self.session_id}/handoff",
            "alice",
            body={"reason": "general", "priority": "high"},
        )
        expect(response.status == 202, f"handoff request answered {response.status}: {response.body}")
        self.values["handoff_execution"] = response.json()["execution_arn"]
        step.changes.append(f"execution {self.values['handoff_execution'].rsplit(':', 1)[-1]} started")
        self.done(step, started)

    def no_agent_free(self) -> None:
        started, step = (
            time.monotonic(),
            self.step("No agent is free: the customer is told they wait, and what they write is kept for the agent"),
        )
        store = self.store()

        def queued() -> bool:
            handoff = store.handoffs.current_handoff(self.session_id)
            return handoff is not None and handoff.status == "queued"

        self.stage.settle(until=queued, timeout=20)
        handoff = store.handoffs.current_handoff(self.session_id)
        handoff = present(handoff, "handoff")
        self.values["handoff_id"] = handoff.handoff_id
        step.changes.append(f"handoff {handoff.handoff_id} queued (waiting for an agent)")
        self._told_queued(step, handoff.handoff_id)
        self._writes_while_waiting(step)
        self.done(step, started)

    def _told_queued(self, step: Step, handoff_id: str) -> None:
        """The customer hears at once that they wait, and where; the session reads ``handoff`` everywhere."""

        def told() -> list[dict[str, object]]:
            return [f for f in self.frames() if f.get("type") == "notification" and f.get("event_type") == "queued"]

        self.stage.settle(until=lambda: bool(told()), timeout=20, wait_executions=False)
        (frame,) = told()
        expect(
            (frame.get("status"), frame.get("handoff_id"), frame.get("ahead")) == ("handoff", handoff_id, 0),
            f"the queued notice: {frame}",
        )
        shown = self.rest(step, "GET", f"/sessions/{self.session_id}", "alice")
        expect(shown.json().get("status") == "handoff", f"GET /sessions/{{id}} while waiting: {shown.body}")
        stored = present(self.store().sessions.get_session(self.session_id), "session")
        step.changes.append(
            f"customer frame notification queued (ahead {frame['ahead']}): {frame['text']!r}; "
            f"GET /sessions/{{id}} status handoff (stored status {stored.status} until an agent takes it)"
        )

    def _writes_while_waiting(self, step: Step) -> None:
        """What the customer writes while queued is kept for the agent; the model does not answer it."""
        # The chat before spent the buckets: one message's worth of time passes (far below the agent wait).
        per_minute = min(self.config.chat_connection_messages_per_minute, self.config.chat_customer_messages_per_minute)
        self.stage.clock.advance(60 // per_minute + 1)
        before, calls_before = len(self.frames()), len(self.stage.bedrock.calls)
        text = "While I wait: it is order 1234."
        self.stage.websocket.send(self.connection_id, {"action": "sendMessage", "text": text})
        new = self.frames()[before:]
        expect(
            [(f.get("type"), f.get("status")) for f in new] == [("ack", "handoff")],
            f"a message while queued got {new}",
        )
        expect(len(self.stage.bedrock.calls) == calls_before, "the model answered a customer who waits for an agent")
        last = self.store().turns.list_turns(self.session_id, limit=1).items
        expect(bool(last) and last[0].content == text, f"the message while queued is not stored: {last}")
        step.changes.append(
            f"sendMessage while queued -> ack (status handoff), stored as turn {last[0].turn_number}, no model call"
        )

    def agent_accepts(self) -> None:
        started, step = time.monotonic(), self.step("The agent comes online and accepts through the API")
        self.set_presence(step, "agent-7", "available")
        response = self.rest(step, "POST", f"/handoffs/{self.session_id}/accept", "agent-7")
        expect(response.status == 200, f"accept answered {response.status}: {response.body}")
        store = self.store()

        def assigned() -> bool:
            handoff = store.handoffs.current_handoff(self.session_id)
            return handoff is not None and handoff.status == "assigned"

        try:
            self.stage.settle(until=assigned, timeout=20)
        except TimeoutError:
            errors = self.stage.execution_errors(self.values["handoff_execution"])
            raise StoryError(f"handoff not assigned: {errors}") from None
        session = store.sessions.get_session(self.session_id)
        expect(session is not None and session.status == "handoff", f"session not in handoff: {session}")
        step.changes.append("handoff assigned to agent-7; session status handoff")
        self.done(step, started)

    def notifications(self) -> None:
        started, step = (
            time.monotonic(),
            self.step("Notifications land in exactly the queues the filter policies select"),
        )
        self.stage.settle(timeout=20, wait_executions=False)
        topic_arn = self.stage.function("lambdas.events.router.handler").environment["HANDOFF_TOPIC_ARN"]
        topic = self.stage.only("AWS::SNS::Topic", where=lambda t: t.ref == topic_arn)
        messages = published(self.stage.cloud, topic, self.stage.all("AWS::SNS::Subscription"))
        expect(bool(messages), "the handoff topic published nothing")
        received = self.stage.queues.received
        names = {q.attributes["Arn"]: q.attributes["QueueName"] for q in self.stage.all("AWS::SQS::Queue")}
        for message in messages:
            actual = frozenset(arn for arn, bodies in received.items() if message.message in bodies)
            expect(
                actual == message.expected_queues,
                f"{message.event_type}: selected {sorted(names[a] for a in message.expected_queues)}, "
                f"landed in {sorted(names[a] for a in actual)}",
            )
            # A message no filter selects is published for nobody: each must reach a queue.
            expect(bool(actual), f"{message.event_type} reached no queue")
            labels = sorted(self._queue_label(a) for a in actual)
            step.changes.append(f"{message.event_type} -> {', '.join(labels)}")
        kinds = [f.get("type") for f in self.frames()]
        step.changes.append(f"customer frames so far: {kinds[-4:]}")
        self.done(step, started)

    def agent_replies(self) -> None:
        started, step = time.monotonic(), self.step("The agent replies; the handoff workflow watches for the next")
        before = len(self.frames())
        response = self.rest(
            step, "POST", f"/handoffs/{self.session_id}/messages", "agent-7", body={"text": AGENT_REPLY}
        )
        expect(response.status == 201, f"agent message answered {response.status}: {response.body}")
        new = self.frames()[before:]
        expect(
            any(f.get("type") == "message" and f.get("role") == "agent" for f in new),
            f"customer got no agent frame: {new}",
        )
        execution = self.values["handoff_execution"]
        try:
            self.stage.settle(
                until=lambda: "WatchAgent" in self.stage.states_entered(execution), timeout=40, wait_executions=False
            )
        except TimeoutError:
            raise StoryError(
                f"the workflow does not watch the agent: {self.stage.execution_errors(execution)}"
            ) from None
        step.changes.append("customer frame message (role agent); the workflow waits for the agent's next message")
        self.done(step, started)

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
        done = self.stage.wait_execution(self.values["handoff_execution"], timeout=40)
        expect(done["status"] == "SUCCEEDED", f"handoff execution ended {done['status']}")
        handoff = self.store().handoffs.current_handoff(self.session_id)
        expect(
            handoff is not None and handoff.status == HandoffStatus.COMPLETED,
            f"handoff not completed: {handoff}",
        )
        turns = self.rest(step, "GET", f"/sessions/{self.session_id}/turns", "agent-7")
        reply = self.rest(step, "POST", f"/handoffs/{self.session_id}/messages", "agent-7", body={"text": "still here"})
        expect((turns.status, reply.status) == (403, 403), f"agent-7 still in: {turns.status}, {reply.status}")
        step.changes.append(
            "handoff and its execution completed; agent-7 free, its access ended (403); second close 409"
        )
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
        self._close(step, "agent-8")
        done = self.stage.wait_execution(execution, timeout=20)
        expect(done["status"] == "SUCCEEDED", f"second handoff execution ended {done['status']}")
        session = store.sessions.get_session(self.session_id)
        expect(session is not None and session.status == SessionStatus.ACTIVE, f"session not active: {session}")
        step.changes.append(f"handoff {SECOND_HANDOFF_ID} assigned to agent-8, answered, closed; session active")
        self.done(step, started)

    def _handoff_of(self, agent: str) -> bool:
        handoff = self.store().handoffs.current_handoff(self.session_id)
        return handoff is not None and handoff.status == HandoffStatus.ASSIGNED and handoff.agent_id == agent

    def _watched(self, execution: str, times: int) -> None:
        """Settle until the workflow watches the agent for the ``times``-th time, its token stored."""
        store = self.store()

        def watching() -> bool:
            handoff = store.handoffs.current_handoff(self.session_id)
            return (
                self.stage.states_entered(execution).count("WatchAgent") >= times
                and handoff is not None
                and store.handoffs.waiting_for(self.session_id, handoff.handoff_id) == "reply"
            )

        self.stage.settle(until=watching, timeout=30, wait_executions=False)

    def _reply(self, step: Step, who: str, text: str) -> int:
        path = f"/handoffs/{self.session_id}/messages"
        return int(self.rest(step, "POST", path, who, body={"text": text}).status)

    def silent_agent_is_replaced(self) -> None:
        started, step = time.monotonic(), self.step("An agent goes silent after answering: another agent takes over")
        store, limit = self.store(), self.config.handoff_reply_idle_seconds
        first = self.register_agent(step, "agent-s1", skills=("subscriptions",), available=True)
        response = self.rest(
            step, "POST", f"/sessions/{self.session_id}/handoff", "alice", body={"reason": "subscriptions"}
        )
        expect(response.status == 202, f"handoff request answered {response.status}: {response.body}")
        execution = self.values["silent_execution"] = response.json()["execution_arn"]
        self.stage.settle(until=lambda: self._handoff_of(first), timeout=30, wait_executions=False)
        self._watched_first_reply(step, "agent-s1", execution)
        second = self.register_agent(step, "agent-s2", skills=("subscriptions",), available=True)
        self.stage.clock.advance(limit + 1)
        step.calls.append(f"clock +{limit + 1}s: agent-s1 silent past the limit")
        self.stage.settle(until=lambda: self._handoff_of(second), timeout=30, wait_executions=False)
        late = self._reply(step, "agent-s1", "Sorry, I was away.")
        expect(late == 403, f"the replaced agent's late message answered {late}")
        agent = store.agents.get_agent(first)
        expect(agent is not None and agent.status == AgentStatus.AVAILABLE, f"agent-s1 not freed: {agent}")
        self._watched_first_reply(step, "agent-s2", execution)
        step.changes.append("agent-s1 replaced by agent-s2 in the same handoff; agent-s1 free, its late message 403")
        self.done(step, started)

    def _watched_first_reply(self, step: Step, who: str, execution: str) -> None:
        """``who`` answers once MonitorHandoff waits; then the workflow watches ``who``."""
        store = self.store()
        self.stage.settle(
            until=lambda: (
                (h := store.handoffs.current_handoff(self.session_id)) is not None
                and store.handoffs.waiting_for(self.session_id, h.handoff_id) == "reply"
            ),
            timeout=30,
            wait_executions=False,
        )
        watched = self.stage.states_entered(execution).count("WatchAgent")
        status = self._reply(step, who, f"{who} here, looking into your subscription.")
        expect(status == 201, f"{who}'s first reply answered {status}")
        self._watched(execution, watched + 1)

    def nobody_free_returns_the_customer_to_the_assistant(self) -> None:
        started, step = (
            time.monotonic(),
            self.step("The new agent goes silent too, nobody else is free: the customer is back with the assistant"),
        )
        store, limit, execution = self.store(), self.config.handoff_reply_idle_seconds, self.values["silent_execution"]
        self.set_presence(step, "agent-s1", "away")
        self.stage.settle(timeout=10, wait_executions=False)  # the takeover's own notices are in
        before = len(self.frames())
        self.stage.clock.advance(limit + 1)
        step.calls.append(f"clock +{limit + 1}s: agent-s2 silent past the limit")
        done = self.stage.wait_execution(execution, timeout=60)
        expect(done["status"] == "FAILED", f"the handoff's execution ended {done['status']}")
        self.stage.settle(
            until=lambda: any(f.get("type") == "notification" for f in self.frames()[before:]),
            timeout=30,
            wait_executions=False,
        )
        self.stage.settle(timeout=5, wait_executions=False)
        notices = [f.get("event_type") for f in self.frames()[before:] if f.get("type") == "notification"]
        expect(notices == ["handoff_failed"], f"the customer was not told once: {notices}")
        session = store.sessions.get_session(self.session_id)
        expect(session is not None and session.status == SessionStatus.ACTIVE, f"session not active: {session}")
        agent = store.agents.get_agent(self.subject("agent-s2"))
        expect(agent is not None and agent.status == AgentStatus.AVAILABLE, f"agent-s2 not freed: {agent}")
        step.changes.append("handoff failed; customer told (handoff_failed frame), session active, agent-s2 free")
        self.done(step, started)
