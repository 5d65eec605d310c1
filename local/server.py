"""Real HTTP and WebSocket endpoints in front of the embedded stage (aiohttp).

* REST (``http://HOST:REST_PORT/<stage>/...``): each request becomes one call of the harness's
  ``RestRouter`` (routes, authorizer, request models, integrations, CORS preflight, gateway
  responses as the template declares them) and its response goes back as it is.
* WebSocket (``ws://HOST:WS_PORT/<stage>?token=...``): the handshake runs ``$connect`` (with
  its authorizer) and is refused with its status; each text message goes to ``send``; the
  socket's end runs ``$disconnect``. Frames the handlers post (PostToConnection) are written to
  the socket as they are posted, while the handler still runs; once the socket is gone, posts
  answer 410 Gone. A message over :data:`MAX_FRAME_BYTES` closes the connection with 1009
  (Message Too Big), as API Gateway does with an oversized frame.
* Local-only helpers under ``/local/`` on the REST port (sign-in, users, status, the stage's
  clock, the pages' configuration) and the two pages under ``/pages/``.

All stage calls run on the stage's worker thread (``LocalStage.submit``); the event loop only
moves bytes, so frames keep flowing while a handler streams a reply.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import WSCloseCode, WSMsgType, web

from embedded.services.apigateway_rest import PAYLOAD_LIMIT
from embedded.services.apigateway_websocket import ConnectionRefused
from local.guard import RedactingAccessLogger, Refused, check_local_post, is_own_origin, served_hosts_only
from local.stage import DEMO_USERS, LocalStage, StageError

T = TypeVar("T")
log = logging.getLogger("local")

PAGES = Path(__file__).resolve().parent / "pages"
#: API Gateway's WebSocket frame limit: a larger single-frame message closes the connection (1009).
MAX_FRAME_BYTES = 32 * 1024
_CLOSE = object()
_JSON = "application/json"
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


@dataclass
class Urls:
    """Where the server listens (after ``start()``: the bound ports, also when 0 was asked)."""

    host: str
    rest_port: int
    ws_port: int
    rest_stage: str
    ws_stage: str

    def _host(self) -> str:
        return f"[{self.host}]" if ":" in self.host else self.host

    @property
    def origin(self) -> str:
        return f"http://{self._host()}:{self.rest_port}"

    @property
    def rest(self) -> str:
        return f"{self.origin}/{self.rest_stage}"

    @property
    def websocket(self) -> str:
        return f"ws://{self._host()}:{self.ws_port}/{self.ws_stage}"

    @property
    def chat_page(self) -> str:
        return f"{self.origin}/pages/chat.html"

    @property
    def agent_page(self) -> str:
        return f"{self.origin}/pages/agent.html"

    def as_dict(self) -> dict[str, str]:
        return {
            "rest": self.rest,
            "websocket": self.websocket,
            "chat_page": self.chat_page,
            "agent_page": self.agent_page,
            "sign_in": f"{self.origin}/local/sign-in",
            "users": f"{self.origin}/local/users",
            "status": f"{self.origin}/local/status",
        }


@dataclass
class _Socket:
    ws: web.WebSocketResponse
    outbox: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)
    closed_by_server: bool = False


class LocalServer:
    """The REST and WebSocket servers of one ``LocalStage`` (see the module docstring)."""

    def __init__(self, local: LocalStage, *, host: str = "127.0.0.1", rest_port: int = 8300, ws_port: int = 8301):
        self.local = local
        stage = local.stage
        self.urls = Urls(host, rest_port, ws_port, stage.rest.stage, stage.websocket.stage)
        self._runners: list[web.AppRunner] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._outboxes: dict[str, asyncio.Queue[Any]] = {}
        self._sockets: dict[str, _Socket] = {}
        self._ended: set[str] = set()  # connections whose socket is gone: nothing more is queued for them
        self._handlers: set[asyncio.Task[Any]] = set()
        self._cors_origins = _preflight_origins(local)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> Urls:
        """Bind both ports and start serving; the bound URLs."""
        self._loop = asyncio.get_running_loop()
        router = self.local.stage.websocket
        router.on_frame = self._frame_posted
        router.on_close = self._closed_by_server
        hosts = served_hosts_only(self.urls.host)
        rest = web.Application(client_max_size=1024 * 1024, middlewares=[hosts])
        rest.router.add_get("/", self._index)
        rest.router.add_get("/local/config", self._config)
        rest.router.add_get("/local/status", self._status)
        rest.router.add_route("*", "/local/sign-in", self._sign_in)
        rest.router.add_route("*", "/local/users", self._users)
        rest.router.add_route("*", "/local/clock", self._clock)
        rest.router.add_static("/pages", PAGES)
        rest.router.add_route("*", "/" + self.urls.rest_stage + "{tail:(/.*)?}", self._rest)
        chat = web.Application(middlewares=[hosts])
        chat.router.add_get("/" + self.urls.ws_stage, self._websocket)
        ports = []
        for app, port in ((rest, self.urls.rest_port), (chat, self.urls.ws_port)):
            runner = web.AppRunner(app, access_log=log, access_log_class=RedactingAccessLogger, shutdown_timeout=2)
            await runner.setup()
            site = web.TCPSite(runner, self.urls.host, port)
            await site.start()
            self._runners.append(runner)
            ports.append(_bound_port(runner, port))
        self.urls.rest_port, self.urls.ws_port = ports
        await self._call(self.local.serve_review_links_at, self.urls.rest + "/")
        return self.urls

    async def stop(self) -> None:
        """Close every socket (``$disconnect`` runs for each), then stop listening."""
        for socket in list(self._sockets.values()):
            await socket.ws.close(code=WSCloseCode.GOING_AWAY, message=b"server stopping")
        if self._handlers:
            await asyncio.wait(list(self._handlers), timeout=10)
        for runner in self._runners:
            await runner.cleanup()
        router = self.local.stage.websocket
        router.on_frame = None
        router.on_close = None

    async def _call(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.wrap_future(self.local.submit(call, *args, **kwargs))

    # ------------------------------------------------------------------ REST

    async def _rest(self, request: web.Request) -> web.StreamResponse:
        path = request.match_info["tail"] or "/"
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            # aiohttp stopped reading at the local cap; the router refuses any body over API Gateway's
            # quota before looking at it, so one of that size gets the stage's JSON 413 gateway response.
            raw = b" " * (PAYLOAD_LIMIT + 1)
        body = raw.decode("utf-8", errors="replace") if raw else None
        headers = dict(request.headers.items())
        query = dict(request.query.items())
        try:
            response = await self._call(
                self.local.stage.rest.request, request.method, path, headers=headers, query=query, body=body
            )
        except Exception:  # the emulation itself failed: what API Gateway answers, and the cause on the console
            log.exception("%s %s failed in the embedded stage", request.method, request.path)
            return web.json_response({"message": "Internal server error"}, status=500)
        out_headers = dict(response.headers)
        if not any(k.lower() == "content-type" for k in out_headers):
            out_headers["Content-Type"] = _JSON
        return web.Response(status=response.status, body=response.body.encode(), headers=out_headers)

    # ------------------------------------------------------------------ local-only helpers

    def _cors(self, request: web.Request) -> dict[str, str]:
        origin = request.headers.get("Origin", "")
        if origin and origin in self._cors_origins:
            return {
                "Access-Control-Allow-Origin": origin,
                "Access-Control-Allow-Headers": "Content-Type",
                "Access-Control-Allow-Methods": "GET,POST,DELETE,OPTIONS",
                "Vary": "Origin",
            }
        return {}

    def _own_origin(self, origin: str) -> bool:
        return is_own_origin(origin, self.urls.host, self.urls.rest_port, self._cors_origins)

    def _json(self, request: web.Request, status: int, body: Any) -> web.Response:
        return web.json_response(body, status=status, headers=self._cors(request))

    def _error(self, request: web.Request, status: int, message: str) -> web.Response:
        return self._json(request, status, {"error": {"code": HTTPStatus(status).phrase, "message": message}})

    async def _body(self, request: web.Request) -> dict[str, Any]:
        try:
            check_local_post(request, self._own_origin)
        except Refused as refused:
            raise StageError(refused.status, refused.message) from None
        try:
            body = await request.json()
        except ValueError:
            raise StageError(400, "the body must be a JSON object") from None
        if not isinstance(body, dict):
            raise StageError(400, "the body must be a JSON object")
        return body

    async def _index(self, request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound("/pages/index.html")

    async def _config(self, request: web.Request) -> web.Response:
        config: dict[str, Any] = dict(self.urls.as_dict())
        if self.local.demo_users:
            config["demo_users"] = [{"email": email, "role": role} for email, role in DEMO_USERS]
            config["demo_password"] = self.local.password
        return self._json(request, 200, config)

    async def _status(self, request: web.Request) -> web.Response:
        return self._json(request, 200, await self._call(self.local.status))

    async def _sign_in(self, request: web.Request) -> web.Response:
        if request.method == "OPTIONS":
            return web.Response(status=204, headers=self._cors(request))
        if request.method != "POST":
            return self._error(request, 405, "POST {email, password}")
        try:
            body = await self._body(request)
            email, password = body.get("email"), body.get("password")
            if not isinstance(email, str) or not isinstance(password, str) or not email or not password:
                raise StageError(400, "email and password are required strings")
            signed_in = await self._call(self.local.sign_in, email, password)
        except StageError as error:
            return self._error(request, error.status, error.message)
        return self._json(
            request,
            200,
            {
                "email": signed_in.email,
                "sub": signed_in.sub,
                "role": self.local.role_of(signed_in.id_token),
                "id_token": signed_in.id_token,
                "access_token": signed_in.access_token,
                "refresh_token": signed_in.refresh_token,
                "expires_at": signed_in.expires_at,
            },
        )

    async def _clock(self, request: web.Request) -> web.Response:
        if request.method == "OPTIONS":
            return web.Response(status=204, headers=self._cors(request))
        if request.method != "POST":
            return self._error(request, 405, 'POST {"advance_seconds": N}: let N seconds pass on the stage\'s clock')
        try:
            seconds = (await self._body(request)).get("advance_seconds")
            now = await self._call(self.local.advance_clock, seconds)
        except StageError as error:
            return self._error(request, error.status, error.message)
        return self._json(request, 200, {"advanced_seconds": seconds, "now": now})

    async def _users(self, request: web.Request) -> web.Response:
        if request.method == "OPTIONS":
            return web.Response(status=204, headers=self._cors(request))
        if request.method == "DELETE":
            return await self._delete_user(request)
        if request.method != "POST":
            return self._error(request, 405, "POST {email, role, password?, register?, manager?} or DELETE {email}")
        try:
            body = await self._body(request)
            email, role = body.get("email"), body.get("role", "customer")
            password = body.get("password") or self.local.password
            register, manager = body.get("register", True), body.get("manager", False)
            if not isinstance(email, str) or not _EMAIL.match(email):
                raise StageError(400, "email must be an e-mail address")
            if not isinstance(role, str) or not isinstance(password, str):
                raise StageError(400, "role and password must be strings")
            if not isinstance(register, bool) or not isinstance(manager, bool):
                raise StageError(400, "register and manager must be true or false")
            created = await self._call(
                self.local.create_user, email, role, password, register=register, manager=manager
            )
        except StageError as error:
            return self._error(request, error.status, error.message)
        if not created:
            return self._error(request, 409, f"{email} exists")
        registered = role == "agent" and register
        return self._json(
            request,
            201,
            {"email": email, "role": role, "registered_agent": registered, "manager": registered and manager},
        )

    async def _delete_user(self, request: web.Request) -> web.Response:
        try:
            email = (await self._body(request)).get("email")
            if not isinstance(email, str) or not _EMAIL.match(email):
                raise StageError(400, "email must be an e-mail address")
        except StageError as error:
            return self._error(request, error.status, error.message)
        if not await self._call(self.local.delete_user, email):
            return self._error(request, 404, f"{email} is not a user")
        return web.Response(status=204, headers=self._cors(request))

    # ------------------------------------------------------------------ WebSocket

    def _outbox(self, connection_id: str) -> asyncio.Queue[Any]:
        return self._outboxes.setdefault(connection_id, asyncio.Queue())

    def _frame_posted(self, connection_id: str, frame: Any) -> None:
        """A frame for a client (any thread): queued for its socket's writer at once."""

        def queue() -> None:
            if connection_id not in self._ended:
                self._outbox(connection_id).put_nowait(frame)

        if self._loop is not None:
            self._loop.call_soon_threadsafe(queue)

    def _closed_by_server(self, connection_id: str) -> None:
        """A handler deleted the connection (``@connections`` DELETE): close its socket."""

        def close() -> None:
            socket = self._sockets.get(connection_id)
            if socket is not None:
                socket.closed_by_server = True
            self._outbox(connection_id).put_nowait(_CLOSE)

        if self._loop is not None:
            self._loop.call_soon_threadsafe(close)

    async def _websocket(self, request: web.Request) -> web.StreamResponse:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        try:
            return await self._serve_socket(request)
        finally:
            if task is not None:
                self._handlers.discard(task)

    async def _serve_socket(self, request: web.Request) -> web.StreamResponse:
        # aiohttp refuses a message of max_msg_size bytes or more; API Gateway takes exactly 32 KB
        ws = web.WebSocketResponse(max_msg_size=MAX_FRAME_BYTES + 1, autoping=True)
        if not ws.can_prepare(request).ok:
            return web.json_response({"message": "Expected a WebSocket upgrade"}, status=426)
        router = self.local.stage.websocket
        try:
            connection_id = await self._call(
                router.connect, query=dict(request.query.items()), headers=dict(request.headers.items())
            )
        except ConnectionRefused as refused:
            log.info("$connect refused: %s", refused)
            if refused.body is not None:  # the handler's own refusal: its code reaches the client as written
                return web.Response(status=refused.status, text=refused.body, content_type="application/json")
            return web.json_response({"message": HTTPStatus(refused.status).phrase}, status=refused.status)
        except Exception:
            log.exception("$connect failed in the embedded stage")
            return web.json_response({"message": "Internal server error"}, status=500)
        socket = _Socket(ws, self._outbox(connection_id))
        self._sockets[connection_id] = socket
        writer: asyncio.Task[None] | None = None
        try:
            await ws.prepare(request)
            writer = asyncio.create_task(self._write(socket))
            log.info("connected %s", connection_id)
            async for message in ws:
                if message.type == WSMsgType.TEXT:
                    self._received(connection_id, message.data)
                elif message.type == WSMsgType.BINARY:
                    self._received(connection_id, message.data.decode("utf-8", errors="replace"))
                elif message.type == WSMsgType.ERROR:
                    break
        finally:
            await self._socket_gone(connection_id, socket, writer)
        return ws

    def _received(self, connection_id: str, data: str) -> None:
        """Hand a message to its route on the worker, in arrival order, without waiting for it."""
        future = self.local.submit(self.local.stage.websocket.send, connection_id, data)
        future.add_done_callback(_report(f"message on {connection_id}"))

    async def _write(self, socket: _Socket) -> None:
        while True:
            frame = await socket.outbox.get()
            if frame is _CLOSE:
                await socket.ws.close(code=WSCloseCode.OK, message=b"closed by the server")
                return
            if socket.ws.closed:
                return
            try:
                await socket.ws.send_str(frame if isinstance(frame, str) else json.dumps(frame))
            except ConnectionError:
                return

    async def _socket_gone(self, connection_id: str, socket: _Socket, writer: asyncio.Task[None] | None) -> None:
        """The client's socket ended: posts answer 410 from now on; ``$disconnect`` runs after what it sent."""
        router = self.local.stage.websocket
        connection = router.connections.get(connection_id)
        if connection is not None and connection.open:
            router.close(connection_id)
        if writer is not None:
            writer.cancel()
        self._ended.add(connection_id)
        self._sockets.pop(connection_id, None)
        self._outboxes.pop(connection_id, None)
        if socket.closed_by_server or connection is None or connection.disconnected:
            return
        code = socket.ws.close_code or WSCloseCode.ABNORMAL_CLOSURE
        log.info("disconnected %s (%s)", connection_id, code)
        # KeyError: disconnected meanwhile; RuntimeError: the worker has stopped
        with contextlib.suppress(KeyError, RuntimeError):
            await self._call(router.disconnect, connection_id, status_code=int(code), reason="client closed")


def _report(what: str) -> Callable[[Future[Any]], None]:
    def done(future: Future[Any]) -> None:
        if future.cancelled():
            return
        error = future.exception()
        if error is not None and not isinstance(error, KeyError):
            log.error("%s failed: %s: %s", what, type(error).__name__, error)

    return done


def _bound_port(runner: web.AppRunner, asked: int) -> int:
    for site in runner.sites:
        server = getattr(site, "_server", None)
        for sock in getattr(server, "sockets", None) or []:
            return int(sock.getsockname()[1])
    return asked


def _preflight_origins(local: LocalStage) -> tuple[str, ...]:
    """The origins the REST API's CORS preflight answers (from the template), for the local helpers too."""
    origins: set[str] = set()
    for (_path, method), found in local.stage.rest.methods.items():
        if method != "OPTIONS":
            continue
        for response in (found.properties.get("Integration") or {}).get("IntegrationResponses") or []:
            value = (response.get("ResponseParameters") or {}).get("method.response.header.Access-Control-Allow-Origin")
            if value:
                origins.add(str(value).strip("'"))
    return tuple(sorted(origins))
