"""Typed settings from environment variables, read once per container.

A handler module declares its settings and clients with ``@once``; the first call reads and
validates (failing with the variable's name), later calls return the cached value. Tests call
``reset()`` after changing the environment so the next call reads it again.

In Lambda a process is one container of one function. A harness that runs several functions in
one process gives each of them its own cache with :func:`container`, so a function's settings and
clients stay warm from one of its invocations to the next, as in a warm Lambda container, and are
never another function's.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar, cast

T = TypeVar("T")

#: A container's cached values, by the factory that made each.
Values = dict[Callable[[], Any], Any]

#: The values of the container that is running: the process's own, unless a harness chose another.
_running: Values = {}


class MissingSetting(RuntimeError):
    """A required environment variable is absent or malformed; the message names it."""


def once(factory: Callable[[], T]) -> Callable[[], T]:
    """Cache a zero-argument factory for the life of the container (``reset()`` clears it)."""

    @functools.wraps(factory)
    def cached() -> T:
        values = _running
        if factory in values:
            return cast(T, values[factory])
        # Two threads may both make it; the first value stored is the one every caller gets.
        return cast(T, values.setdefault(factory, factory()))

    return cached


def reset() -> None:
    """Forget the running container's cached settings and clients, so the next use reads the environment again."""
    _running.clear()


@contextmanager
def container(values: Values) -> Iterator[None]:
    """Run the block in the container whose cached values are ``values`` (an empty dict: a cold start).

    Not thread-local: a harness switches containers while it runs one invocation at a time.
    """
    global _running
    previous, _running = _running, values
    try:
        yield
    finally:
        _running = previous


def require(name: str) -> str:
    """The value of a required variable; raises naming it when absent or empty."""
    value = os.environ.get(name, "").strip()
    if not value:
        raise MissingSetting(f"environment variable {name} is required but not set")
    return value


def optional(name: str, default: str | None = None) -> str | None:
    """The value of an optional variable, or ``default`` when absent or empty."""
    value = os.environ.get(name, "").strip()
    return value or default


def resource(name: str) -> str:
    """A resource name or ARN the deploy side set for this function (``TABLE_NAME``, ...); required."""
    return require(name)


def optional_resource(name: str) -> str | None:
    """A resource the deploy side may leave out for this function (None when it did)."""
    return optional(name)


def integer(name: str, default: int | None = None, *, low: int | None = None, high: int | None = None) -> int:
    """An integer variable within [low, high]; ``default`` when absent (required if no default)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        if default is None:
            raise MissingSetting(f"environment variable {name} is required but not set")
        return default
    try:
        value = int(raw)
    except ValueError:
        raise MissingSetting(f"environment variable {name} must be an integer (given {raw!r})") from None
    if (low is not None and value < low) or (high is not None and value > high):
        raise MissingSetting(f"environment variable {name} must be in {low}..{high} (given {value})")
    return value


def flag(name: str, default: bool = False) -> bool:
    """A boolean variable: true/false, 1/0, yes/no."""
    raw = os.environ.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in ("1", "true", "yes"):
        return True
    if raw in ("0", "false", "no"):
        return False
    raise MissingSetting(f"environment variable {name} must be true or false (given {raw!r})")
