"""Real clients of ``make local``: REST over aiohttp's HTTP client, the chat over its WebSocket client."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from tests.local.process import LocalProcess

#: The demo users' password unless the server was told another.
DEMO_PASSWORD = "Local-Passw0rd!"


def subject(token: str) -> str:
    payload = token.split(".")[1]
    return str(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))["sub"])


@dataclass
class Reply:
    status: int
    body: Any
    headers: dict[str, str]

    @property
    def code(self) -> str | None:
        error = self.body.get("error") if isinstance(self.body, dict) else None
        return str(error.get("code")) if isinstance(error, dict) else None


@dataclass
class Frame:
    at: float  # time.monotonic() when it arrived
    body: Any


@dataclass
class Chat:
    """One open chat socket: every frame it received, with when."""

    ws: aiohttp.ClientWebSocketResponse
    frames: list[Frame] = field(default_factory=list)
    reader: asyncio.Task[None] | None = None

    async def _read(self) -> None:
        async for message in self.ws:
            if message.type == aiohttp.WSMsgType.TEXT:
                self.frames.append(Frame(time.monotonic(), json.loads(message.data)))

    def start(self) -> Chat:
        self.reader = asyncio.create_task(self._read())
        return self

    async def send(self, text: str) -> None:
        await self.ws.send_str(json.dumps({"action": "sendMessage", "text": text}))

    async def wait_for(self, matches: Callable[[Any], bool], timeout: float = 20, after: int = 0) -> Any:
        """The first frame (from index ``after``) that ``matches``, waiting up to ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for frame in self.frames[after:]:
                if matches(frame.body):
                    return frame.body
            if self.ws.closed and self.reader is not None and self.reader.done():
                break
            await asyncio.sleep(0.05)
        raise AssertionError(f"no matching frame within {timeout}s; frames: {[f.body for f in self.frames[after:]]}")

    async def close(self) -> None:
        await self.ws.close()
        if self.reader is not None:
            await self.reader


class Clients:
    """REST, sign-in and chat against one running server."""

    def __init__(self, http: aiohttp.ClientSession, server: LocalProcess) -> None:
        self.http, self.server = http, server

    async def sign_in(self, email: str, password: str = DEMO_PASSWORD) -> Reply:
        return await self._call("POST", f"{self.server.origin}/local/sign-in", {"email": email, "password": password})

    async def token(self, email: str, role: str | None = None) -> str:
        """``email``'s ID token; the user is created first (in ``role``) when ``role`` is given."""
        if role is not None:
            made = await self._call("POST", f"{self.server.origin}/local/users", {"email": email, "role": role})
            assert made.status in (201, 409), made
        signed_in = await self.sign_in(email)
        assert signed_in.status == 200, signed_in
        return str(signed_in.body["id_token"])

    async def rest(
        self, method: str, path: str, token: str | None = None, body: Any = None, headers: dict[str, str] | None = None
    ) -> Reply:
        sent = dict(headers or {})
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        return await self._call(method, f"{self.server.rest}{path}", body, sent)

    async def _call(self, method: str, url: str, body: Any = None, headers: dict[str, str] | None = None) -> Reply:
        data = None if body is None else (body if isinstance(body, str) else json.dumps(body))
        sent = dict(headers or {})
        if data is not None:
            sent.setdefault("Content-Type", "application/json")
        async with self.http.request(method, url, data=data, headers=sent) as response:
            text = await response.text()
            try:
                parsed: Any = json.loads(text) if text else None
            except ValueError:
                parsed = text
            return Reply(response.status, parsed, dict(response.headers))

    async def chat(self, token: str, session_id: str | None = None) -> Chat:
        query = {"token": token, **({"session_id": session_id} if session_id else {})}
        ws = await self.http.ws_connect(self.server.websocket, params=query, autoclose=True)
        return Chat(ws).start()

    async def handshake(self, token: str, session_id: str | None = None) -> Reply:
        """A WebSocket upgrade request read as plain HTTP: a refused handshake's status and body."""
        query = {"token": token, **({"session_id": session_id} if session_id else {})}
        headers = {
            "Upgrade": "websocket",
            "Connection": "Upgrade",
            "Sec-WebSocket-Version": "13",
            "Sec-WebSocket-Key": base64.b64encode(os.urandom(16)).decode(),
        }
        url = self.server.websocket.replace("ws://", "http://", 1)
        async with self.http.get(url, params=query, headers=headers) as response:
            text = await response.text()
            return Reply(response.status, json.loads(text) if text else None, dict(response.headers))

    async def wait_rest(
        self, method: str, path: str, token: str, until: Callable[[Reply], bool], timeout: float = 30
    ) -> Reply:
        """Call until ``until(reply)`` holds; the last reply (an AssertionError after ``timeout``)."""
        deadline = time.monotonic() + timeout
        while True:
            reply = await self.rest(method, path, token)
            if until(reply):
                return reply
            if time.monotonic() > deadline:
                raise AssertionError(f"{method} {path} never got there within {timeout}s: {reply}")
            await asyncio.sleep(0.2)
