"""Prop checks of the approval gate, recorded through CDK's validation (so errors name the gate's path)."""

from __future__ import annotations

import re

from aws_cdk import Duration
from aws_cdk import aws_dynamodb as dynamodb

from constructs_lib.validation import PropErrors, is_unresolved

_MAX_TIMEOUT = Duration.days(365)
_OUTCOME_PATH = re.compile(r"^\$\.[A-Za-z_][A-Za-z0-9_]*$")


def checked_wait(errors: PropErrors, review_ttl_days: int, timeout: Duration | None) -> tuple[int, Duration, int]:
    """The record TTL in days, the wait and the wait in seconds; invalid values recorded, defaults used."""
    ttl_ok = errors.check(
        not isinstance(review_ttl_days, bool) and isinstance(review_ttl_days, int) and 1 <= review_ttl_days <= 365,
        f"review_ttl_days must be an int in 1..365 (given {review_ttl_days!r})",
    )
    days = review_ttl_days if ttl_ok else 7
    wait = timeout or Duration.days(days)
    wait_seconds = int(wait.to_milliseconds() // 1000)
    timeout_ok = errors.check(
        1 <= wait_seconds <= _MAX_TIMEOUT.to_seconds() and not wait.to_milliseconds() % 1000,
        f"timeout must be whole seconds in 1 s..365 days (given {wait.to_milliseconds()} ms)",
    )
    errors.check(
        not (ttl_ok and timeout_ok) or wait_seconds <= days * 86400,
        f"timeout ({wait_seconds} s) must not exceed review_ttl_days ({days} d): "
        "TTL would delete a review that can still be decided; raise review_ttl_days",
    )
    if not timeout_ok:  # reported above; build on with the default so synthesis can report it
        wait, wait_seconds = Duration.days(days), days * 86400
    return days, wait, wait_seconds


def check_texts(errors: PropErrors, *, subject: str, outcome_path: str, link_base_url: object, key_prefix: str) -> None:
    """The gate's text props: subject, outcome path, link base URL, key prefix."""
    errors.check(
        is_unresolved(subject) or (bool(subject.strip()) and len(subject) <= 100),
        f"subject must be 1..100 characters (given {len(subject)})",
    )
    errors.check(
        bool(_OUTCOME_PATH.fullmatch(outcome_path)),
        f"outcome_path must be a top-level path like '$.approval' (given {outcome_path!r})",
    )
    literal_url = isinstance(link_base_url, str) and not is_unresolved(link_base_url)
    errors.check(
        not literal_url or str(link_base_url).startswith("https://"),
        f"link_base_url must be an https:// URL (given {link_base_url!r})",
    )
    errors.check(bool(key_prefix), "key_prefix must not be empty (given ''): e.g. 'REVIEW#'")


def key_layout(
    errors: PropErrors, table: dynamodb.ITable, partition_key: str | None, sort_key: str | None
) -> tuple[str, str | None]:
    """The table's key attribute names: given, or read from a table defined in the app."""
    if not isinstance(table, dynamodb.Table):
        errors.check(
            partition_key is not None,
            "partition_key is required for an imported table (given None): name its partition key attribute",
        )
        return partition_key or "PK", sort_key
    schema = table.schema_v2()
    own_partition = schema.partition_keys[0].name
    own_sort = schema.sort_keys[0].name if schema.sort_keys else None
    errors.check(
        partition_key in (None, own_partition),
        f"partition_key must be the table's partition key {own_partition!r} (given {partition_key!r})",
    )
    errors.check(
        sort_key in (None, own_sort),
        f"sort_key must be the table's sort key {own_sort!r} (given {sort_key!r})",
    )
    return own_partition, own_sort
