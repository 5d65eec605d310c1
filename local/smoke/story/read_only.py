"""The smoke story for production: an existing user signs in, makes one read its role allows, and is refused
without a token or with a forged one. Nothing is created, so nothing needs removing.

A mixin of :class:`local.smoke.story.SmokeStory`, which provides the state and the plumbing declared in
``SmokeParts``.
"""

from __future__ import annotations

from local.smoke.story.base import SmokeFailure, SmokeParts, expect, forged_token


class ReadOnlySteps(SmokeParts):
    """The read-only steps (see the module docstring)."""

    async def sign_in_existing(self) -> None:
        existing = self.existing
        if existing is None:
            raise SmokeFailure("no existing user was given (SMOKE_EMAIL, SMOKE_PASSWORD)")
        self.step.calls.append(self.directory.sign_in_description)
        tokens = await self.directory.sign_in(existing.email, existing.password)
        self.tokens["user"] = tokens
        self.saw(f"{existing.email}: {tokens.role} {tokens.sub}")

    def _health_path(self) -> str:
        tokens = self.signed_in("user")
        return {
            "agent": "/agents/me/inbox",
            "admin": "/admin/agents",
        }.get(tokens.role, f"/customers/{tokens.sub}/sessions")

    async def health_read(self) -> None:
        reply = await self.rest("GET", self._health_path(), "user", query={"limit": "1"})
        expect(reply.status == 200, f"a read the user may make: {reply.detail()}")
        self.saw(f"200 in {self.step.calls[-1]}")

    async def auth_refused(self) -> None:
        path = self._health_path()
        bare = await self.rest("GET", path, None, query={"limit": "1"})
        expect(bare.status == 401, f"no token: {bare.detail()}")
        forged = await self.rest("GET", path, None, query={"limit": "1"}, token=forged_token(self.token("user")))
        expect(forged.status == 401, f"a token with a forged signature: {forged.detail()}")
        anonymous = await self.client.handshake_status(None)
        self.step.calls.append(f"connect without a token -> {anonymous}")
        expect(anonymous == 401, f"the chat opened without a token ({anonymous})")
        self.saw(f"REST {bare.status} without a token, {forged.status} forged; WebSocket 401 without a token")
