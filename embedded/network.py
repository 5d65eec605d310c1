"""No real endpoint: a process running the embedded AWS reaches loopback only, and says so when it tries more.

Everything the embedded stage answers is answered in this process (moto behind botocore, the HTTP
mock for the identity provider's keys) or on loopback (``make local``'s servers). A call that
slips past them, such as moto's Step Functions executor building its own client for a task it does
not route and resolving ``sqs.us-east-1.amazonaws.com``, would otherwise wait on a network that is
not there and end as an unexplained timeout. :func:`install` makes name resolution of anything
but ``localhost`` and every connection to a non-loopback address fail at once with
:class:`RealEndpointError`, naming the endpoint, and records it in :data:`REACHED` so a test
harness can fail the test even when the caller swallowed the error.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from typing import Any, Final

__all__ = ["REACHED", "RealEndpointError", "install", "installed", "uninstall"]

#: Every endpoint something tried to reach since the list was last cleared ("host:port").
REACHED: list[str] = []
_LOCK: Final = threading.Lock()
_LOCAL_NAMES: Final = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", ""})
_originals: dict[str, Any] = {}


class RealEndpointError(ConnectionRefusedError):
    """Something tried to reach an address outside this machine."""


def _is_local(host: str | bytes | None) -> bool:
    if host is None:
        return True  # getaddrinfo(None, port): the local wildcard address, as servers bind
    name = host.decode() if isinstance(host, bytes) else host
    if name.lower() in _LOCAL_NAMES:
        return True
    try:
        address = ipaddress.ip_address(name.split("%", 1)[0])
    except ValueError:
        return False
    return address.is_loopback or address.is_unspecified


def _refuse(host: object, port: object) -> RealEndpointError:
    endpoint = f"{host}:{port}"
    with _LOCK:
        REACHED.append(endpoint)
    return RealEndpointError(
        f"tried to reach {endpoint}, a real endpoint: the embedded AWS answers in this process and on "
        "loopback only (a client built outside moto, or an endpoint the emulator does not route)"
    )


def _getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
    if not _is_local(host):
        raise _refuse(host, port)
    return _originals["getaddrinfo"](host, port, *args, **kwargs)


def _checked(original: str) -> Any:
    def connect(self: socket.socket, address: Any) -> Any:
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _is_local(address[0]):
            raise _refuse(address[0], address[1])
        return _originals[original](self, address)

    return connect


def install() -> None:
    """Refuse every non-local name and address from now on (idempotent)."""
    if _originals:
        return
    _originals.update(
        getaddrinfo=socket.getaddrinfo, connect=socket.socket.connect, connect_ex=socket.socket.connect_ex
    )
    socket.getaddrinfo = _getaddrinfo
    socket.socket.connect = _checked("connect")  # type: ignore[method-assign]
    socket.socket.connect_ex = _checked("connect_ex")  # type: ignore[method-assign]


def uninstall() -> None:
    """Give the socket module its own functions back."""
    if not _originals:
        return
    socket.getaddrinfo = _originals["getaddrinfo"]
    socket.socket.connect = _originals["connect"]  # type: ignore[method-assign]
    socket.socket.connect_ex = _originals["connect_ex"]  # type: ignore[method-assign]
    _originals.clear()


def installed() -> bool:
    return bool(_originals)
