"""Count a client's AWS calls and how many of them had to wait for one another (sequential round trips).

Usage::

    with RoundTrips(store.table.client, latency=0.02) as trips:
        store.chat.accept_message(...)
    trips.operations()    # ["UpdateItem", "PutItem", "Query", "Query"]
    trips.sequential()    # 2: the UpdateItem, then the other three at once

A ``before-call`` hook notes when each call starts (and, given ``latency``, waits that long first,
as a network would: on moto a call takes microseconds, so without it calls made at once would
rarely overlap), an ``after-call`` hook when it ends. Calls made at once overlap in time; a call
that starts after another has ended waited for it. :meth:`RoundTrips.sequential` is the longest
chain of calls each starting after the previous one ended: the round trips a caller waits.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any


@dataclass
class Call:
    """One AWS call: its operation, service, and when it started and ended (``time.perf_counter``)."""

    service: str
    operation: str
    start: float
    end: float = float("inf")


class RoundTrips:
    """Records the calls of ``clients`` while active (see the module docstring)."""

    def __init__(self, *clients: Any, latency: float = 0.0, clock: Callable[[], float] = time.perf_counter) -> None:
        self.calls: list[Call] = []
        self._clients = clients
        self._latency = latency
        self._clock = clock
        self._lock = threading.Lock()
        self._open: dict[int, Call] = {}

    def __enter__(self) -> RoundTrips:
        for client in self._clients:
            client.meta.events.register("before-call", self._before)
            client.meta.events.register("after-call", self._after)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        for client in self._clients:
            client.meta.events.unregister("before-call", self._before)
            client.meta.events.unregister("after-call", self._after)

    def _before(self, model: Any, **_: Any) -> None:
        call = Call(model.service_model.service_name, model.name, self._clock())
        with self._lock:
            self.calls.append(call)
            self._open[threading.get_ident()] = call
        if self._latency:
            time.sleep(self._latency)

    def _after(self, **_: Any) -> None:
        with self._lock:
            call = self._open.pop(threading.get_ident(), None)
        if call is not None:
            call.end = self._clock()

    def operations(self, before: float | None = None) -> list[str]:
        """The operations, in the order they started (only those started before ``before``, if given)."""
        return [c.operation for c in self._chosen(before)]

    def sequential(self, before: float | None = None) -> int:
        """The longest chain of calls each started after the previous one ended (round trips waited)."""
        depth: list[int] = []
        chosen = sorted(self._chosen(before), key=lambda c: c.start)
        for n, call in enumerate(chosen):
            waited = [depth[m] for m in range(n) if chosen[m].end <= call.start]
            depth.append(1 + max(waited, default=0))
        return max(depth, default=0)

    def _chosen(self, before: float | None) -> list[Call]:
        return [c for c in self.calls if before is None or c.start < before]
