"""The story's inbox steps: an agent reads its inbox through the API, and a customer who leaves while queued.

The inbox follows the first handoff: offered in the waiting inbox while it is queued, in the
agent's own inbox once accepted, gone once closed. At the end, a second customer requests a
handoff while no agent is free and disconnects before anyone takes it: the handoff fails
("customer left"), the workflow's wait ends, an agent's accept is 409 and no inbox offers it.
Last, two customers wait for the one agent with their skill, a normal one and, a minute later,
an urgent one: when the agent comes free its inbox lists the urgent customer first and offers it
(``next``), and the agent serves the urgent customer before the one who asked first.

A mixin of :class:`local.story.Story`, which provides the stage, the tokens, the REST and
WebSocket plumbing and the step bookkeeping declared here.
"""

from __future__ import annotations

import time
from typing import Any

from lambdas.shared.records import HandoffStatus, SessionStatus
from local.story.base import Step, StoryError, StoryParts, expect, present

LEAVING_CUSTOMER = "dave"
#: The customers of the priority step: who asks first (normal) and who asks a minute later (urgent).
NORMAL_CUSTOMER, URGENT_CUSTOMER = "erin", "frank"
PRIORITY_AGENT, PRIORITY_SKILL = "agent-11", "preorders"


class InboxSteps(StoryParts):
    """What an agent's console reads, and a customer who leaves while waiting (see the module docstring)."""

    def _inbox(self, step: Step, who: str, **query: str) -> list[dict[str, Any]]:
        """``GET /agents/me/inbox`` as ``who``: every item, following ``next_cursor`` to the end."""
        items: list[dict[str, Any]] = []
        params = dict(query)
        while True:
            response = self.rest(step, "GET", "/agents/me/inbox", who, query=params)
            expect(response.status == 200, f"GET /agents/me/inbox answered {response.status}: {response.body}")
            body = response.json()
            items += body["items"]
            if body["next_cursor"] is None:
                return items
            params["cursor"] = body["next_cursor"]

    def _settle_inbox(self, who: str, wanted: set[tuple[str, str]], *, managers: bool = False) -> None:
        """Pump the stage until the dashboard consumer has brought ``who``'s inbox in the store to ``wanted``."""
        store, agent_id = self.store(), self.subject(who)

        def reached() -> bool:
            items = store.inbox.list_inbox(agent_id, managers=managers, limit=100).items
            return {(i.inbox, i.handoff_id) for i in items} == wanted

        try:
            self.stage.settle(until=reached, timeout=20, wait_executions=False)
        except TimeoutError:
            items = store.inbox.list_inbox(agent_id, managers=managers, limit=100).items
            raise StoryError(f"{who}'s inbox never became {wanted}: {items}") from None

    def agent_reads_the_waiting_inbox(self) -> None:
        started, step = time.monotonic(), self.step("The agent's console reads its inbox: the customer waits there")
        handoff_id = str(self.values["handoff_id"])
        self._settle_inbox("agent-7", {("waiting", handoff_id)})
        items = self._inbox(step, "agent-7")
        expect(
            [(i["inbox"], i["handoff_id"], i["session_id"], i["reason"], i["priority"]) for i in items]
            == [("waiting", handoff_id, self.session_id, "general", "high")],
            f"agent-7's inbox: {items}",
        )
        expect(isinstance(items[0]["since"], int), f"no 'since' on {items[0]}")
        bad = self.rest(step, "GET", "/agents/me/inbox", "agent-7", query={"limit": "0"})
        customer = self.rest(step, "GET", "/agents/me/inbox", "alice")
        expect((bad.status, customer.status) == (400, 403), f"limit=0: {bad.status}, a customer: {customer.status}")
        step.changes.append(f"waiting: {handoff_id} (general, high); limit=0 -> 400; a customer -> 403")
        self.done(step, started)

    def accepted_handoff_moves_to_the_agents_inbox(self) -> None:
        started, step = time.monotonic(), self.step("After the accept, the handoff is in the agent's own inbox only")
        handoff_id = str(self.values["handoff_id"])
        self._settle_inbox("agent-7", {("own", handoff_id)})
        items = self._inbox(step, "agent-7")
        expect(
            [(i["inbox"], i["handoff_id"]) for i in items] == [("own", handoff_id)],
            f"agent-7's inbox after the accept: {items}",
        )
        step.changes.append(f"own: {handoff_id}; the waiting inbox no longer offers it")
        self.done(step, started)

    def agent_lists_sessions_in_handoff(self) -> None:
        started, step = (
            time.monotonic(),
            self.step("The agent lists the sessions in handoff; other statuses are refused"),
        )
        in_handoff = self.rest(step, "GET", "/admin/sessions", "agent-7", query={"status": "handoff"})
        expect(in_handoff.status == 200, f"GET /admin/sessions answered {in_handoff.status}: {in_handoff.body}")
        listed = [s["session_id"] for s in in_handoff.json()["sessions"]]
        expect(self.session_id in listed, f"the session in handoff is not listed: {listed}")
        active = self.rest(step, "GET", "/admin/sessions", "root", query={"status": "active"})
        expect(active.status == 200, f"an admin's listing of active sessions answered {active.status}: {active.body}")
        expect(
            self.session_id not in [s["session_id"] for s in active.json()["sessions"]],
            "the session in handoff is still listed as active",
        )
        agent = self.rest(step, "GET", "/admin/sessions", "agent-7", query={"status": "active"})
        customer = self.rest(step, "GET", "/admin/sessions", "alice", query={"status": "handoff"})
        expect(
            (agent.status, customer.status) == (403, 403),
            f"agent active: {agent.status}, a customer: {customer.status}",
        )
        step.changes.append(
            f"handoff: {len(listed)} session(s), ours among them, not listed as active; "
            "an agent asking for active -> 403; a customer -> 403"
        )
        self.done(step, started)

    def closed_handoff_leaves_the_inbox(self) -> None:
        started, step = time.monotonic(), self.step("After the close, the agent's inbox is empty")
        self.stage.settle(timeout=20, wait_executions=False)  # late dashboard messages write nothing now
        items = self._inbox(step, "agent-7")
        expect(items == [], f"agent-7's inbox after the close: {items}")
        step.changes.append("inbox empty; late messages did not bring the item back")
        self.done(step, started)

    def customer_leaves_while_queued(self) -> None:
        started, step = (
            time.monotonic(),
            self.step("A customer who disconnects while queued ends the handoff; a later accept is 409"),
        )
        store = self.store()
        # The only agent with the skill steps away, so the handoff has to wait.
        self.sign_in(LEAVING_CUSTOMER, "customer")
        away = self.rest(step, "POST", "/agents/me/presence", "agent-8", body={"status": "away"})
        expect(away.status == 200, f"agent-8's presence answered {away.status}: {away.body}")
        created = self.rest(
            step, "POST", "/sessions", LEAVING_CUSTOMER, body={"customer_id": self.subject(LEAVING_CUSTOMER)}
        )
        expect(created.status == 201, f"POST /sessions answered {created.status}: {created.body}")
        body = created.json()
        session_id = str(body.get("session_id") or body.get("id"))
        ws = self.stage.websocket
        connection_id = ws.connect(query={"token": self.tokens[LEAVING_CUSTOMER], "session_id": session_id})
        self.stage.settle(until=lambda: bool(ws.frames(connection_id)), timeout=20)
        requested = self.rest(
            step,
            "POST",
            f"/sessions/{session_id}/handoff",
            LEAVING_CUSTOMER,
            body={"reason": "general", "priority": "normal"},
        )
        expect(requested.status == 202, f"handoff request answered {requested.status}: {requested.body}")
        execution = requested.json()["execution_arn"]

        def queued() -> bool:
            handoff = store.handoffs.current_handoff(session_id)
            return handoff is not None and handoff.status == HandoffStatus.QUEUED

        self.stage.settle(until=queued, timeout=20, wait_executions=False)
        handoff = store.handoffs.current_handoff(session_id)
        handoff = present(handoff, "handoff")
        self._settle_inbox("agent-8", {("waiting", handoff.handoff_id)})
        offered = [i["handoff_id"] for i in self._inbox(step, "agent-8")]
        expect(offered == [handoff.handoff_id], f"agent-8's inbox while {LEAVING_CUSTOMER} waits: {offered}")
        step.changes.append(f"agent-8 away; {LEAVING_CUSTOMER}'s handoff {handoff.handoff_id} queued, in the inbox")

        ws.disconnect(connection_id)
        step.calls.append("$disconnect")
        done = self.stage.wait_execution(execution, timeout=30)
        self.stage.settle(timeout=20, wait_executions=False)

        after = store.handoffs.get_handoff(session_id, handoff.handoff_id)
        session = store.sessions.get_session(session_id)
        expect(after is not None and after.status == HandoffStatus.FAILED, f"the handoff is {after}")
        expect(
            session is not None and session.status == SessionStatus.DISCONNECTED,
            f"{LEAVING_CUSTOMER}'s session is {session and session.status}",
        )
        errors = self.stage.execution_errors(execution)
        expect(
            done["status"] == "FAILED" and any("CustomerLeft" in e for e in errors),
            f"the handoff execution ended {done['status']}: {errors}",
        )
        back = self.rest(step, "POST", "/agents/me/presence", "agent-8", body={"status": "available"})
        accept = self.rest(step, "POST", f"/handoffs/{session_id}/accept", "agent-8")
        expect((back.status, accept.status) == (200, 409), f"presence {back.status}, accept {accept.status}")
        agent = store.agents.get_agent(self.subject("agent-8"))
        expect(agent is not None and agent.status == "available", f"agent-8 after the refused accept: {agent}")
        self.stage.settle(timeout=30)  # the workflow's last writes reach the stream's consumers too
        left = self._inbox(step, "agent-8")
        expect(left == [], f"agent-8's inbox after {LEAVING_CUSTOMER} left: {left}")
        step.changes.append(
            f"handoff failed (customer left), session disconnected, execution {done['status']} "
            "(CustomerLeft -> HandoffFailed); accept 409; inbox empty"
        )
        self.done(step, started)

    def _queued_handoff(self, step: Step, who: str, priority: str) -> tuple[str, str]:
        """``who`` opens a session and asks for a human (``PRIORITY_SKILL``, ``priority``); (session id, handoff id).

        Returns once the handoff is queued and in the waiting inbox (nobody with the skill is free).
        """
        store = self.store()
        self.sign_in(who, "customer")
        created = self.rest(step, "POST", "/sessions", who, body={"customer_id": self.subject(who)})
        expect(created.status == 201, f"POST /sessions answered {created.status}: {created.body}")
        session_id = str(created.json()["session_id"])
        body = {"reason": PRIORITY_SKILL, "priority": priority}
        requested = self.rest(step, "POST", f"/sessions/{session_id}/handoff", who, body=body)
        expect(requested.status == 202, f"{who}'s handoff request answered {requested.status}: {requested.body}")

        def queued() -> bool:
            handoff = store.handoffs.current_handoff(session_id)
            return handoff is not None and handoff.status == HandoffStatus.QUEUED

        self.stage.settle(until=queued, timeout=20, wait_executions=False)
        handoff = present(store.handoffs.current_handoff(session_id), f"{who}'s handoff")
        return session_id, handoff.handoff_id

    def _serve(self, step: Step, session_id: str) -> None:
        """``PRIORITY_AGENT`` accepts the handoff of ``session_id``, then closes it (the session ends)."""
        accepted = self.rest(step, "POST", f"/handoffs/{session_id}/accept", PRIORITY_AGENT)
        expect(accepted.status == 200, f"accept answered {accepted.status}: {accepted.body}")
        self.stage.settle(until=lambda: self._assigned(session_id), timeout=20, wait_executions=False)
        body = {"resolution": "Pre-order confirmed.", "outcome": "end"}
        closed = self.rest(step, "POST", f"/handoffs/{session_id}/close", PRIORITY_AGENT, body=body)
        expect(closed.status == 200, f"close answered {closed.status}: {closed.body}")

    def _assigned(self, session_id: str) -> bool:
        handoff = self.store().handoffs.current_handoff(session_id)
        return handoff is not None and handoff.status == HandoffStatus.ASSIGNED

    def urgent_customer_served_first(self) -> None:
        started, step = (
            time.monotonic(),
            self.step("An urgent customer is served before a normal one who asked a minute earlier"),
        )
        # The only agent with the skill is registered but not yet available: both customers wait.
        self.register_agent(step, PRIORITY_AGENT, skills=(PRIORITY_SKILL,), display_name="Agent Eleven")
        normal_session, normal_id = self._queued_handoff(step, NORMAL_CUSTOMER, "normal")
        self.stage.clock.advance(60)
        urgent_session, urgent_id = self._queued_handoff(step, URGENT_CUSTOMER, "urgent")
        self._settle_inbox(PRIORITY_AGENT, {("waiting", normal_id), ("waiting", urgent_id)})
        step.changes.append(f"{NORMAL_CUSTOMER} (normal) then, 60 s later, {URGENT_CUSTOMER} (urgent) queued")

        # The agent comes free and reads its console: the urgent customer first, and offered.
        self.set_presence(step, PRIORITY_AGENT, "available")
        response = self.rest(step, "GET", "/agents/me/inbox", PRIORITY_AGENT)
        expect(response.status == 200, f"GET /agents/me/inbox answered {response.status}: {response.body}")
        answer = response.json()
        listed = [(i["handoff_id"], i["priority"]) for i in answer["items"] if i["inbox"] == "waiting"]
        expect(listed[:2] == [(urgent_id, "urgent"), (normal_id, "normal")], f"the waiting inbox: {listed}")
        waits = {i["handoff_id"]: i["waiting_seconds"] for i in answer["items"]}
        expect(waits[normal_id] >= waits[urgent_id] + 60, f"time waiting: {waits}")
        offered = answer["next"]
        expect(offered is not None and offered["handoff_id"] == urgent_id, f"{PRIORITY_AGENT} is offered {offered}")
        step.changes.append(
            f"inbox: {urgent_id} urgent ({waits[urgent_id]} s), {normal_id} normal ({waits[normal_id]} s); "
            f"next: {urgent_id}"
        )

        # It serves what it is offered; the normal customer still waits, and is offered next.
        self._serve(step, urgent_session)
        waiting = present(self.store().handoffs.get_handoff(normal_session, normal_id), "the normal handoff")
        expect(waiting.status == HandoffStatus.QUEUED, f"{NORMAL_CUSTOMER}'s handoff while the urgent one is served")
        after = self.rest(step, "GET", "/agents/me/inbox", PRIORITY_AGENT).json()["next"]
        expect(after is not None and after["handoff_id"] == normal_id, f"offered after the urgent one: {after}")
        self._serve(step, normal_session)
        step.changes.append(f"{PRIORITY_AGENT} served {URGENT_CUSTOMER} (urgent), then {NORMAL_CUSTOMER} (normal)")
        self.done(step, started)
