"""The process's environment as a test found it, and what the test left changed."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

#: Variables pytest itself moves from phase to phase of every test.
PYTEST_OWN = frozenset({"PYTEST_CURRENT_TEST"})


@contextmanager
def left_changed(
    settled: Callable[[], AbstractContextManager[object]] = contextlib.nullcontext,
) -> Iterator[list[str]]:
    """Yield a list that, once the block ends, names each variable the block left changed, put back.

    The environment is read before and after the block inside ``settled()``, which holds off
    whatever else sets variables for a while (the Lambda bridge's invocations).

    A variable left empty counts as unset, as the handlers' settings read it (the Lambda bridge
    ends a call so). Nothing is deleted on the way back, for the reason
    ``embedded.runtime.function_environment`` gives: another thread may be copying the environment.
    """
    with settled():
        before = dict(os.environ)
    changed: list[str] = []
    yield changed
    with settled():
        changed.extend(
            sorted(
                key
                for key in before.keys() | os.environ.keys()
                if before.get(key, "") != os.environ.get(key, "") and key not in PYTEST_OWN
            )
        )
        for key in changed:
            os.environ[key] = before.get(key, "")
