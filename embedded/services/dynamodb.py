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
            _copying_each_table_once(dynamodb_models.DynamoDBBackend.transact_write_items),
        ):
            yield
    finally:
        DynamoHandler.call_action = original  # type: ignore[method-assign]


def _copying_each_table_once(transact_write_items: Callable[..., None]) -> Callable[..., None]:
    """moto's TransactWriteItems backs up the whole table once per *action*, for its rollback.

    A deep copy of every item and every stream record the table ever had, four times for a
    four-action transaction: on a stage holding a few thousand turns a transaction took seconds,
    and grew with the table. Within one transaction (under the request lock, so no other request
    sees the swap) each table is copied once and the copy reused: the rollback restores the same
    state, taken before any action was applied.
    """

    def transact(self: Any, transact_items: list[dict[str, Any]]) -> None:
        copies: dict[int, Any] = {}

        def deepcopy(value: Any, memo: dict[int, Any] | None = None) -> Any:
            if not isinstance(value, Table):
                return copy.deepcopy(value, memo)
            if id(value) not in copies:
                copies[id(value)] = copy.deepcopy(value, memo)
            return copies[id(value)]

        with mock.patch.object(dynamodb_models, "copy", SimpleNamespace(deepcopy=deepcopy)):
            transact_write_items(self, transact_items)

    return transact
