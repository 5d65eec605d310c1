"""lambdas.events.metrics: session and handoff metrics as EMF lines, the sessions-in-progress gauge."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lambdas.events import metrics
from tests.unit.events.handoff_queues import CONTEXT


def bus_event(detail_type: str, detail: dict[str, Any]) -> dict[str, Any]:
    return {
        "version": "0",
        "id": "e-1",
        "detail-type": detail_type,
        "source": "mangaassist.sessions",
        "account": "123456789012",
        "time": "2026-01-01T00:00:00Z",
        "region": "us-east-1",
        "resources": [],
        "detail": detail,
    }


def emf_lines(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]


def dimension_sets(line: dict[str, Any]) -> list[list[str]]:
    return [sorted(d) for d in line["_aws"]["CloudWatchMetrics"][0]["Dimensions"]]


def values(line: dict[str, Any], name: str) -> list[float]:
    value = line[name]
    return value if isinstance(value, list) else [value]


# -- sessions started -------------------------------------------------------------------------


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
    event = bus_event("SessionStatusChanged", {"session_id": "s", "old_status": "none", "new_status": "active"})
    assert metrics.handler(event, CONTEXT) == {"metric": "SessionsStarted"}
    emf = emf_lines(capsys)
    assert len(emf) == 1
    assert values(emf[0], "SessionsStarted") == [1.0]
