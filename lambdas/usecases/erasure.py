"""Erasure of one customer's data: which items and export rows are theirs, and the table's part of the erasure.

A customer's data in the table is found from two starting points: their sessions (the
``CUSTOMER_SESSIONS`` index of session META items) and one Scan that finds everything else that
names them (connections, rate buckets and connection slots, daily token budgets, records of
messages sent with a ``client_message_id``, idempotency records whose stored answer holds their id,
inbox items of their sessions' handoffs). The Scan reads the whole table once per
erasure; an erasure is rare and the Scan is paged, so it costs read units, never correctness.

A running handoff ends first, as when the customer deletes the session (its agent released, a
waiting wait stopped), so no agent is left serving a conversation that no longer exists.
Everything here is idempotent: a second run finds nothing and counts zeros.
"""

from __future__ import annotations

import base64
import json
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final

from lambdas.shared import keys
from lambdas.shared.records import SessionStatus
from lambdas.shared.schema import PARTITION_KEY, SORT_KEY
from lambdas.shared.serialize import unmarshal_item
from lambdas.shared.store import DynamoSessionStore
from lambdas.usecases import customer_leaves

#: What the receipt counts, in its order.
KINDS: Final = (
    "sessions",
    "turns",
    "summaries",
    "handoffs",
    "inbox_items",
    "connections",
    "rate_buckets",
    "token_budgets",
    "sent_messages",
    "idempotency_records",
    "other_items",
)
#: Who ends a running handoff of an erased customer (the handoff's ``closed_by``).
ERASED_BY: Final = "erasure"
#: Partition key prefix of a connection's rate bucket (``LIMIT#conn#<connection id>``).
CONNECTION_BUCKET_PREFIX: Final = keys.rate_bucket_key("conn", "")[PARTITION_KEY]
#: Sessions read per index page.
SESSION_PAGE: Final = 100


def execution_name(customer_id: str, request_key: str) -> str:
    """The erasure's execution name: the same customer and request key always name the same execution."""
    return f"erasure-{keys.customer_pseudonym(customer_id + chr(10) + request_key)[:56]}"


def customer_sessions(store: DynamoSessionStore, customer_id: str) -> list[str]:
    """Every session id of the customer (every status), from the customer index."""
    found: list[str] = []
    cursor: str | None = None
    while True:
        page = store.sessions.list_customer_sessions(customer_id, limit=SESSION_PAGE, cursor=cursor)
        found.extend(session.session_id for session in page.items)
        if page.next_cursor is None:
            return list(dict.fromkeys(found))
        cursor = page.next_cursor


def kind_of(item: Mapping[str, Any]) -> str:
    """Which receipt count an item of the customer's falls under (see :data:`KINDS`)."""
    pk, sk = str(item.get(PARTITION_KEY, "")), str(item.get(SORT_KEY, ""))
    if pk.startswith(keys.SESSION_PREFIX):
        by_prefix = {
            keys.META_SK: "sessions",
            keys.TURN_PREFIX: "turns",
            keys.SUMMARY_PREFIX: "summaries",
            keys.HANDOFF_PREFIX: "handoffs",
        }
        return next((kind for prefix, kind in by_prefix.items() if sk.startswith(prefix)), "other_items")
    if pk.startswith(keys.AGENT_PREFIX) and sk.startswith((keys.INBOX_PREFIX, keys.QUEUE_PREFIX)):
        return "inbox_items"
    if pk.startswith(keys.CONNECTION_PREFIX):
        return "connections"
    if pk.startswith(keys.LIMIT_PREFIX):
        if sk.startswith(keys.TOKENS_PREFIX):
            return "token_budgets"
        return "sent_messages" if sk.startswith(keys.SENT_PREFIX) else "rate_buckets"
    if "idempotency_status" in item:
        return "idempotency_records"
    return "other_items"


def _texts(value: Any) -> Iterator[str]:
    """Every string inside an attribute value (lists, maps and sets included)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for inner in value.values():
            yield from _texts(inner)
    elif isinstance(value, (list, set, frozenset, tuple)):
        for inner in value:
            yield from _texts(inner)


def belongs(item: Mapping[str, Any], customer_id: str, session_ids: frozenset[str]) -> bool:
    """True when ``item`` is the customer's: theirs by key, by session, or by any text holding their id."""
    pk = str(item.get(PARTITION_KEY, ""))
    if pk.startswith(keys.ERASURE_PREFIX):
        return False  # the erasure's own record names the customer only by pseudonym
    if item.get("customer_id") == customer_id or item.get("session_id") in session_ids:
        return True
    if pk.startswith(keys.SESSION_PREFIX) and pk[len(keys.SESSION_PREFIX) :] in session_ids:
        return True
    return any(customer_id in text for text in _texts(item))


