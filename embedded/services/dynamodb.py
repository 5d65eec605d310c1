"""The sessions table on moto, built from ``lambdas.shared.schema`` (never restated by hand).

Usage::

    with mock_aws(), atomic_requests():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_sessions_table(client, "sessions")
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any
from unittest import mock

from moto.dynamodb import models as dynamodb_models
from moto.dynamodb.models.dynamo_type import DynamoType
from moto.dynamodb.models.table import Table
from moto.dynamodb.responses import DynamoHandler

from lambdas.shared.schema import (
    GLOBAL_INDEXES,
    PARTITION_KEY,
    SORT_KEY,
    TTL_ATTRIBUTE,
    IndexSchema,
)

DEFAULT_TABLE_NAME = "manga-assist-sessions-test"


def _projection(index: IndexSchema) -> dict[str, Any]:
    if index.include is None:
        return {"ProjectionType": "ALL"}
    return {"ProjectionType": "INCLUDE", "NonKeyAttributes": list(index.include)}


def table_definition(table_name: str = DEFAULT_TABLE_NAME) -> dict[str, Any]:
    """CreateTable parameters: PK/SK, every GSI of the schema, on-demand, stream new+old."""
    attributes: dict[str, str] = {PARTITION_KEY: "S", SORT_KEY: "S"}
    for index in GLOBAL_INDEXES:
        attributes[index.partition_key] = index.partition_type
        attributes[index.sort_key] = index.sort_type
    return {
        "TableName": table_name,
        "BillingMode": "PAY_PER_REQUEST",
        "KeySchema": [
            {"AttributeName": PARTITION_KEY, "KeyType": "HASH"},
            {"AttributeName": SORT_KEY, "KeyType": "RANGE"},
        ],
        "AttributeDefinitions": [{"AttributeName": name, "AttributeType": kind} for name, kind in attributes.items()],
        "GlobalSecondaryIndexes": [
            {
                "IndexName": index.name,
                "KeySchema": [
                    {"AttributeName": index.partition_key, "KeyType": "HASH"},
                    {"AttributeName": index.sort_key, "KeyType": "RANGE"},
                ],
                "Projection": _projection(index),
            }
            for index in GLOBAL_INDEXES
        ],
        "StreamSpecification": {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    }


def create_sessions_table(client: Any, table_name: str = DEFAULT_TABLE_NAME) -> str:
    """Create the table (inside an active ``mock_aws``), enable TTL, return its stream ARN."""
    description = client.create_table(**table_definition(table_name))["TableDescription"]
    if description["TableStatus"] != "ACTIVE":  # moto's tables are active at once: no DescribeTable to wait
        client.get_waiter("table_exists").wait(TableName=table_name)
    client.update_time_to_live(
        TableName=table_name,
        TimeToLiveSpecification={"Enabled": True, "AttributeName": TTL_ATTRIBUTE},
    )
    return str(description["LatestStreamArn"])


_REQUEST_LOCK = threading.RLock()


@contextmanager
def atomic_requests() -> Iterator[None]:
    """Make moto apply each DynamoDB request atomically, as DynamoDB itself does.

    moto 5 runs a request's read-modify-write (``ADD``, a condition check then a write, a
    transaction) in the caller's thread without a lock, so two threads can both read
    ``turn_count = 4``. DynamoDB never does that for one request. The lock only makes each
    *request* atomic; races between separate requests (read-then-write in client code) stay
    possible, which is what concurrency tests must be able to catch.
    """
    original = DynamoHandler.call_action

    def call_action(self: DynamoHandler) -> Any:
        with _REQUEST_LOCK:
            return original(self)

    DynamoHandler.call_action = call_action  # type: ignore[method-assign]
    try:
        with mock.patch.object(
            dynamodb_models.DynamoDBBackend,
            "transact_write_items",
            _rolled_back_in_place(dynamodb_models.DynamoDBBackend.transact_write_items),
        ):
            yield
    finally:
        DynamoHandler.call_action = original  # type: ignore[method-assign]


def _rolled_back_in_place(transact_write_items: Callable[..., None]) -> Callable[..., None]:
    """moto's TransactWriteItems backs up each table it writes with a deep copy, for its rollback.

    That is a copy of every item and every stream record the table ever had, so a transaction's
    cost grew with the table: on a stage holding a few thousand turns a transaction took seconds.
    A transaction changes only the items it names. This keeps a copy of those items, and the length
    of each table's stream, before the transaction starts (under the request lock, so no other
    request runs in between). If the transaction is cancelled, they are put back in place, and the
    stream records it added are dropped. moto's own backup is then the table itself.
    """

    def transact(self: Any, transact_items: list[dict[str, Any]]) -> None:
        saved = _SavedItems(self.tables, transact_items)
        with mock.patch.object(dynamodb_models, "copy", SimpleNamespace(deepcopy=_tables_as_they_are)):
            try:
                transact_write_items(self, transact_items)
            except BaseException:
                saved.restore()
                raise

    return transact


def _tables_as_they_are(value: Any, memo: dict[int, Any] | None = None) -> Any:
    return value if isinstance(value, Table) else copy.deepcopy(value, memo)


def _item_named(tables: dict[str, Table], entry: Any) -> tuple[Table, DynamoType, DynamoType | None] | None:
    """The table and key of one transaction action; None for an action moto refuses before writing it."""
    if not isinstance(entry, dict) or len(entry) != 1:
        return None
    op_type, op = next(iter(entry.items()))
    if not isinstance(op, dict):
        return None
    table = tables.get(str(op.get("TableName")))
    key = op.get("Item") if op_type == "Put" else op.get("Key")
    if table is None or not isinstance(key, dict):
        return None
    if table.hash_key_attr not in key or (table.range_key_attr is not None and table.range_key_attr not in key):
        return None
    range_key = None if table.range_key_attr is None else DynamoType(key[table.range_key_attr])
    return table, DynamoType(key[table.hash_key_attr]), range_key


class _SavedItems:
    """The items a transaction names, as they were before it, and each table's stream length."""

    def __init__(self, tables: dict[str, Table], transact_items: list[dict[str, Any]]) -> None:
        self._items: list[tuple[Table, DynamoType, DynamoType | None, Any]] = []
        self._streams: dict[int, tuple[Table, list[Any], int]] = {}
        for entry in transact_items:
            named = _item_named(tables, entry)
            if named is not None:
                self._save(*named)

    def _save(self, table: Table, hash_key: DynamoType, range_key: DynamoType | None) -> None:
        item = table.items.get(hash_key) if range_key is None else table.items.get(hash_key, {}).get(range_key)
        self._items.append((table, hash_key, range_key, copy.deepcopy(item)))
        shard = table.stream_shard
        if shard is not None and id(table) not in self._streams:
            self._streams[id(table)] = (table, shard.items, len(shard.items))

    def restore(self) -> None:
        for table, hash_key, range_key, item in reversed(self._items):
            # A partition left empty is not seen: moto reads only the items in it.
            items = table.items if range_key is None else table.items[hash_key]
            key = hash_key if range_key is None else range_key
            if item is None:
                items.pop(key, None)
            else:
                items[key] = item
        for table, records, length in self._streams.values():
            if table.stream_shard is not None and table.stream_shard.items is records:
                del records[length:]
