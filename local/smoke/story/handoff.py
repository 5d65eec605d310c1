"""The smoke story's handoff: the customer asks for a human, the agent sees it, accepts, replies and closes;
the assistant answers again.

A mixin of :class:`local.smoke.story.SmokeStory`, which provides the state and the plumbing declared in
``SmokeParts``.
"""

from __future__ import annotations

import urllib.parse

from local.smoke.client import Reply
from local.smoke.story.base import SmokeParts, expect, shorten


class HandoffSteps(SmokeParts):
    """A handoff's life as its customer and its agent see it (see the module docstring)."""

    async def request_handoff(self) -> None:
        reply = await self.rest("POST", f"/sessions/{self.session_id}/handoff", "customer", {"reason": self.skill})
        expect(reply.status == 202, f"asking for a human: {reply.detail()}")
        arn = str(reply.json.get("execution_arn", ""))
        expect(bool(arn), f"the handoff answer names no execution: {reply.detail()}")
        self.ledger.handoffs.add(self.session_id)
        execution = await self.rest("GET", f"/executions/{urllib.parse.quote(arn, safe='')}", "customer")
        expect(execution.status == 200, f"reading the handoff's execution: {execution.detail()}")
        expect(execution.json.get("status") == "RUNNING", f"the handoff is {execution.json.get('status')}, not waiting")
        self.saw("202; the customer reads its handoff's execution: RUNNING (waiting for an agent)")

    async def agent_sees_the_request(self) -> None:
        def listed(reply: Reply) -> bool:
            return any(item.get("session_id") == self.session_id for item in reply.json.get("items", []))

        inbox = await self.poll("/agents/me/inbox", "agent", listed, "the request in the agent's inbox")
        items = [item for item in inbox.json.get("items", []) if item.get("session_id") == self.session_id]
        expect(items[0].get("inbox") == "waiting", f"the request is in the {items[0].get('inbox')} inbox")
        expect(items[0].get("reason") == self.skill, f"the request's reason is {items[0].get('reason')}")
        self.saw(f"waiting inbox: reason {self.skill}, priority {items[0].get('priority')}")

    async def agent_accepts(self) -> None:
        presence = await self.rest("POST", "/agents/me/presence", "agent", {"status": "available"})
        expect(presence.status == 200, f"going available: {presence.detail()}")
        socket = self.open_chat()
        before = len(socket.frames)
        accepted = await self.rest("POST", f"/handoffs/{self.session_id}/accept", "agent")
        expect(accepted.status == 200, f"accepting the handoff: {accepted.detail()}")
        told = await socket.wait_for(
            lambda f: f.get("type") == "notification" and f.get("event_type") == "handoff_started",
            "handoff_started notification",
            after=before,
            timeout=self.timeout,
        )

        def own(reply: Reply) -> bool:
            return any(
                i.get("session_id") == self.session_id and i.get("inbox") == "own" for i in reply.json.get("items", [])
            )

        await self.poll("/agents/me/inbox", "agent", own, "the handoff in the agent's own inbox")
        await self.poll(
            f"/sessions/{self.session_id}",
            "customer",
            lambda r: r.json.get("status") == "handoff",
            "session in handoff",
        )
        self.saw(f"accepted; the customer was told: {shorten(str(told.get('text', '')))}")
        self.saw("the handoff is in the agent's own inbox; the session is in handoff")

    async def agent_replies(self) -> None:
        socket = self.open_chat()
        before = len(socket.frames)
        waiting = f"Smoke test {self.run_id}: hello, is someone there?"
        await socket.send(waiting)
        self.step.calls.append(f"sendMessage {waiting!r}")
        ack = await socket.wait_for(lambda f: f.get("type") == "ack", "ack frame", after=before, timeout=self.timeout)
        expect(ack.get("status") == "handoff", f"the ack says {ack.get('status')}, not handoff")
        turns = await self.rest("GET", f"/sessions/{self.session_id}/turns", "agent", query={"limit": "100"})
        expect(turns.status == 200, f"the agent reading the conversation: {turns.detail()}")
        stored = turns.json.get("turns", [])
        expect(
            bool(stored) and stored[-1].get("content") == waiting,
            f"the agent's last turn is {stored[-1] if stored else None}, not the customer's message",
        )
        before = len(socket.frames)
        text = f"Hello, this is the smoke agent of run {self.run_id}."
        sent = await self.rest("POST", f"/handoffs/{self.session_id}/messages", "agent", {"text": text})
        expect(sent.status == 201, f"the agent's reply: {sent.detail()}")
        expect(sent.json.get("delivered") is True, f"the agent's reply was not delivered: {sent.detail()}")
        message = await socket.wait_for(
            lambda f: f.get("type") == "message" and f.get("role") == "agent",
            "agent's message frame",
            after=before,
            timeout=self.timeout,
        )
        expect(message.get("text") == text, f"the customer received {message.get('text')!r}, not {text!r}")
        self.saw(f"the customer's message was acked (turn {ack.get('turn_number')}) and the agent read it")
        self.saw(f"the customer received the agent's reply (turn {message.get('turn_number')})")

    async def agent_closes(self) -> None:
        socket = self.open_chat()
        before = len(socket.frames)
        body = {"resolution": f"smoke test {self.run_id}", "outcome": "resume"}
        closed = await self.rest("POST", f"/handoffs/{self.session_id}/close", "agent", body)
        expect(closed.status == 200, f"closing the handoff: {closed.detail()}")
        expect(closed.json.get("session_status") == "active", f"after the close the session is {closed.json}")
        self.ledger.handoffs.discard(self.session_id)
        told = await socket.wait_for(
            lambda f: f.get("type") == "handoff_closed", "handoff_closed frame", after=before, timeout=self.timeout
        )
        expect(told.get("outcome") == "resume", f"the customer was told outcome {told.get('outcome')}, not resume")
        away = await self.rest("POST", "/agents/me/presence", "agent", {"status": "away"})
        expect(away.status == 200, f"going away: {away.detail()}")
        after = await self.rest("GET", f"/sessions/{self.session_id}", "agent")
        expect(after.status in (403, 404), f"the agent still reads the session after the close: {after.detail()}")
        self.saw(f"closed (resume); the customer was told; the agent is away and now gets {after.status}")

    async def assistant_answers_again(self) -> None:
        await self.converse(f"Smoke test {self.run_id}: thanks, and volume 4?")
