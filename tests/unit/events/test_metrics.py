"""lambdas.events.metrics: session status changes become one EMF metric each."""

from __future__ import annotations

import json

import pytest

from lambdas.events import metrics
from tests.unit.events.handoff_queues import CONTEXT


@pytest.mark.parametrize(
    ("detail", "expected"),
    [
        ({"old_status": "none", "new_status": "active"}, "SessionsStarted"),
        ({"old_status": "handoff", "new_status": "active"}, "SessionsResumed"),
        ({"old_status": "active", "new_status": "handoff"}, None),
    ],
)
def test_metric_counts_new_sessions_apart_from_resumed_ones(detail: dict[str, str], expected: str | None) -> None:
    assert metrics.metric_name(detail) == expected


def test_metrics_handler_emits_one_emf_metric(capsys: pytest.CaptureFixture[str]) -> None:
    event = {
        "version": "0",
        "id": "e-1",
        "detail-type": "SessionStatusChanged",
        "source": "mangaassist.sessions",
        "account": "123456789012",
        "time": "2026-01-01T00:00:00Z",
        "region": "us-east-1",
        "resources": [],
        "detail": {"session_id": "s", "old_status": "none", "new_status": "active"},
    }
    assert metrics.handler(event, CONTEXT) == {"metric": "SessionsStarted"}
    emf = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    assert len(emf) == 1
    assert emf[0]["SessionsStarted"] == [1.0] or emf[0]["SessionsStarted"] == 1.0
