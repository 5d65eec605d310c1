"""Count a client's AWS calls and how many of them had to wait for one another (sequential round trips).

Usage::

    with RoundTrips(store.table.client, latency=0.02) as trips:
        store.chat.accept_message(...)
    trips.operations()    # ["UpdateItem", "PutItem", "Query", "Query"]
    trips.sequential()    # 2: the UpdateItem, then the other three at once

``RoundTrips.everywhere(latency=...)`` counts the calls of every botocore client instead, those
created inside the code under test included (Powertools' own DynamoDB client, say): it wraps
``BaseClient._make_api_call`` while active, so no client can be left out by mistake.

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
from unittest import mock

from botocore.client import BaseClient


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

    @classmethod
    def everywhere(cls, *, latency: float = 0.0, clock: Callable[[], float] = time.perf_counter) -> RoundTrips:
        """Count the calls of every botocore client while active (see the module docstring)."""
        trips = cls(latency=latency, clock=clock)
        trips._everywhere = True
        return trips

    _everywhere = False
    _patch: Any = None

    def __enter__(self) -> RoundTrips:
        if self._everywhere:
            self._patch = mock.patch.object(BaseClient, "_make_api_call", self._wrap(BaseClient._make_api_call))
            self._patch.start()
        for client in self._clients:
            client.meta.events.register("before-call", self._before)
            client.meta.events.register("after-call", self._after)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._patch is not None:
            self._patch.stop()
            self._patch = None
        for client in self._clients:
            client.meta.events.unregister("before-call", self._before)
            client.meta.events.unregister("after-call", self._after)

    def _wrap(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``_make_api_call`` that records each call (and waits ``latency`` first, as a network would)."""
        trips = self

        def recorded(client: Any, operation: str, params: Any) -> Any:
            call = Call(client.meta.service_model.service_name, operation, trips._clock())
            with trips._lock:
                trips.calls.append(call)
            if trips._latency:
                time.sleep(trips._latency)
            try:
                return original(client, operation, params)
            finally:
                call.end = trips._clock()

        return recorded

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
