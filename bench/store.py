"""Benchmark of the SessionStore on moto: DynamoDB requests and write units, against the floor.

Run with ``python -m bench.store``. Nothing is timed against a threshold; the numbers are
request counts (exact: counted by a botocore event hook) and write units. Write units come in
two flavours, because moto does not compute capacity: it reports a constant per call (PutItem
1.0, UpdateItem 0.5, BatchWriteItem 1.0, transactions nothing) whatever the item size. So the
table shows moto's figure as reported and a model of what DynamoDB on-demand would bill
(1 WRU per started KB of item written, twice that for transactions; GSI writes listed apart).
"""

from __future__ import annotations

import math
import os
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any

import boto3
from moto import mock_aws

from embedded.services.dynamodb import create_sessions_table
from lambdas.shared import keys
from lambdas.shared.records import Role, Turn
from lambdas.shared.serialize import marshal_item
from lambdas.shared.store import BATCH_SIZE, DynamoSessionStore

TABLE = "manga-assist-sessions-bench"
CHAT_TURNS = 200
DELETE_TURNS = 10_000
MESSAGE = (
    "Is the third volume of Frieren: Beyond Journey's End available in the collector's edition, "
    "and does it ship to Osaka before the weekend? I would also like to know about the box set."
)
ONE_KB = 1024
MOTO_PAGE_BYTES = 1_000_000
PAGE_BYTES = 1024 * 1024  # a Query page stops after 1 MB of data read

_CAPACITY_OPERATIONS = frozenset(
    {
        "GetItem",
        "PutItem",
        "UpdateItem",
        "DeleteItem",
        "Query",
        "BatchWriteItem",
        "TransactWriteItems",
    }
)


_WRITE_OPERATIONS = frozenset({"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"})


