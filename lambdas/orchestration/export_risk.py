"""How risky an export request is: a small score the export workflow compares with the stage's threshold.

The score is the sum of three parts, each from facts the workflow gathered just before with direct
DynamoDB calls (``DescribeTable``, and a ``Scan`` of one item of the customer index):

=========  ==============================================================  ===========================
part       facts                                                           points
=========  ==============================================================  ===========================
scope      records that belong to a customer (the customer index): none    0 none, 2 some,
           is exact (the one-item Scan), how many is DescribeTable's count  4 from 1,000
size       the table's size (DescribeTable ``TableSizeBytes``)             0 below 100 MiB, 1 below
                                                                           10 GiB, 2 from 10 GiB
requester  who asks: the admin API's caller with a verified e-mail         0 admin with e-mail,
           (``role`` and ``requested_by_email`` of the execution input)    1 admin without,
                                                                           4 anyone else
=========  ==============================================================  ===========================

So a score runs from 0 to :data:`MAX_SCORE`. The stage's ``export_review_min_score`` decides: a
score at or above it waits for the human approval gate, a lower one is recorded as an automatic
approval (with :func:`Assessment.reason`) and exported. A threshold of 0 sends every export to a
person. A start outside the admin API (console, CLI: no ``role``) scores 4 on its own, above
every stage's threshold unless a stage raises it past 4 on purpose.

DynamoDB refreshes DescribeTable's counts about every six hours, so they lag growth: that is why
"no customer records" comes from the Scan, which is exact, and the counts only pick the band.

The handler makes no AWS call: it reads the facts from its event and returns the score, its
parts, the reason, and the decision's time and record expiry as DynamoDB number strings for the
workflow's direct ``PutItem``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Final

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext

from contracts.workflows import EXPORT_RISK_MAX_SCORE
from lambdas.shared.logs import masked_formatter
from lambdas.shared.tracing import tracer

logger = Logger(logger_formatter=masked_formatter())

MAX_SCORE: Final = EXPORT_RISK_MAX_SCORE
MIB: Final = 1024 * 1024
#: Customer records from which the scope counts as wide.
MANY_CUSTOMER_RECORDS: Final = 1000
#: Table sizes (bytes) at which the size part is 1 and 2.
LARGE_TABLE_BYTES: Final = 100 * MIB
HUGE_TABLE_BYTES: Final = 10 * 1024 * MIB
ADMIN: Final = "admin"


class InvalidFacts(ValueError):
    """The workflow handed over facts that are not DescribeTable's and the Scan's; the execution fails."""


@dataclass(frozen=True)
class ExportFacts:
    """What the score reads: the table's counts and who asks."""

    customer_records_present: bool
    customer_records: int
    table_bytes: int
    role: str | None
    has_verified_email: bool


@dataclass(frozen=True)
class Assessment:
    scope: int
    size: int
    requester: int
    facts: ExportFacts

    @property
    def score(self) -> int:
        return self.scope + self.size + self.requester

    def reason(self) -> str:
        """The score and each part with the fact behind it, as the audit trail keeps it."""
        f = self.facts
        records = (
            "no customer records" if not f.customer_records_present else f"about {f.customer_records} customer records"
        )
        if f.role == ADMIN:
            who = "an admin with a verified e-mail" if f.has_verified_email else "an admin without a verified e-mail"
        else:
            who = f"a requester outside the admin API (role {f.role or 'none'})"
        return (
            f"risk score {self.score}: scope {self.scope} ({records}), size {self.size} "
            f"({f.table_bytes // MIB} MiB), requester {self.requester} ({who})"
        )


def score(facts: ExportFacts) -> Assessment:
    """The documented score of an export (see the module docstring)."""
    wide = facts.customer_records >= MANY_CUSTOMER_RECORDS
    scope = (4 if wide else 2) if facts.customer_records_present else 0
    size = 2 if facts.table_bytes >= HUGE_TABLE_BYTES else 1 if facts.table_bytes >= LARGE_TABLE_BYTES else 0
    requester = (0 if facts.has_verified_email else 1) if facts.role == ADMIN else 4
    return Assessment(scope=scope, size=size, requester=requester, facts=facts)


def _count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidFacts(f"{what} must be a whole number >= 0 (given {value!r})")
    return value


def facts_of(event: dict[str, Any]) -> ExportFacts:
    """The facts in the event: ``request`` (the execution input), ``table``, ``customers``, ``customer_index``."""
    request, table, customers = event.get("request"), event.get("table"), event.get("customers")
    if not isinstance(request, dict) or not isinstance(table, dict) or not isinstance(customers, dict):
        raise InvalidFacts("the event needs the objects request, table and customers")
    index = event.get("customer_index")
    indexes = table.get("indexes") or []
    counts = [i.get("ItemCount", 0) for i in indexes if isinstance(i, dict) and i.get("IndexName") == index]
    if len(counts) != 1:
        raise InvalidFacts(f"the table describes no index {index!r}")
    email = request.get("requested_by_email")
    role = request.get("role")
    return ExportFacts(
        customer_records_present=_count(customers.get("count"), "customers.count") > 0,
        customer_records=_count(counts[0], "the index's ItemCount"),
        table_bytes=_count(table.get("bytes"), "table.bytes"),
        role=role if isinstance(role, str) and role else None,
        has_verified_email=isinstance(email, str) and "@" in email,
    )


@logger.inject_lambda_context
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Score the request; the decision itself is the workflow's Choice against the stage's threshold."""
    assessment = score(facts_of(event))
    record_days = _count(event.get("record_days"), "record_days")
    now = int(time.time())
    logger.info("export scored", extra={"score": assessment.score, "reason": assessment.reason()})
    return {
        "score": assessment.score,
        "score_text": str(assessment.score),
        "parts": {"scope": assessment.scope, "size": assessment.size, "requester": assessment.requester},
        "reason": assessment.reason(),
        "decided_at": str(now),
        "expires_at": str(now + record_days * 86400),
    }
