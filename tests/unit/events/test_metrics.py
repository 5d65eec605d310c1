"""lambdas.events.metrics: session and handoff metrics as EMF lines, the sessions-in-progress gauge."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lambdas.events import metrics
from lambdas.shared import env
from lambdas.shared.records import SessionStatus
from lambdas.shared.store import DynamoSessionStore
from tests.unit.events.handoff_queues import CONTEXT

T0 = 1_767_225_600


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
    result = metrics.handoff_handler(bus_event("HandoffChanged", detail), CONTEXT)
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
        metrics.handoff_handler(bus_event("HandoffChanged", {"session_id": "s"}), CONTEXT)


# -- sessions in progress ---------------------------------------------------------------------


def test_sessions_gauge_counts_the_sessions_in_each_status_now(
    store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given three active sessions, one handed to an agent and one that ended
    sessions = [store.sessions.create_session(f"cust-{n}") for n in range(5)]
    store.sessions.update_status(sessions[3].session_id, SessionStatus.HANDOFF)
    store.sessions.update_status(sessions[4].session_id, SessionStatus.DISCONNECTED)
    monkeypatch.setattr(metrics, "store", lambda: store)
    # When the gauge runs
    counts = metrics.sessions_gauge({"detail-type": "Scheduled Event"}, CONTEXT)
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
