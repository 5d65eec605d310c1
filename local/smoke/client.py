"""A client of a stage over the wire: REST with a bearer token, the chat WebSocket, and sign-in.

It speaks only what any client of a deployed stage may speak: HTTP(S) to the REST base URL, the
WebSocket chat protocol (docs/websocket-api.md), and Cognito's public ``InitiateAuth`` (a plain
JSON call that needs no AWS credentials). Against ``make local``, whose Cognito runs inside the
server, sign-in goes through the route ``make local`` documents for it (``POST /local/sign-in``).
It reads nothing else, no table and no stage internals, so what it sees is what a customer's app
or an agent's console sees.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import aiohttp

#: Cognito's public sign-in call (a JSON 1.1 request to the regional endpoint, unsigned).
COGNITO_INITIATE_AUTH: Final = "AWSCognitoIdentityProviderService.InitiateAuth"
#: The frames that end the assistant's reply to a message (docs/websocket-api.md).
REPLY_ENDS: Final = frozenset({"final", "reply_blocked", "error"})


class WireError(Exception):
    """The stage could not be reached, or answered what no client expects; the message says where."""


class UserExists(WireError):
    """The user to create exists already: it is not the smoke's, so the smoke leaves it alone."""


class HandshakeRefused(WireError):
    """The WebSocket handshake was refused with ``status``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def cognito_endpoint(region: str) -> str:
    """Cognito's public regional endpoint, where ``InitiateAuth`` is sent."""
    return f"https://cognito-idp.{region}.amazonaws.com/"


def token_claims(token: str) -> dict[str, Any]:
    """The claims of a JWT, read and not verified (the stage's authorizers verify it)."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError) as error:
        raise WireError(f"the sign-in answered something that is not a JWT ({error})") from None
    if not isinstance(claims, dict):
        raise WireError("the sign-in answered a JWT whose payload is not a JSON object")
    return claims


@dataclass(frozen=True)
class Tokens:
    """What a signed-in client holds: its ID and access tokens (never printed)."""

    email: str
    id_token: str = field(repr=False)
    access_token: str = field(repr=False)

    @property
    def claims(self) -> dict[str, Any]:
        return token_claims(self.id_token)

    @property
    def sub(self) -> str:
        """The identity provider's id of the user: a customer's ``customer_id``, an agent's ``agent_id``."""
        return str(self.claims["sub"])

    @property
    def role(self) -> str:
        """The role group the token carries (a user in no group is a customer, as the authorizers read it)."""
        groups = self.claims.get("cognito:groups") or []
        return str(groups[0]) if groups else "customer"


class SignIn(Protocol):
    """A way to sign a user in and get its tokens."""

    async def sign_in(self, email: str, password: str) -> Tokens: ...


@dataclass(frozen=True)
class Reply:
    """One REST answer: the call as sent (without the base URL), its status and its parsed body."""

    method: str
    path: str
    status: int
    body: Any
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)

    @property
    def json(self) -> dict[str, Any]:
        """The body when it is a JSON object, else an empty dict."""
        return self.body if isinstance(self.body, dict) else {}

    @property
    def error(self) -> dict[str, Any]:
        error = self.json.get("error")
        return error if isinstance(error, dict) else {}

    @property
    def code(self) -> str | None:
        code = self.error.get("code")
        return str(code) if code is not None else None

    @property
    def message(self) -> str:
        return str(self.error.get("message") or self.json.get("message") or "")

    def __str__(self) -> str:
        return f"{self.method} {self.path} -> {self.status}"

    def detail(self) -> str:
        """The call, its status and a short body, for a failure message."""
        body = self.body if isinstance(self.body, str) else json.dumps(self.body)
        return f"{self} {body[:300]}"


@dataclass
class StreamedReply:
    """The assistant's reply to one message as the client received it: deltas joined, then how it ended."""

    reply_to: int | None
    text: str
    deltas: int
    end: dict[str, Any]
    #: deltas whose ``offset`` left a hole (text the client never received)
    gaps: int = 0

    @property
    def kind(self) -> str:
        """``final``, ``reply_blocked``, or ``error:<code>``."""
        kind = str(self.end.get("type"))
        return f"error:{self.end.get('code')}" if kind == "error" else kind


