"""Fixtures for unit tests: a moto sessions table, a fake clock, a store on both."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from embedded.clock import FakeClock
from embedded.services.dynamodb import DEFAULT_TABLE_NAME, atomic_requests, create_sessions_table
from lambdas.shared import env as lambda_env
from lambdas.shared.store import DynamoSessionStore

#: The stage settings every function gets from the deploy side (dev's values); a test may override one.
STAGE_ENVIRONMENT = {"SESSION_TTL_HOURS": "24", "CLEANUP_SHARDS": "8"}


@pytest.fixture(autouse=True)
def stage_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every function's required stage settings, as the deploy side sets them; cached settings reset."""
    for name, value in STAGE_ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    lambda_env.reset()
    yield
    lambda_env.reset()


@pytest.fixture
def dynamodb_requests() -> contextlib.AbstractContextManager[Any]:
    """Each moto DynamoDB request atomic, as DynamoDB's are: the store's races are real races."""
    return atomic_requests()


@pytest.fixture
def table_name(ddb_client: Any) -> str:
    create_sessions_table(ddb_client, DEFAULT_TABLE_NAME)
    return DEFAULT_TABLE_NAME


@pytest.fixture
def sleeps() -> list[float]:
    """Every delay the store asked to sleep (the store never really sleeps in tests)."""
    return []


@pytest.fixture
def make_store(
    ddb_client: Any, table_name: str, clock: FakeClock, sleeps: list[float]
) -> Callable[..., DynamoSessionStore]:
    """Factory: a store on the moto table with the fake clock; keywords override defaults."""

    def make(**overrides: Any) -> DynamoSessionStore:
        options: dict[str, Any] = {
            "client": ddb_client,
            "clock": clock,
            "sleep": sleeps.append,
            "rand": lambda: 1.0,  # jitter at its ceiling: delays are the exact backoff caps
        }
        options.update(overrides)
        return DynamoSessionStore(table_name, **options)

    return make


@pytest.fixture
def store(make_store: Callable[..., DynamoSessionStore]) -> DynamoSessionStore:
    return make_store()
