"""Every boto3 client of the functions, created lazily and once per container, in one place.

Each client uses botocore's ``standard`` retry mode, which retries a whole call that fails with
throttling, a 5xx or a network error. A client whose calls run under the shared retry policy of
:mod:`lambdas.shared.retry` (partial batch failures, a deadline) is asked for with
``single_attempt=True``: botocore then makes one attempt per call, so retries never multiply.
``env.reset()`` forgets every client (tests and the embedded-AWS harness change the environment).
"""

from __future__ import annotations

import threading
from typing import Any, Final

import boto3
from botocore.config import Config

from lambdas.shared import env

#: botocore's standard mode default: one call and two retries.
STANDARD_ATTEMPTS: Final = 3

_LOCK = threading.Lock()


@env.once
def _clients() -> dict[tuple[Any, ...], Any]:
    return {}


def client(
    service: str,
    *,
    endpoint_url: str | None = None,
    single_attempt: bool = False,
    connect_timeout: float = 5,
    read_timeout: float = 30,
) -> Any:
    """The container's client of ``service`` with these options, created on first use."""
    key = (service, endpoint_url, single_attempt, connect_timeout, read_timeout)
    clients = _clients()
    with _LOCK:
        made = clients.get(key)
        if made is None:
            config = Config(
                retries={"mode": "standard", "total_max_attempts": 1 if single_attempt else STANDARD_ATTEMPTS},
                connect_timeout=connect_timeout,
                read_timeout=read_timeout,
            )
            options: dict[str, Any] = {"config": config}
            if endpoint_url is not None:
                options["endpoint_url"] = endpoint_url
            made = boto3.client(service, **options)
            clients[key] = made
    return made
