"""The smoke story's bad paths: malformed requests, another customer on the session, no token or a forged one.

A mixin of :class:`local.smoke.story.SmokeStory`, which provides the state and the plumbing declared in
``SmokeParts``.
"""

from __future__ import annotations

import json

from local.smoke.story.base import SmokeParts, expect, forged_token


class BadPathSteps(SmokeParts):
    """What the stage must refuse, and how (see the module docstring)."""

    async def malformed_requests(self) -> None:
        # The gateway's request model refuses it first: its own message is generic, its code is the field's kind.
        body = await self.rest("POST", "/sessions", "customer", {"customer_id": 42})
        expect((body.status, body.code) == (400, "BAD_REQUEST_BODY"), f"a number as customer_id: {body.detail()}")
        # What the model cannot check, the handler does, and its message names the field.
        text = await self.rest("POST", f"/handoffs/{self.session_id}/messages", "agent", {"text": " "})
        expect(text.status == 400 and "text" in text.message, f"an empty agent message: {text.detail()}")
        limit = await self.rest("GET", f"/sessions/{self.session_id}/turns", "customer", query={"limit": "500"})
        expect(limit.status == 400 and "limit" in limit.message, f"limit=500: {limit.detail()}")
        self.saw(f"400 {body.code}; 400 {text.message!r}; 400 {limit.message!r}")

    async def other_customer_refused(self) -> None:
        owner = self.signed_in("customer").sub
        statuses = []
        # What names only the session must not tell who owns it.
        for method, path in (
            ("GET", f"/sessions/{self.session_id}"),
            ("GET", f"/sessions/{self.session_id}/turns"),
            ("DELETE", f"/sessions/{self.session_id}"),
        ):
            reply = await self.rest(method, path, "other")
            expect(reply.status in (403, 404), f"the other customer got {reply.detail()}")
            expect(owner not in json.dumps(reply.body), f"the refusal names the session's owner: {reply.detail()}")
            statuses.append(reply.status)
        # Naming the owner does not help either.
        for method, path, body in (
            ("GET", f"/customers/{owner}/sessions", None),
            ("POST", "/sessions", {"customer_id": owner}),
        ):
            reply = await self.rest(method, path, "other", body)
            expect(reply.status in (403, 404), f"the other customer got {reply.detail()}")
            statuses.append(reply.status)
        self.saw(f"refused with {', '.join(map(str, statuses))}; no refusal names the session's owner")

    async def no_token_refused(self) -> None:
        bare = await self.rest("GET", f"/sessions/{self.session_id}", None)
        expect(bare.status == 401, f"no token: {bare.detail()}")
        forged = await self.rest(
            "GET", f"/sessions/{self.session_id}", None, token=forged_token(self.token("customer"))
        )
        expect(forged.status == 401, f"a token with a forged signature: {forged.detail()}")
        anonymous = await self.client.handshake_status(None)
        self.step.calls.append(f"connect without a token -> {anonymous}")
        expect(anonymous == 401, f"the chat opened without a token ({anonymous})")
        agent = await self.client.handshake_status(self.token("agent"))
        self.step.calls.append(f"connect with the agent's token -> {agent}")
        expect(agent == 403, f"the chat answered an agent's handshake with {agent}, not 403")
        self.saw(
            f"REST: {bare.status} without a token, {forged.status} forged; WebSocket: 401 without, 403 for an agent"
        )
