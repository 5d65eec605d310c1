"""lambdas.events.handoff_metrics: each change of a handoff -> its counts and times, by service and by kind."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lambdas.events import handoff_metrics as metrics
from lambdas.shared import env
from tests.unit.events.handoff_queues import CONTEXT
from tests.unit.events.metric_lines import bus_event, dimension_sets, emf_lines, values

T0 = 1_767_225_600


# -- handoff metrics --------------------------------------------------------------------------


def handoff(changes: list[str], **stamps: int) -> dict[str, Any]:
    return {
        "session_id": "sess-1",
        "handoff_id": "h-1",
        "changes": changes,
        "reason": "billing",
        "priority": "high",
        "requested_at": T0,
        **stamps,
    }


def measured(detail: dict[str, Any]) -> list[tuple[str, str, float]]:
    return [(m.name, str(m.unit.value), m.value) for m in metrics.handoff_measures(detail)]


@pytest.mark.parametrize(
    ("detail", "expected"),
    [
        (handoff(["requested"]), [("HandoffsRequested", "Count", 1.0)]),
        (
            handoff(["assigned"], assigned_at=T0 + 95),
            [("HandoffsAssigned", "Count", 1.0), ("TimeToAssignment", "Seconds", 95.0)],
        ),
        (
            handoff(["requested", "assigned"], assigned_at=T0),
            [
                ("HandoffsRequested", "Count", 1.0),
                ("HandoffsAssigned", "Count", 1.0),
                ("TimeToAssignment", "Seconds", 0.0),
            ],
        ),
        (handoff(["escalated"]), [("HandoffsEscalated", "Count", 1.0)]),
        (
            handoff(["first_reply"], assigned_at=T0 + 95, first_reply_at=T0 + 130),
            [("TimeToFirstReply", "Seconds", 35.0)],
        ),
        (
            handoff(["completed"], assigned_at=T0 + 95, closed_at=T0 + 700),
            [("HandoffsCompleted", "Count", 1.0), ("HandoffDuration", "Seconds", 700.0)],
        ),
        (handoff(["failed"], closed_at=T0 + 1200), [("HandoffsFailed", "Count", 1.0)]),
    ],
)
def test_each_change_of_a_handoff_adds_its_count_and_the_time_it_ends(
    detail: dict[str, Any], expected: list[tuple[str, str, float]]
) -> None:
    assert measured(detail) == expected


def test_a_time_without_both_ends_or_running_backwards_is_not_measured() -> None:
    assert measured(handoff(["assigned"])) == [("HandoffsAssigned", "Count", 1.0)]
    assert measured(handoff(["assigned"], assigned_at=T0 - 5)) == [("HandoffsAssigned", "Count", 1.0)]
    assert measured(handoff(["first_reply"], first_reply_at=T0 + 9)) == []


@pytest.mark.parametrize(
    ("detail", "message"),
    [
        ({"reason": "billing"}, "changes must be a non-empty list"),
        (handoff([]), "changes must be a non-empty list"),
        (handoff(["reopened"]), "unknown change 'reopened'"),
        (handoff(["assigned"], assigned_at="soon"), "assigned_at must be epoch seconds"),  # type: ignore[arg-type]
    ],
)
def test_fails_on_a_detail_the_metrics_cannot_read(detail: dict[str, Any], message: str) -> None:
    with pytest.raises(metrics.InvalidHandoffEvent, match=message):
        metrics.handoff_measures(detail)


@pytest.mark.parametrize(
    ("reason", "priority", "expected"),
    [
        ("billing", "high", {"reason": "billing", "priority": "high"}),
        ("made_up_reason_42", "high", {"reason": "other", "priority": "high"}),
        ("billing", "whenever", {"reason": "billing", "priority": "other"}),
        (None, None, {"reason": "other", "priority": "other"}),
    ],
)
def test_dimensions_are_bounded_so_callers_cannot_mint_metrics(
    reason: str | None, priority: str | None, expected: dict[str, str]
) -> None:
    detail = {"reason": reason, "priority": priority}
    assert metrics.handoff_dimensions(detail, frozenset({"billing", "general"})) == expected


def test_handoff_handler_writes_each_metric_by_service_and_by_reason_and_priority(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a stage whose metric reasons include billing
    monkeypatch.setenv("METRIC_REASONS", "general, billing")
    env.reset()
    detail = handoff(["completed"], assigned_at=T0 + 60, closed_at=T0 + 600)
    # When the function gets the HandoffChanged event
    result = metrics.handler(bus_event("HandoffChanged", detail), CONTEXT)
    env.reset()
    # Then it measured the completion and the duration
    assert result == {"metrics": ["HandoffsCompleted", "HandoffDuration"], "reason": "billing", "priority": "high"}
    # And wrote two EMF lines: one by reason and priority, one by service alone (what the alarms watch)
    by_dims = {tuple(dimension_sets(line)[0]): line for line in emf_lines(capsys)}
    assert set(by_dims) == {("priority", "reason", "service"), ("service",)}
    dimensioned = by_dims[("priority", "reason", "service")]
    assert (dimensioned["reason"], dimensioned["priority"]) == ("billing", "high")
    for line in by_dims.values():
        assert values(line, "HandoffsCompleted") == [1.0]
        assert values(line, "HandoffDuration") == [600.0]
        # And no session, handoff or customer id is a dimension or a value
        assert "sess-1" not in json.dumps(line)
        assert "h-1" not in json.dumps(line)


def test_handoff_handler_fails_on_an_unreadable_event_so_it_is_retried_then_kept() -> None:
    with pytest.raises(metrics.InvalidHandoffEvent):
        metrics.handler(bus_event("HandoffChanged", {"session_id": "s"}), CONTEXT)
