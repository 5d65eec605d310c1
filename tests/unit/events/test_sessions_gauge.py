"""lambdas.events.sessions_gauge: the sessions in progress, counted on the status index."""

from __future__ import annotations

from typing import Any

import pytest

from lambdas.events import sessions_gauge
from lambdas.shared.records import SessionStatus
from lambdas.shared.store import DynamoSessionStore
from tests.unit.events.handoff_queues import CONTEXT
from tests.unit.events.metric_lines import emf_lines, values

# -- sessions in progress ---------------------------------------------------------------------


def test_sessions_gauge_counts_the_sessions_in_each_status_now(
    store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given three active sessions, one handed to an agent and one that ended
    sessions = [store.sessions.create_session(f"cust-{n}") for n in range(5)]
    store.sessions.update_status(sessions[3].session_id, SessionStatus.HANDOFF)
    store.sessions.update_status(sessions[4].session_id, SessionStatus.DISCONNECTED)
    monkeypatch.setattr(sessions_gauge, "store", lambda: store)
    # When the gauge runs
    counts = sessions_gauge.handler({"detail-type": "Scheduled Event"}, CONTEXT)
    # Then it counted each status on the index and wrote one gauge each
    assert counts == {"SessionsActive": 3, "SessionsInHandoff": 1}
    (line,) = emf_lines(capsys)
    assert (values(line, "SessionsActive"), values(line, "SessionsInHandoff")) == ([3.0], [1.0])


def test_count_by_status_follows_every_page_of_the_index(store: DynamoSessionStore) -> None:
    for n in range(3):
        store.sessions.create_session(f"cust-{n}")
    calls: list[dict[str, Any]] = []
    client = store.table.client
    real = client.query

    def one_per_page(**params: Any) -> Any:
        calls.append(params)
        return real(**{**params, "Limit": 1})

    store.table.client.query = one_per_page  # type: ignore[method-assign]
    try:
        assert store.sessions.count_by_status(SessionStatus.ACTIVE) == 3
    finally:
        store.table.client.query = real  # type: ignore[method-assign]
    assert len(calls) >= 3
    assert all(c["Select"] == "COUNT" and c["IndexName"] == "StatusIndex" for c in calls)
