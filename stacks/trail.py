"""The queryable trail: Glue tables over what the delivery streams write, an Athena workgroup, saved queries.

The tables describe the streams' output (prefix, date partitions, the router's fields), so they
live beside the streams in the Events stack and change in the same deploy as the router.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from aws_cdk import Size
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from constructs_lib import AthenaWorkgroup, CatalogDatabase, Column, JsonTable, Partition
from contracts import trail
from stacks.config import StageConfig

#: The years the date partitions are projected over: the first year the app wrote a trail, and
#: far enough ahead that the projection never runs out under the longest retention (10 years).
FIRST_YEAR = 2026
LAST_YEAR = 2075

AUDIT_TABLE = "audit"
ANALYTICS_TABLE = "analytics"


def _sql(template: str, table: str) -> str:
    """A query of ``table`` (a qualified name this module builds from the stage's names, never input)."""
    return template.replace("{table}", table)


def session_history(audit: str) -> str:
    """A session's full change history, oldest first, each change once (``?``: the session id)."""
    return _sql(
        """-- Every change of one session's items, in the order DynamoDB made them. Firehose delivers
-- at least once, so a line may be there twice (same event_id): only the first copy is kept.
SELECT from_unixtime(approximate_time) AS changed_at,
       change,
       actor,
       item_type,
       sk,
       changed_attributes,
       old_status,
       new_status,
       old_digest,
       new_digest,
       event_id
FROM (
    SELECT *, row_number() OVER (PARTITION BY event_id ORDER BY year, month, day) AS copy
    FROM {table}
    WHERE pk = concat('SESSION#', ?)
)
WHERE copy = 1
ORDER BY length(sequence_number), sequence_number
""",
        audit,
    )


def sessions_per_day_by_status(analytics: str) -> str:
    """Sessions seen in each status, per day of one month (``?``: year, month)."""
    return _sql(
        """-- How many sessions were in each status on each day: a session counts once per status and day.
SELECT date(from_unixtime(approximate_time)) AS day_of_change,
       status,
       count(DISTINCT session_id) AS sessions
FROM {table}
WHERE item_type = 'session'
  AND status IS NOT NULL
  AND year = ?
  AND month = ?
GROUP BY 1, 2
ORDER BY 1, 2
""",
        analytics,
    )


def handoffs_per_reason(analytics: str) -> str:
    """Handoffs requested per reason in one month (``?``: year, month)."""
    return _sql(
        """-- How many handoffs customers asked for, by the reason they gave.
SELECT reason,
       count(DISTINCT handoff_id) AS handoffs
FROM {table}
WHERE item_type = 'handoff'
  AND change = 'created'
  AND year = ?
  AND month = ?
GROUP BY reason
ORDER BY handoffs DESC, reason
""",
        analytics,
    )


@dataclass(frozen=True)
class SavedQuery:
    """A named query of the trail: its construct id, its name in Athena, the table it reads, its SQL."""

    construct_id: str
    name: str
    description: str
    table: str
    sql: Callable[[str], str]


SAVED_QUERIES: tuple[SavedQuery, ...] = (
    SavedQuery(
        "SessionHistory",
        "session-change-history",
        "Every change of one session (parameter: the session id), oldest first, de-duplicated",
        AUDIT_TABLE,
        session_history,
    ),
    SavedQuery(
        "SessionsPerDayByStatus",
        "sessions-per-day-by-status",
        "Sessions seen in each status per day (parameters: year, month)",
        ANALYTICS_TABLE,
        sessions_per_day_by_status,
    ),
    SavedQuery(
        "HandoffsPerReason",
        "handoffs-per-reason",
        "Handoffs requested per reason (parameters: year, month)",
        ANALYTICS_TABLE,
        handoffs_per_reason,
    ),
)


def columns(fields: Mapping[str, tuple[str, str]]) -> list[Column]:
    return [Column(name, type_, comment) for name, (type_, comment) in fields.items()]


class SessionTrail(Construct):
    """The audit and analytics trails as Athena tables, the workgroup to query them in, the saved queries."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: StageConfig,
        audit_bucket: s3.IBucket,
        audit_prefix: str,
        analytics_bucket: s3.IBucket,
        analytics_prefix: str,
        results_bucket: s3.IBucket,
        encryption_key: kms.IKey,
    ) -> None:
        super().__init__(scope, construct_id)
        self.database = CatalogDatabase(
            self,
            "Database",
            database_name=f"mangaassist_{config.name}_trail",
            description=f"MangaAssist {config.name}: the audit and analytics lines of every table change",
        )
        days = Partition.daily(FIRST_YEAR, LAST_YEAR)
        self.audit = JsonTable(
            self,
            "AuditTable",
            database=self.database,
            table_name=AUDIT_TABLE,
            bucket=audit_bucket,
            prefix=audit_prefix,
            columns=columns(trail.AUDIT_FIELDS),
            partitions=days,
            description="One line per table change (Object Lock bucket): keys, actor, changed attributes, digests",
        )
        self.analytics = JsonTable(
            self,
            "AnalyticsTable",
            database=self.database,
            table_name=ANALYTICS_TABLE,
            bucket=analytics_bucket,
            prefix=analytics_prefix,
            columns=columns(trail.ANALYTICS_FIELDS),
            partitions=days,
            description="One line per table change: item type, states, counters and ids, no content",
        )
        self.workgroup = AthenaWorkgroup(
            self,
            "Workgroup",
            workgroup_name=f"MangaAssist-{config.name}-trail",
            results_bucket=results_bucket,
            encryption_key=encryption_key,
            results_prefix="trail/",
            bytes_scanned_cutoff=Size.mebibytes(config.trail_query_scan_limit_mb),
            recursive_delete=config.disposable,
            description=f"MangaAssist {config.name}: queries of the audit and analytics trail",
        )
        tables = {AUDIT_TABLE: self.audit, ANALYTICS_TABLE: self.analytics}
        for query in SAVED_QUERIES:
            self.workgroup.add_named_query(
                query.construct_id,
                name=query.name,
                description=query.description,
                database=self.database,
                query=query.sql(tables[query.table].qualified_name),
            )