class ChatSocket:
    """One open chat connection: every frame it received, in order, read in the background."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, description: str) -> None:
        self.ws = ws
        self.description = description
        self.frames: list[dict[str, Any]] = []
        self._changed = asyncio.Event()
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        try:
            async for message in self.ws:
                if message.type != aiohttp.WSMsgType.TEXT:
                    continue
                try:
                    frame = json.loads(message.data)
                except ValueError:
                    frame = None
                self.frames.append(frame if isinstance(frame, dict) else {"type": "unreadable", "data": message.data})
                self._changed.set()
        finally:
            self._changed.set()

    @property
    def closed(self) -> bool:
        return self._reader.done()

    @property
    def close_code(self) -> int | None:
        return self.ws.close_code

    async def send(self, text: str, client_message_id: str | None = None) -> None:
        frame: dict[str, Any] = {"action": "sendMessage", "text": text}
        if client_message_id is not None:
            frame["client_message_id"] = client_message_id
        await self.ws.send_str(json.dumps(frame))

    async def wait_for(
        self, matches: Callable[[dict[str, Any]], bool], what: str, *, after: int = 0, timeout: float = 30
    ) -> dict[str, Any]:
        """The first frame from index ``after`` that ``matches``; WireError after ``timeout`` s or on close."""
        deadline = time.monotonic() + timeout
        while True:
            self._changed.clear()
            for frame in self.frames[after:]:
                if matches(frame):
                    return frame
            seen = [frame.get("type") for frame in self.frames[after:]]
            if self.closed:
                raise WireError(f"the chat closed (code {self.close_code}) before {what}; frames since: {seen}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WireError(f"no {what} within {timeout:.0f}s; frames since: {seen}")
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                continue

    async def reply(self, *, after: int, timeout: float) -> StreamedReply:
        """The assistant's reply to the message sent when ``after`` frames had arrived (deltas, then its end)."""
        end = await self.wait_for(
            lambda frame: frame.get("type") in REPLY_ENDS,
            "end of the assistant's reply (a final, reply_blocked or error frame)",
            after=after,
            timeout=timeout,
        )
        reply_to = end.get("reply_to")
        text, deltas, gaps = "", 0, 0
        for frame in self.frames[after:]:
            if frame.get("type") != "delta" or frame.get("reply_to") != reply_to:
                continue
            deltas += 1
            offset = int(frame.get("offset", len(text)))
            if offset == len(text):  # a repeat (a smaller offset) is dropped, as the protocol says
                text += str(frame.get("text", ""))
            elif offset > len(text):
                gaps += 1
        return StreamedReply(int(reply_to) if isinstance(reply_to, int) else None, text, deltas, end, gaps)

    async def close(self) -> None:
        """Close the socket (the stage runs ``$disconnect``) and wait until it is closed."""
        await self.ws.close()
        try:
            await asyncio.wait_for(self._reader, 10)
        except TimeoutError:
            self._reader.cancel()


