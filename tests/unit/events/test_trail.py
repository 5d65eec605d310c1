"""The trail's columns (lambdas/events/trail.py) are exactly the fields the router writes, with types that hold them.

Every kind of change of every item type is classified as the router classifies it; each analytics
and audit line must name only columns of its table, with values the column's Hive type reads, and
every column must be written by some line (a column nothing writes is a stale one).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecord

from embedded.events import StreamRecords
from embedded.services.athena import fits
from lambdas.events import routing, trail
from lambdas.shared.pseudonyms import Pseudonymiser

#: The pseudonymiser the lines are classified with (the router's is keyed with the stage's secret).
PSEUDONYMS = Pseudonymiser(b"a test key of thirty-two bytes!!")

#: One item of each type the router knows, holding every attribute analytics may copy.
ITEMS: dict[str, dict[str, Any]] = {
    "session": {
        "PK": "SESSION#s1",
        "SK": "META",
        "status": "active",
        "turn_count": Decimal(3),
        "created_at": Decimal(1_767_225_600),
        "updated_at": Decimal(1_767_225_660),
        "customer_id": "c1",
    },
    "turn": {
        "PK": "SESSION#s1",
        "SK": "TURN#0000000003",
        "turn_number": Decimal(3),
        "role": "assistant",
        "created_at": Decimal(1_767_225_660),
        "content": "text the trail never holds",
    },
    "summary": {
        "PK": "SESSION#s1",
        "SK": "SUMMARY#0000000001",
        "summary_number": Decimal(1),
        "window_start": Decimal(1),
        "window_end": Decimal(10),
        "turn_count_at_summary": Decimal(10),
        "summary_text": "text the trail never holds",
    },
    "handoff": {
        "PK": "SESSION#s1",
        "SK": "HANDOFF#h1",
        "handoff_id": "h1",
        "reason": "billing",
        "priority": "high",
        "status": "queued",
        "agent_id": "a1",
    },
    "review": {"PK": "REVIEW#r1", "SK": "META", "status": "pending"},
    "automatic approval": {
        "PK": "REVIEW#export-e1",
        "SK": "META",
        "status": "approved",
        "decided_by": "automatic",
        "decision_reason": "risk score 0: scope 0 (no customer records), size 0 (0 MiB), requester 0 (an admin)",
        "risk_score": Decimal(0),
        "review_threshold": Decimal(2),
    },
    "agent": {"PK": "AGENT#a1", "SK": "META", "status": "available", "is_manager": True},
    "connection": {"PK": "CONN#k1", "SK": "META", "connected_at": Decimal(1_767_225_600)},
    "other": {"PK": "LIMIT#customer#c1", "SK": "RATE", "tokens": Decimal("2.5")},
}


def _lines() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(what changed, analytics line, audit line) for creation, status change, deletion and expiry of each item."""
    records = StreamRecords()
    found = []
    for kind, item in ITEMS.items():
        changed = {**item, "status": "closed"} if "status" in item else {**item, "touched": True}
        for label, record in (
            ("created", records.insert(item)),
            ("updated", records.modify(item, changed)),
            ("deleted", records.remove(changed)),
            ("expired", records.remove(changed, ttl=True)),
        ):
            actions = routing.classify(
                DynamoDBRecord(record), summary_interval=10, bus_name="bus", pseudonymise=PSEUDONYMS
            )
            found.append((f"{kind} {label}", actions.analytics, actions.audit))
    return found


LINES = _lines()


@pytest.mark.parametrize(("change", "analytics", "audit"), LINES, ids=[c for c, _, _ in LINES])
def test_every_field_of_every_line_is_a_column_of_a_type_that_holds_it(
    change: str, analytics: dict[str, Any], audit: dict[str, Any]
) -> None:
    for line, fields in ((analytics, trail.ANALYTICS_FIELDS), (audit, trail.AUDIT_FIELDS)):
        unknown = sorted(set(line) - set(fields))
        assert not unknown, f"{change}: the router writes fields the table lacks: {unknown}"
        wrong = {name: value for name, value in line.items() if not fits(value, fields[name][0])}
        assert not wrong, f"{change}: values the columns' types cannot hold: {wrong}"


def test_every_column_is_written_by_some_line() -> None:
    written_analytics = {name for _, line, _ in LINES for name in line}
    written_audit = {name for _, _, line in LINES for name in line}

    assert sorted(set(trail.ANALYTICS_FIELDS) - written_analytics) == []
    assert sorted(set(trail.AUDIT_FIELDS) - written_audit) == []


def test_no_line_holds_message_content() -> None:
    for change, analytics, audit in LINES:
        text = repr((analytics, audit))
        assert "never holds" not in text, change


def test_a_customers_analytics_lines_carry_the_pseudonym_and_never_the_id() -> None:
    sessions = [analytics for change, analytics, _ in LINES if change.startswith("session ")]
    assert [line["customer_pseudonym"] for line in sessions] == [PSEUDONYMS("c1")] * 4
    assert all("c1" not in analytics.values() for _, analytics, _ in LINES)
    # an item without a customer has no pseudonym
    assert all("customer_pseudonym" not in a for change, a, _ in LINES if not change.startswith("session "))


def test_an_automatic_approval_is_audited_with_who_decided_and_why_and_other_items_are_not() -> None:
    audits = {change: audit for change, _, audit in LINES}
    created = audits["automatic approval created"]
    assert (created["new_status"], created["decided_by"], created["risk_score"], created["review_threshold"]) == (
        "approved",
        "automatic",
        0,
        2,
    )
    assert created["decision_reason"].startswith("risk score 0: scope 0 (no customer records)")
    # the decision's facts are a review's only: no other item's line carries them
    others = [c for c, line in audits.items() if not c.startswith("automatic") and "decided_by" in line]
    assert others == []
