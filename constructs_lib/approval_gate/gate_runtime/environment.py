"""Settings from environment variables and AWS clients, each made once per container.

A module declares a setting or client with :func:`once`; the first call reads and validates it
(failing with the variable's name), later calls return the cached value. Tests, and harnesses
that run several functions in one process, call :func:`reset` after changing the environment; a
harness may give each function a cache of its own with :func:`container`.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar, cast

import boto3
from botocore.config import Config

T = TypeVar("T")

#: A container's cached values, by the factory that made each.
Values = dict[Callable[[], Any], Any]

#: The values of the container that is running: the process's own, unless a harness chose another.
_running: Values = {}
_SECRETS: dict[str, tuple[float, str]] = {}
_SECRETS_LOCK = threading.Lock()


class SettingError(RuntimeError):
    """A required environment variable is absent or malformed; the message names it."""


def once(factory: Callable[[], T]) -> Callable[[], T]:
    """Cache a zero-argument factory for the life of the container (:func:`reset` clears it)."""

    @functools.wraps(factory)
    def cached() -> T:
        values = _running
        if factory in values:
            return cast(T, values[factory])
        # Two threads may both make it; the first value stored is the one every caller gets.
        return cast(T, values.setdefault(factory, factory()))

    return cached


def reset() -> None:
    """Forget the running container's cached settings and clients, and every cached secret."""
    _running.clear()
    with _SECRETS_LOCK:
        _SECRETS.clear()


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
        raise SettingError(f"environment variable {name} is required but not set")
    return value


def optional(name: str, default: str | None = None) -> str | None:
    """The value of an optional variable, or ``default`` when absent or empty."""
    value = os.environ.get(name, "").strip()
    return value or default


def integer(name: str, default: int | None = None, *, low: int | None = None, high: int | None = None) -> int:
    """An integer variable within [low, high]; ``default`` when absent (required if no default)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        if default is None:
            raise SettingError(f"environment variable {name} is required but not set")
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SettingError(f"environment variable {name} must be an integer (given {raw!r})") from None
    if (low is not None and value < low) or (high is not None and value > high):
        raise SettingError(f"environment variable {name} must be in {low}..{high} (given {value})")
    return value


def client(service: str, *, max_attempts: int | None = None) -> Any:
    """A boto3 client with botocore's standard retry mode (callers cache it with :func:`once`)."""
    retries: dict[str, Any] = {"mode": "standard"}
    if max_attempts is not None:
        retries["max_attempts"] = max_attempts
    return boto3.client(service, config=Config(retries=retries))


@once
def _secrets_manager() -> Any:
    return client("secretsmanager")


def secret_value(secret_id: str, *, max_age: int = 300) -> str:
    """A secret's string value, cached per container for ``max_age`` seconds.

    A replaced secret is picked up within ``max_age`` seconds without a cold start.
    """
    now = time.monotonic()
    with _SECRETS_LOCK:
        cached = _SECRETS.get(secret_id)
    if cached is not None and now - cached[0] < max_age:
        return cached[1]
    value = _secrets_manager().get_secret_value(SecretId=secret_id).get("SecretString")
    if not isinstance(value, str) or not value:
        raise SettingError(f"secret {secret_id!r} holds no string value")
    with _SECRETS_LOCK:
        _SECRETS[secret_id] = (now, value)
    return value