class StageClient:
    """REST and WebSocket calls to one stage, from its two base URLs."""

    def __init__(self, http: aiohttp.ClientSession, rest_url: str, websocket_url: str) -> None:
        self.http = http
        self.rest_url = rest_url.rstrip("/")
        self.websocket_url = websocket_url.rstrip("/")

    async def rest(
        self,
        method: str,
        path: str,
        token: str | None = None,
        body: Any = None,
        *,
        query: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        """``method`` ``path`` (below the REST base URL) with ``token`` as the bearer; never raises on a status."""
        sent = dict(headers or {})
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        data = None
        if body is not None:
            data = body if isinstance(body, str) else json.dumps(body)
            sent.setdefault("Content-Type", "application/json")
        shown = path + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")
        try:
            async with self.http.request(
                method, self.rest_url + path, data=data, headers=sent, params=query
            ) as response:
                text = await response.text()
                status, answered = response.status, dict(response.headers)
        except (aiohttp.ClientError, TimeoutError) as error:
            raise WireError(f"{method} {self.rest_url}{shown}: cannot reach the REST API ({error!r})") from None
        try:
            parsed: Any = json.loads(text) if text else None
        except ValueError:
            parsed = text
        return Reply(method, shown, status, parsed, answered)

    async def poll(
        self,
        method: str,
        path: str,
        token: str,
        until: Callable[[Reply], bool],
        what: str,
        *,
        timeout: float,
        every: float = 0.5,
    ) -> Reply:
        """Call until ``until(reply)`` holds; WireError with the last answer after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while True:
            reply = await self.rest(method, path, token)
            if until(reply):
                return reply
            if time.monotonic() > deadline:
                raise WireError(f"{what} did not happen within {timeout:.0f}s; last answer: {reply.detail()}")
            await asyncio.sleep(every)

    async def connect(self, token: str | None, session_id: str | None = None) -> ChatSocket:
        """Open the chat (the token in the ``token`` query parameter); HandshakeRefused with its status."""
        params = {k: v for k, v in (("token", token), ("session_id", session_id)) if v is not None}
        shown = f"{self.websocket_url}?" + "&".join(
            f"{k}={'<token>' if k == 'token' else v}" for k, v in params.items()
        )
        try:
            ws = await self.http.ws_connect(self.websocket_url, params=params, autoping=True)
        except aiohttp.WSServerHandshakeError as refused:
            raise HandshakeRefused(refused.status, f"{shown}: handshake refused with {refused.status}") from None
        except (aiohttp.ClientError, TimeoutError) as error:
            raise WireError(f"{shown}: cannot reach the WebSocket API ({error!r})") from None
        return ChatSocket(ws, shown)

    async def handshake_status(self, token: str | None) -> int:
        """The handshake's answer for ``token`` (101 when it opens; the socket is closed again at once)."""
        try:
            socket = await self.connect(token)
        except HandshakeRefused as refused:
            return refused.status
        await socket.close()
        return 101


class CognitoSignIn:
    """Cognito's public ``InitiateAuth`` (``USER_PASSWORD_AUTH``) with the app client's id, over HTTPS.

    The app client must allow password sign-in (dev's does; prod's allows SRP only, so a read-only
    smoke of prod signs in with ``AdminInitiateAuth`` and AWS credentials instead).
    """

    def __init__(self, http: aiohttp.ClientSession, *, client_id: str, endpoint: str) -> None:
        self.http, self.client_id, self.endpoint = http, client_id, endpoint

    async def sign_in(self, email: str, password: str) -> Tokens:
        body = {
            "AuthFlow": "USER_PASSWORD_AUTH",
            "ClientId": self.client_id,
            "AuthParameters": {"USERNAME": email, "PASSWORD": password},
        }
        headers = {"Content-Type": "application/x-amz-json-1.1", "X-Amz-Target": COGNITO_INITIATE_AUTH}
        try:
            async with self.http.post(self.endpoint, data=json.dumps(body), headers=headers) as response:
                status, text = response.status, await response.text()
        except (aiohttp.ClientError, TimeoutError) as error:
            raise WireError(f"InitiateAuth at {self.endpoint}: cannot reach Cognito ({error!r})") from None
        try:
            answer = json.loads(text) if text else {}
        except ValueError:
            answer = {}
        if not isinstance(answer, dict):
            answer = {}
        if status != 200:
            kind = str(answer.get("__type", "")).rsplit("#", 1)[-1] or f"HTTP {status}"
            message = str(answer.get("message") or answer.get("Message") or text[:200])
            hint = ""
            if "USER_PASSWORD_AUTH" in message:
                hint = " (this app client allows no password sign-in: use --sign-in admin with AWS credentials)"
            raise WireError(f"Cognito refused the sign-in of {email}: {kind}: {message}{hint}")
        result = answer.get("AuthenticationResult")
        if not isinstance(result, dict):
            challenge = answer.get("ChallengeName", "an unknown")
            raise WireError(f"{email} must answer the {challenge} challenge before it can sign in")
        return Tokens(email, str(result["IdToken"]), str(result["AccessToken"]))


class LocalSignIn:
    """``make local``'s documented sign-in (``POST /local/sign-in``): its Cognito runs inside the server."""

    def __init__(self, http: aiohttp.ClientSession, origin: str) -> None:
        self.http, self.origin = http, origin.rstrip("/")

    async def sign_in(self, email: str, password: str) -> Tokens:
        url = f"{self.origin}/local/sign-in"
        try:
            async with self.http.post(url, json={"email": email, "password": password}) as response:
                status, text = response.status, await response.text()
        except (aiohttp.ClientError, TimeoutError) as error:
            raise WireError(f"POST {url}: cannot reach make local ({error!r})") from None
        try:
            answer = json.loads(text) if text else {}
        except ValueError:
            answer = {}
        if status != 200 or not isinstance(answer, dict) or "id_token" not in answer:
            raise WireError(f"make local refused the sign-in of {email}: {status} {text[:200]}")
        return Tokens(email, str(answer["id_token"]), str(answer["access_token"]))