class Meter:
    """Counts DynamoDB requests per operation and sums the write capacity moto reports."""

    def __init__(self, client: Any) -> None:
        self.requests: Counter[str] = Counter()
        self.reported_units = 0.0
        events = client.meta.events
        events.register("provide-client-params.dynamodb.*", self._ask_for_capacity)
        events.register("before-call.dynamodb.*", self._count)
        events.register("after-call.dynamodb.*", self._read_capacity)

    def reset(self) -> None:
        self.requests.clear()
        self.reported_units = 0.0

    def _ask_for_capacity(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        if model.name in _CAPACITY_OPERATIONS:
            params.setdefault("ReturnConsumedCapacity", "TOTAL")

    def _count(self, model: Any, **_: Any) -> None:
        self.requests[model.name] += 1

    def _read_capacity(self, parsed: Mapping[str, Any], model: Any, **_: Any) -> None:
        if model.name not in _WRITE_OPERATIONS:
            return
        consumed = parsed.get("ConsumedCapacity") or []
        for entry in [consumed] if isinstance(consumed, Mapping) else consumed:
            self.reported_units += float(entry.get("CapacityUnits", 0.0))


def _value_size(value: Mapping[str, Any]) -> int:
    """Approximate stored size of one AttributeValue (DynamoDB's documented rules)."""
    ((kind, raw),) = value.items()
    if kind == "S":
        return len(raw.encode())
    if kind == "B":
        return len(raw)
    if kind == "N":
        return len(str(raw).lstrip("-").replace(".", "")) // 2 + 2
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "M":
        return 3 + sum(len(k.encode()) + _value_size(v) + 1 for k, v in raw.items())
    if kind == "L":
        return 3 + sum(_value_size(v) + 1 for v in raw)
    return sum(len(str(v)) for v in raw)  # SS / NS / BS


def item_size(item: Mapping[str, Mapping[str, Any]]) -> int:
    return sum(len(name.encode()) + _value_size(value) for name, value in item.items())


def write_units(item: Mapping[str, Mapping[str, Any]]) -> int:
    """On-demand write request units for writing ``item`` once (1 per started KB)."""
    return max(1, math.ceil(item_size(item) / ONE_KB))


def _raw_item(client: Any, key: keys.Key) -> dict[str, Any]:
    return dict(client.get_item(TableName=TABLE, Key=marshal_item(key))["Item"])


def bench_add_turn(client: Any, meter: Meter) -> dict[str, Any]:
    """Requests and write units per chat turn (add_turn), floor: 2 writes."""
    store = DynamoSessionStore(TABLE, client=client)
    session_id = store.sessions.create_session("bench-customer", metadata={"source": "web"}).session_id
    meter.reset()
    for n in range(CHAT_TURNS):
        store.turns.add_turn(session_id, Role.USER if n % 2 == 0 else Role.ASSISTANT, MESSAGE)
    by_operation = {op: count / CHAT_TURNS for op, count in sorted(meter.requests.items())}
    requests = sum(meter.requests.values())
    reported = meter.reported_units
    meta_units = write_units(_raw_item(client, keys.session_key(session_id)))
    turn_units = write_units(_raw_item(client, keys.turn_key(session_id, CHAT_TURNS)))
    return {
        "benchmark": "add_turn (per chat turn)",
        "requests": round(requests / CHAT_TURNS, 2),
        "floor": 2,
        "by_operation": by_operation,
        "write_units_moto": round(reported / CHAT_TURNS, 2),
        "write_units_model": meta_units + turn_units,
        "gsi_write_units_model": 2,
        "notes": (
            f"UpdateItem META ({meta_units} WRU) + PutItem TURN ({turn_units} WRU, "
            f"{len(MESSAGE)}-char message zlib-compressed). GSI1 (customer_id/updated_at) is "
            "rewritten (delete + put: 2 WRU) whenever updated_at moves to a new second, i.e. on "
            "practically every real turn"
        ),
    }


def _seed_turns(client: Any, session_id: str, count: int) -> None:
    """Write ``count`` turns straight into the table (fast setup, not what is measured)."""
    now = int(time.time())
    items = [
        marshal_item(Turn(session_id, n, Role.USER, MESSAGE, now, now + 86400).to_item()) for n in range(1, count + 1)
    ]
    for start in range(0, len(items), BATCH_SIZE):
        chunk = items[start : start + BATCH_SIZE]
        client.batch_write_item(RequestItems={TABLE: [{"PutRequest": {"Item": item}} for item in chunk]})
    client.update_item(
        TableName=TABLE,
        Key=marshal_item(keys.session_key(session_id)),
        UpdateExpression="SET turn_count = :n",
        ExpressionAttributeValues={":n": {"N": str(count)}},
    )


def bench_delete_session(client: Any, meter: Meter) -> dict[str, Any]:
    """Requests to delete a session of 10,000 turns; floor: ceil(N/25) BatchWriteItem + pages."""
    store = DynamoSessionStore(TABLE, client=client)
    session_id = store.sessions.create_session("bench-customer").session_id
    _seed_turns(client, session_id, DELETE_TURNS)
    partition_bytes = item_size(_raw_item(client, keys.turn_key(session_id, 1))) * DELETE_TURNS
    query_floor = max(1, math.ceil(partition_bytes / PAGE_BYTES))
    batch_floor = math.ceil(DELETE_TURNS / BATCH_SIZE)
    meter.reset()
    started = time.perf_counter()
    deleted = store.sessions.delete_session_items(session_id)
    elapsed = time.perf_counter() - started
    assert deleted == DELETE_TURNS, deleted
    return {
        "benchmark": f"delete_session_items ({DELETE_TURNS:,} turns)",
        "requests": sum(meter.requests.values()),
        "floor": batch_floor + query_floor,
        # The requests are counted on moto, which ends a page after 1,000,000 bytes: the floor on
        # the backend that was measured has that many Query pages.
        "floor_measured_backend": batch_floor + max(1, math.ceil(partition_bytes / MOTO_PAGE_BYTES)),
        "by_operation": dict(sorted(meter.requests.items())),
        "write_units_moto": round(meter.reported_units, 1),
        "write_units_model": DELETE_TURNS,  # a delete is 1 WRU per started KB of the old item
        "gsi_write_units_model": 0,  # turns carry no index attributes
        "notes": (
            f"floor = {batch_floor} BatchWriteItem + {query_floor} keys-only Query page(s) "
            f"(DynamoDB stops a page after 1 MiB read; the partition holds "
            f"{partition_bytes / PAGE_BYTES:.2f} MiB; moto pages at 1,000,000 bytes, hence one "
            f"more page there); {elapsed:.1f} s on moto"
        ),
    }


def run() -> list[dict[str, Any]]:
    """Run every store benchmark on a fresh moto table; one dict per benchmark."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        os.environ.setdefault(name, value)
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_sessions_table(client, TABLE)
        meter = Meter(client)
        return [bench_add_turn(client, meter), bench_delete_session(client, meter)]


def format_table(rows: list[dict[str, Any]]) -> str:
    header = (
        "benchmark",
        "requests",
        "floor",
        "WRU (moto)",
        "WRU table (model)",
        "WRU GSI (model)",
        "requests by operation",
    )
    lines = [header]
    for row in rows:
        by_op = ", ".join(f"{op} {count:g}" for op, count in row["by_operation"].items())
        lines.append(
            (
                row["benchmark"],
                f"{row['requests']:g}",
                f"{row['floor']:g}",
                f"{row['write_units_moto']:g}",
                f"{row['write_units_model']:g}",
                f"{row['gsi_write_units_model']:g}",
                by_op,
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = [" | ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)) for line in lines]
    out.insert(1, "-+-".join("-" * width for width in widths))
    out += ["", *(f"{row['benchmark']}: {row['notes']}" for row in rows)]
    out.append(
        "moto reports a constant capacity per write call, not a size-based one: 'WRU (moto)' is "
        "what it returned; the model columns apply DynamoDB's on-demand rule (1 WRU per started "
        "KB written) to the stored item sizes."
    )
    return "\n".join(out)


def main() -> None:
    print(format_table(run()))


if __name__ == "__main__":
    main()
