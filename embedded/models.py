"""botocore's service models read once per process, however many sessions the embedded AWS starts.

Every botocore session builds its own data loader, and a loader parses the JSON it hands out
(the endpoint rules of every partition, each service's model, its rule set and waiters) the
first time that session asks. moto starts each mock with a fresh default boto3 session so that
no credentials or clients leak between mocks, and so every mocked test, every embedded stage and
every in-process function paid for that parsing again: creating one DynamoDB client cost about
0.3 s of CPU, most of a fast unit test.

:func:`install` makes every new session share one loader per data path. The loader's cache holds
parsed, read-only data (botocore already shares it between every client of one session), so the
sessions stay separate in everything that carries state: credentials, clients, event handlers.
"""

from __future__ import annotations

import threading
from typing import Any, Final

from botocore import loaders
from botocore import session as botocore_session

__all__ = ["install", "installed", "uninstall"]

_LOCK: Final = threading.Lock()
_loaders: dict[str | None, loaders.Loader] = {}
_original: list[Any] = []


def _shared_loader(search_path_string: str | None = None) -> loaders.Loader:
    with _LOCK:
        loader = _loaders.get(search_path_string)
        if loader is None:
            loader = _loaders[search_path_string] = _original[0](search_path_string)
        return loader


def install() -> None:
    """Share one loader per data path between every botocore session created from now on (idempotent)."""
    if _original:
        return
    _original.append(botocore_session.create_loader)
    botocore_session.create_loader = _shared_loader


def uninstall() -> None:
    """Each new session builds its own loader again."""
    if not _original:
        return
    botocore_session.create_loader = _original.pop()
    _loaders.clear()


def installed() -> bool:
    return bool(_original)
