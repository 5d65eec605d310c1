"""A settable clock for tests of code that takes ``clock=`` (epoch seconds)."""

from __future__ import annotations

import threading

START_TIME = 1_767_225_600  # 2026-01-01T00:00:00Z


class FakeClock:
    """A settable clock in epoch seconds; pass it as ``clock=`` and move it with advance()."""

    def __init__(self, now: float = START_TIME) -> None:
        self.now = float(now)
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self.now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds
