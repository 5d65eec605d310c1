"""lambdas.events.metrics: session and handoff metrics as EMF lines, the sessions-in-progress gauge."""

from __future__ import annotations

import pytest

from lambdas.events import metrics
from tests.unit.events.handoff_queues import CONTEXT
from tests.unit.events.metric_lines import bus_event, emf_lines, values

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
