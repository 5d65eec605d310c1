"""The story's escalation: nobody takes a handoff in time, the managers are paged, a manager takes it.

The customer of this part (erin) is away from the chat (she asked from the web page, without a
WebSocket connection), so every notice she gets goes by e-mail: that the handoff escalated, that
someone joined, and how it ended. Each arrives once.
"""

from __future__ import annotations

import time

from embedded.services.sns import published
from local.story.base import StoryParts, expect, token_subject

CUSTOMER_EMAIL = "erin@example.com"


class EscalationSteps(StoryParts):
    """An escalated handoff from the request to the manager's close (see the module docstring)."""

    def escalation_pages_the_managers(self) -> None:
        started, step = time.monotonic(), self.step("Nobody takes a handoff in time: it escalates, managers are paged")
        erin = token_subject(self.sign_in("erin", "customer", email=CUSTOMER_EMAIL))
        created = self.rest(step, "POST", "/sessions", "erin", body={"customer_id": erin})
        expect(created.status == 201, f"erin's session answered {created.status}: {created.body}")
        session_id = created.json()["session_id"]
        self.values["escalated_session"] = session_id
        response = self.rest(
            step, "POST", f"/sessions/{session_id}/handoff", "erin", body={"reason": "refunds", "priority": "urgent"}
        )
        expect(response.status == 202, f"handoff request answered {response.status}: {response.body}")
        execution = response.json()["execution_arn"]
        self.values["escalated_execution"] = execution
        managers_topic = self.stage.function("lambdas.events.escalation.handler").environment["MANAGERS_TOPIC_ARN"]
        topic = self.stage.only("AWS::SNS::Topic", where=lambda t: t.ref == managers_topic)
        store = self.store()

        def paged() -> bool:
            handoff = store.handoffs.current_handoff(session_id)
            return (
                handoff is not None and handoff.status == "escalated" and bool(published(self.stage.cloud, topic, []))
            )

        def waiting_for_an_agent() -> bool:
            handoff = store.handoffs.current_handoff(session_id)
            return handoff is not None and store.handoffs.waiting_for(session_id, handoff.handoff_id) == "agent"

        # No agent has the skill "refunds": once WaitForAgent's time is up, the handoff escalates and,
        # no manager being free, the managers are paged
        self.stage.settle(until=waiting_for_an_agent, timeout=30, wait_executions=False)
        self.stage.clock.advance(self.config.handoff_agent_wait_seconds + 1)
        step.calls.append(f"clock +{self.config.handoff_agent_wait_seconds + 1}s: WaitForAgent times out")
        self.stage.settle(until=paged, timeout=60, wait_executions=False)
        pages = [p.message for p in published(self.stage.cloud, topic, []) if session_id in p.message]
        expect(len(pages) == 1, f"the managers were paged {len(pages)} times")
        expect(f"POST /handoffs/{session_id}/accept" in pages[0], f"the page says not how to take it: {pages[0]}")
        step.changes.append(f"handoff escalated; managers' topic paged once ({len(pages[0])} characters)")
        self.done(step, started)

    def manager_takes_the_escalated_handoff(self) -> None:
        started, step = time.monotonic(), self.step("A manager comes online, finds it in the inbox and takes it")
        session_id, execution = self.values["escalated_session"], self.values["escalated_execution"]
        # A manager by the registry's flag, whose skills no customer asks for: later handoffs of
        # the story still wait for the agents they are meant for.
        boss = self.register_agent(step, "boss-1", skills=("management",), is_manager=True, available=True)
        # An agent who is no manager is refused: the handoff waits for a manager now
        refused = self.rest(step, "POST", f"/handoffs/{session_id}/accept", "agent-8")
        expect(refused.status == 409, f"a non-manager's accept answered {refused.status}: {refused.body}")
        inbox = self.rest(step, "GET", "/agents/me/inbox", "boss-1")
        expect(inbox.status == 200, f"the manager's inbox answered {inbox.status}: {inbox.body}")
        waiting = [i for i in inbox.json()["items"] if i["session_id"] == session_id]
        expect(len(waiting) == 1, f"the escalated handoff is not in the manager's inbox: {inbox.body}")
        accepted = self.rest(step, "POST", f"/handoffs/{session_id}/accept", "boss-1")
        expect(accepted.status == 200, f"the manager's accept answered {accepted.status}: {accepted.body}")
        store = self.store()

        def assigned() -> bool:
            handoff = store.handoffs.current_handoff(session_id)
            return handoff is not None and handoff.status == "assigned" and handoff.agent_id == boss

        self.stage.settle(until=assigned, timeout=30, wait_executions=False)
        reply = self.rest(step, "POST", f"/handoffs/{session_id}/messages", "boss-1", body={"text": "Refund issued."})
        expect(reply.status == 201, f"the manager's reply answered {reply.status}: {reply.body}")
        closed = self.rest(
            step,
            "POST",
            f"/handoffs/{session_id}/close",
            "boss-1",
            body={"resolution": "Refunded the duplicate charge.", "outcome": "resume"},
        )
        expect(closed.status == 200, f"the manager's close answered {closed.status}: {closed.body}")
        done = self.stage.wait_execution(execution, timeout=40)
        expect(done["status"] == "SUCCEEDED", f"the escalated handoff's execution ended {done['status']}")
        step.changes.append(f"{boss} took, answered and closed the escalated handoff")
        self.done(step, started)

    def customer_away_is_told_by_email(self) -> None:
        started, step = time.monotonic(), self.step("The customer away from the chat got each notice once, by e-mail")
        session_id = self.values["escalated_session"]

        def bodies() -> list[str]:
            return [m.body for m in self.mail_to(CUSTOMER_EMAIL)]

        self.stage.settle(until=lambda: len(bodies()) >= 3, timeout=30, wait_executions=False)
        self.stage.settle(timeout=3, wait_executions=False)
        mails = bodies()
        expect(len(mails) == 3, f"erin got {len(mails)} e-mails, expected 3: {mails}")
        expect("a manager has been asked" in mails[0], f"the first e-mail is not the escalation: {mails[0]}")
        expect(any("connected to a member of our support team" in m for m in mails), "no 'connected' e-mail")
        expect("Refunded the duplicate charge." in mails[-1], f"the last e-mail is not the close: {mails[-1]}")
        turns = self.store().turns.list_turns(session_id).items
        expect(not any(t.role == "system" and "manager has been asked" in t.content for t in turns), "recorded twice")
        step.changes.append(f"3 e-mails to {CUSTOMER_EMAIL}: escalated, connected, closed")
        self.done(step, started)