def _end_running_handoffs(
    store: DynamoSessionStore, session_ids: Iterable[str], stop_wait: customer_leaves.StopWait
) -> int:
    ended = 0
    for session_id in session_ids:
        session = store.sessions.get_session(session_id)
        if session is None or session.status not in (SessionStatus.ACTIVE, SessionStatus.HANDOFF):
            continue
        if customer_leaves.delete_during_handoff(store, session, deleted_by=ERASED_BY, stop_wait=stop_wait):
            ended += 1
    return ended


def _scan(store: DynamoSessionStore) -> Iterator[dict[str, Any]]:
    """Every item of the table, page by page (consistent reads: a write just made is seen)."""
    paginator = store.table.client.get_paginator("scan")
    for page in paginator.paginate(TableName=store.table.table_name, ConsistentRead=True):
        for raw in page.get("Items", []):
            yield unmarshal_item(raw)


def erase_table(store: DynamoSessionStore, customer_id: str, *, stop_wait: customer_leaves.StopWait) -> dict[str, int]:
    """End the customer's running handoffs, then delete every item that is theirs; the counts per kind."""
    session_ids = frozenset(customer_sessions(store, customer_id))
    ended = _end_running_handoffs(store, sorted(session_ids), stop_wait)
    counts: Counter[str] = Counter(dict.fromkeys(KINDS, 0))
    doomed: list[keys.Key] = []
    # A connection's rate bucket names only the connection: it is hers when the connection is.
    connections: set[str] = set()
    connection_buckets: dict[str, dict[str, Any]] = {}
    for item in _scan(store):
        pk = str(item[PARTITION_KEY])
        if pk.startswith(CONNECTION_BUCKET_PREFIX):
            connection_buckets[pk[len(CONNECTION_BUCKET_PREFIX) :]] = item
        elif belongs(item, customer_id, session_ids):
            counts[kind_of(item)] += 1
            doomed.append(keys.key(pk, str(item[SORT_KEY])))
            if isinstance(item.get("connection_id"), str):
                connections.add(str(item["connection_id"]))
    for connection_id, bucket in connection_buckets.items():
        if connection_id in connections or belongs(bucket, customer_id, session_ids):
            counts["rate_buckets"] += 1
            doomed.append(keys.key(str(bucket[PARTITION_KEY]), str(bucket[SORT_KEY])))
    store.table.batch_delete(doomed)
    return {**{kind: counts[kind] for kind in KINDS}, "handoffs_ended": ended}


def _binary_decoded(value: Any) -> Any:
    """An export's DynamoDB JSON with its binary values (base64 text there) as bytes, as the SDK gives them."""
    if isinstance(value, list):
        return [_binary_decoded(inner) for inner in value]
    if not isinstance(value, dict):
        return value
    if set(value) == {"B"} and isinstance(value["B"], str):
        return {"B": base64.b64decode(value["B"])}
    if set(value) == {"BS"}:
        return {"BS": [base64.b64decode(inner) if isinstance(inner, str) else inner for inner in value["BS"]]}
    return {name: _binary_decoded(inner) for name, inner in value.items()}


def export_rows_without(body: str, customer_id: str) -> tuple[str, int]:
    """A DynamoDB JSON export file (one ``{"Item": ...}`` per line) without the customer's rows; how many went.

    A session's rows are the customer's when the file's META row of that session names them, so
    turns and summaries go with the session even though they do not carry the customer id.
    """
    rows = [
        (line, unmarshal_item(_binary_decoded(json.loads(line)["Item"]))) for line in body.splitlines() if line.strip()
    ]
    sessions = frozenset(
        str(item[PARTITION_KEY])[len(keys.SESSION_PREFIX) :]
        for _, item in rows
        if str(item.get(PARTITION_KEY, "")).startswith(keys.SESSION_PREFIX) and item.get("customer_id") == customer_id
    )
    kept = [line for line, item in rows if not belongs(item, customer_id, sessions)]
    return "".join(f"{line}\n" for line in kept), len(rows) - len(kept)
