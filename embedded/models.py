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

It also shares the event names botocore's aliaser works out. Every handler a client registers
and every event it emits goes through ``EventAliaser._alias_event_name``, which rewrites old
service names in the event name (``autoscaling`` for ``auto-scaling``, ...) by splitting the name
for each of some forty aliases. It keeps its answers, but per emitter, and every session and every
client starts a new emitter: the aliaser ran again for each of the hundreds of names a client
registers, about a twentieth of the CPU of a test that makes a few DynamoDB calls. The answer
depends on nothing but the name and the alias table, so one table of answers serves every emitter
whose alias table is botocore's own.

And every request's User-Agent header: botocore builds it anew for each call, passing each of its
dozens of components (names, versions, the features the call used) through a character-by-character
sanitizer, several percent of a request's CPU on the embedded AWS. The sanitizer's answer depends
only on its two arguments, so each component is sanitized once per process.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, Final

from botocore import hooks, loaders, useragent
from botocore import session as botocore_session

__all__ = ["install", "installed", "original_alias_event_name", "uninstall"]

_LOCK: Final = threading.Lock()
_loaders: dict[str | None, loaders.Loader] = {}
_original: list[Any] = []
_aliased: dict[str, str] = {}


def _shared_loader(search_path_string: str | None = None) -> loaders.Loader:
    with _LOCK:
        loader = _loaders.get(search_path_string)
        if loader is None:
            loader = _loaders[search_path_string] = _original[0](search_path_string)
        return loader


def _alias_event_name(self: hooks.EventAliaser, event_name: str) -> str:
    kept: str | None = self._alias_name_cache.get(event_name)
    if kept is not None:
        return kept
    aliases = self._event_aliases
    if aliases is not hooks.EVENT_ALIASES and aliases != hooks.EVENT_ALIASES:
        return str(_original[1](self, event_name))
    name = _aliased.get(event_name)
    if name is None:
        name = _aliased[event_name] = str(_original[1](self, event_name))
    self._alias_name_cache[event_name] = name
    return name


def original_alias_event_name() -> Callable[[hooks.EventAliaser, str], str]:
    """botocore's own ``EventAliaser._alias_event_name``, installed or not."""
    return _original[1] if _original else hooks.EventAliaser._alias_event_name


def install() -> None:
    """Share loaders, aliased event names and sanitized user agent parts between every botocore session (idempotent)."""
    if _original:
        return
    sanitize = useragent.sanitize_user_agent_string_component
    _original.extend((botocore_session.create_loader, hooks.EventAliaser._alias_event_name, sanitize))
    botocore_session.create_loader = _shared_loader
    hooks.EventAliaser._alias_event_name = _alias_event_name
    useragent.sanitize_user_agent_string_component = functools.lru_cache(maxsize=4096)(sanitize)


def uninstall() -> None:
    """Each new session builds its own loader, each emitter aliases its event names, each request sanitizes, again."""
    if not _original:
        return
    useragent.sanitize_user_agent_string_component = _original.pop()
    hooks.EventAliaser._alias_event_name = _original.pop()
    botocore_session.create_loader = _original.pop()
    _loaders.clear()
    _aliased.clear()


def installed() -> bool:
    return bool(_original)
