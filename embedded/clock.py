"""Clocks: the stage's (real time plus an offset a run moves forward, "an hour passes") and a settable one.

``Clock`` is what an embedded stage runs on; ``FakeClock`` is a clock that moves only when told,
for code that takes ``clock=`` (epoch seconds).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

_REAL_TIME = time.time


class Clock:
    """Epoch seconds = real time + offset; ``advance()`` moves it, never backwards.

    Real time keeps flowing underneath so that Step Functions Wait states and SQS visibility on
    moto still progress; only the offset is under the test's control.
    """

    def __init__(self) -> None:
        self._offset = 0.0
        self._frozen_at: float | None = None
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return (_REAL_TIME() if self._frozen_at is None else self._frozen_at) + self._offset

    @contextmanager
    def frozen(self) -> Iterator[None]:
        """Stop real time from flowing inside the block (``advance()`` still moves the clock).

        For a run that must not depend on how fast the machine is, such as a burst against a
        throttle that refills with time. Leaving the block lets real time flow again from where it
        is, so the clock never goes back.
        """
        with self._lock:
            self._frozen_at = _REAL_TIME()
        try:
            yield
        finally:
            with self._lock:
                self._frozen_at = None

    @property
    def offset(self) -> float:
        return self._offset

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"a clock only moves forward (given {seconds})")
        with self._lock:
            self._offset += seconds

    @contextmanager
    def installed(self) -> Iterator[None]:
        """Make ``time.time()`` (and stores defaulting to it) read this clock inside the block."""
        from lambdas.shared.store import TableCore

        init = TableCore.__init__
        kwdefaults = dict(init.__kwdefaults__ or {})
        patched = {**kwdefaults, "clock": self}
        with mock.patch("time.time", self), mock.patch.object(init, "__kwdefaults__", patched):
            yield


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
