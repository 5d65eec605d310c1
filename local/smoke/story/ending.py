"""The smoke story's ending: the customer disconnects and deletes the session.

A mixin of :class:`local.smoke.story.SmokeStory`, which provides the state and the plumbing declared in
``SmokeParts``.
"""

from __future__ import annotations

import time

from local.smoke.story.base import SmokeParts, expect


class EndingSteps(SmokeParts):
    """The session's end as its customer sees it (see the module docstring)."""

    async def disconnect(self) -> None:
        socket = self.open_chat()
        await socket.close()
        self.ledger.sockets.remove(socket)
        self.socket = None
        self.step.calls.append(f"close the chat -> {socket.close_code}")
        await self.poll(
            f"/sessions/{self.session_id}",
            "customer",
            lambda r: r.json.get("status") == "disconnected",
            "session disconnected",
        )
        self.saw("session disconnected")

    async def delete_session(self) -> None:
        deleted = await self.rest("DELETE", f"/sessions/{self.session_id}", "customer")
        expect(deleted.status == 202, f"deleting the session: {deleted.detail()}")
        expect(deleted.json.get("status") == "deleted", f"the deletion answered {deleted.detail()}")
        self.ledger.deleted_sessions.add(self.session_id)
        read = await self.rest("GET", f"/sessions/{self.session_id}", "customer")
        expect(read.json.get("status") == "deleted", f"after the deletion the session reads {read.detail()}")
        self.values["deleted_at"] = int(read.json.get("deleted_at") or time.time())
        self.saw("session deleted")
