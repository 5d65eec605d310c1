"""The handoff queue consumers environment: the table, wired as their settings read it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lambdas.events import customer_notifier, dashboard, escalation
from lambdas.shared import env
from lambdas.shared.store import DynamoSessionStore


@pytest.fixture
def wired(store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch) -> Iterator[DynamoSessionStore]:
    """Every consumer's store() is the moto store."""
    for module in (dashboard, escalation, customer_notifier):
        monkeypatch.setattr(module, "store", lambda: store)
    monkeypatch.setattr(customer_notifier, "configured_endpoint", lambda: None)
    yield store
    env.reset()
