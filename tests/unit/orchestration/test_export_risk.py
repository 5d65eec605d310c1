"""lambdas.orchestration.export_risk: the export risk score, its parts and the facts it reads."""

from __future__ import annotations

from typing import Any

import pytest

from embedded.events import lambda_context
from lambdas.orchestration.export_risk import ExportFacts, InvalidFacts, facts_of, handler, score

MIB = 1024 * 1024


def facts(
    present: bool = True, records: int = 10, size: int = 0, role: str | None = "admin", email: bool = True
) -> ExportFacts:
    return ExportFacts(
        customer_records_present=present,
        customer_records=records,
        table_bytes=size,
        role=role,
        has_verified_email=email,
    )


@pytest.mark.parametrize(
    ("given", "parts"),
    [
        (facts(present=False, records=0), (0, 0, 0)),
        # DescribeTable's count lags: a stale 0 with records present is still "some"
        (facts(present=True, records=0), (2, 0, 0)),
        (facts(records=999), (2, 0, 0)),
        (facts(records=1000), (4, 0, 0)),
        (facts(size=100 * MIB - 1), (2, 0, 0)),
        (facts(size=100 * MIB), (2, 1, 0)),
        (facts(size=10 * 1024 * MIB), (2, 2, 0)),
        (facts(email=False), (2, 0, 1)),
        (facts(role=None), (2, 0, 4)),
        (facts(role="agent", email=False), (2, 0, 4)),
        (facts(records=5000, size=20 * 1024 * MIB, role=None), (4, 2, 4)),
    ],
)
def test_the_score_is_scope_plus_size_plus_requester(given: ExportFacts, parts: tuple[int, int, int]) -> None:
    assessment = score(given)
    assert (assessment.scope, assessment.size, assessment.requester) == parts
    assert assessment.score == sum(parts)


def test_the_highest_score_is_ten_and_the_lowest_zero() -> None:
    assert score(facts(records=10**6, size=10**13, role=None, email=False)).score == 10
    assert score(facts(present=False, records=0)).score == 0


def test_the_reason_names_the_score_and_the_fact_behind_each_part() -> None:
    reason = score(facts(present=False, records=0, size=3 * MIB)).reason()
    assert reason == (
        "risk score 0: scope 0 (no customer records), size 0 (3 MiB), requester 0 (an admin with a verified e-mail)"
    )
    outsider = score(facts(records=42, role=None)).reason()
    assert "scope 2 (about 42 customer records)" in outsider
    assert "requester 4 (a requester outside the admin API (role none))" in outsider


def event(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "request": {"requested_by": "sub-1", "reason": "audit", "role": "admin", "requested_by_email": "a@example.com"},
        "table": {
            "bytes": 2048,
            "indexes": [{"IndexName": "GSI1", "ItemCount": 7}, {"IndexName": "X", "ItemCount": 1}],
        },
        "customers": {"count": 1},
        "customer_index": "GSI1",
        "record_days": 7,
    }
    return {**base, **changes}


def test_facts_are_read_from_describe_table_the_scan_and_the_execution_input() -> None:
    assert facts_of(event()) == facts(present=True, records=7, size=2048, role="admin", email=True)
    # an execution started outside the API has no role and no e-mail (an empty one is none too)
    assert facts_of(event(request={"requested_by": "x", "requested_by_email": ""})) == facts(
        records=7, size=2048, role=None, email=False
    )


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"customers": None}, "request, table and customers"),
        ({"customer_index": "GSI9"}, "no index 'GSI9'"),
        ({"customers": {"count": -1}}, "customers.count must be a whole number"),
        ({"table": {"bytes": "big", "indexes": [{"IndexName": "GSI1", "ItemCount": 1}]}}, "table.bytes"),
    ],
)
def test_fails_on_facts_that_are_not_what_the_workflow_gathers(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidFacts, match=message):
        facts_of(event(**changes))


def test_handler_returns_the_score_the_reason_and_the_record_times_as_number_strings() -> None:
    result = handler(event(record_days=2), lambda_context("AssessExportRisk"))
    assert (result["score"], result["score_text"]) == (2, "2")
    assert result["parts"] == {"scope": 2, "size": 0, "requester": 0}
    assert result["reason"].startswith("risk score 2: scope 2 (about 7 customer records)")
    assert int(result["expires_at"]) - int(result["decided_at"]) == 2 * 86400
