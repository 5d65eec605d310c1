"""Removing what the smoke story created, whatever happened: the ledger's sockets, handoffs, sessions, agent
and users, in an order that lets each removal succeed.

A mixin of :class:`local.smoke.story.SmokeStory`, which provides the state and the plumbing declared in
``SmokeParts``.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable

from local.smoke.client import ChatSocket
from local.smoke.story.base import SmokeFailure, SmokeParts, failure_reason
from local.smoke.users import SmokeUser


class Removal(SmokeParts):
    """The story's cleanup (see the module docstring)."""

    async def clean_up(self) -> tuple[list[str], list[str]]:
        """Remove everything in the ledger, in an order that lets each removal succeed; never raises.

        Open sockets first (the stage runs ``$disconnect``, which ends a handoff still waiting),
        then a handoff still open (closed by the admin), the session (deleted), the agent's
        registration (retired: the registry keeps retired agents by design, their handoffs name
        them), and the users last, the admin after everyone else.
        """
        removed: list[str] = []
        left: list[str] = []

        async def attempt(what: str, action: Callable[[], Awaitable[str]]) -> None:
            try:
                removed.append(f"{what}: {await action()}")
            except Exception as error:
                left.append(f"{what}: {failure_reason(error)}")

        ledger = self.ledger
        for socket in list(ledger.sockets):

            async def close(socket: ChatSocket = socket) -> str:
                await socket.close()
                ledger.sockets.remove(socket)
                return f"closed (code {socket.close_code}; the stage ran $disconnect)"

            await attempt("chat connection", close)
        for session_id in sorted(ledger.handoffs):
            await attempt(f"handoff of session {session_id}", functools.partial(self._close_handoff, session_id))
        for session_id in ledger.sessions:
            await attempt(f"session {session_id}", functools.partial(self._delete_session, session_id))
        if ledger.agent_id is not None:
            await attempt(f"agent {ledger.agent_id}", functools.partial(self._retire, ledger.agent_id))
        for user in sorted(ledger.users, key=lambda u: u.role == "admin"):

            async def delete(user: SmokeUser = user) -> str:
                return "deleted" if await self.directory.delete(user) else "was not there (never created)"

            await attempt(f"user {user.email} ({user.role})", delete)
        return removed, left

    def _operator(self) -> str | None:
        """Who may remove what a customer cannot: the smoke's admin when it signed in."""
        return "admin" if "admin" in self.tokens else None

    async def _close_handoff(self, session_id: str) -> str:
        if self._operator() is None:
            return "left to the customer's disconnect (the admin never signed in)"
        body = {"resolution": f"smoke test {self.run_id} cleanup", "outcome": "end"}
        reply = await self.client.rest("POST", f"/handoffs/{session_id}/close", self.token("admin"), body)
        if reply.status == 200:
            return "closed by the admin"
        if reply.status in (404, 409):
            return f"already ended ({reply.status} {reply.code})"
        raise SmokeFailure(f"closing it as the admin: {reply.detail()}")

    async def _delete_session(self, session_id: str) -> str:
        if session_id in self.ledger.deleted_sessions:
            return "deleted by the story (the stage's cleanup archives it and removes its turns)"
        who = self._operator() or ("customer" if "customer" in self.tokens else None)
        if who is None:
            raise SmokeFailure("nobody signed in may delete it")
        reply = await self.client.rest("DELETE", f"/sessions/{session_id}", self.token(who))
        if reply.status == 202:
            return f"deleted by the {who} (the stage's cleanup archives it and removes its turns)"
        raise SmokeFailure(f"deleting it as the {who}: {reply.detail()}")

    async def _retire(self, agent_id: str) -> str:
        if self._operator() is None:
            raise SmokeFailure("the admin never signed in, so nobody may retire it")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = await self.client.rest("POST", f"/admin/agents/{agent_id}/retire", self.token("admin"))
            if reply.status == 200:
                return "retired (the registry keeps retired agents: their handoffs name them)"
            if reply.status == 404:
                return "was not registered"
            if reply.code == "AgentRetired":
                return "retired already"
            # AgentBusy: the handoff it held is still being released (the customer's $disconnect)
            if reply.code != "AgentBusy" or time.monotonic() > deadline:
                raise SmokeFailure(f"retiring it: {reply.detail()}")
            await asyncio.sleep(0.5)
