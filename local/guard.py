"""What keeps a web page the developer visits from using ``make local`` behind their back.

The local server holds the demo password and can create users of any role, and it listens on a
loopback address that every page in the developer's browser can reach:

* **DNS rebinding.** A page on ``evil.example`` whose name is re-pointed at 127.0.0.1 becomes
  same-origin with the server and can read ``/local/config`` (with the demo password). Only
  loopback host names are served: its ``Host`` header would say ``evil.example``.
* **Cross-site "simple" requests.** A form or ``fetch`` with ``text/plain`` needs no preflight,
  so ``POST /local/users`` must not read such a body as JSON. The local helpers take only
  ``application/json`` (which needs the preflight the server answers only for its own pages'
  origins), and refuse a request whose ``Origin`` is another site's.
* **Tokens in the log.** The chat's WebSocket URL carries the customer's token in its query; the
  access log writes each request line, so it writes that line with the token redacted.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from collections.abc import Awaitable, Callable, Collection
from typing import Final

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from aiohttp.typedefs import Middleware

#: Host names that always mean this machine.
LOOPBACK_NAMES: Final = frozenset({"localhost", "localhost.localdomain", "127.0.0.1", "::1"})
#: Query parameters whose value is a credential.
SECRET_PARAMETERS: Final = ("token", "access_token", "id_token")
_SECRET = re.compile(r"(?P<name>(?:^|[?&])(?:" + "|".join(SECRET_PARAMETERS) + r")=)[^&#\s]*")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Refused(Exception):
    """A request the local server will not serve: ``status`` and why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def is_served_host(host_header: str | None, bound: str) -> bool:
    """Whether ``Host`` names this server: a loopback name or address, or the address it is bound to."""
    if not host_header:
        return False
    try:
        name = urllib.parse.urlsplit(f"//{host_header}").hostname
    except ValueError:
        return False
    if name is None:
        return False
    if name in LOOPBACK_NAMES or name == bound.strip("[]"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def is_own_origin(origin: str, bound: str, port: int, also: Collection[str] = ()) -> bool:
    """Whether ``Origin`` is this server's own pages (any loopback name, its port) or one of ``also``."""
    if origin in also:
        return True
    try:
        parts = urllib.parse.urlsplit(origin)
        return parts.scheme == "http" and parts.port == port and is_served_host(parts.netloc, bound)
    except ValueError:
        return False


def check_local_post(request: web.Request, own_origin: Callable[[str], bool]) -> None:
    """A write to a local helper: JSON only, from this server's own pages (or from no page at all)."""
    if request.content_type != "application/json":
        raise Refused(415, "the body must be JSON: send Content-Type: application/json")
    origin = request.headers.get("Origin")
    if origin is not None and not own_origin(origin):
        raise Refused(403, f"requests from {origin} may not use the local helpers")


def served_hosts_only(bound: str) -> Middleware:
    """Middleware refusing a request whose ``Host`` is not this machine (a DNS-rebinding page)."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not is_served_host(request.headers.get("Host"), bound):
            return web.json_response(
                {"error": {"code": "Misdirected Request", "message": "this server answers loopback host names only"}},
                status=421,
            )
        return await handler(request)

    return middleware


def redact(path_qs: str) -> str:
    """``path_qs`` with every credential query parameter's value replaced."""
    return _SECRET.sub(r"\g<name><redacted>", path_qs)


class RedactingAccessLogger(AbstractAccessLogger):
    """One line per request, as ``%r %s %b (%Tfs)`` would write it, without the token in the URL."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        line = f"{request.method} {redact(request.path_qs)} HTTP/{request.version.major}.{request.version.minor}"
        self.logger.info("%s %s %s (%.6fs)", line, response.status, response.body_length, time)
