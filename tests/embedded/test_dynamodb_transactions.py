"""TransactWriteItems on the embedded stage: all or nothing, items and stream alike, as DynamoDB does."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from botocore.exceptions import ClientError

from embedded.services.dynamodb import atomic_requests, create_sessions_table

TABLE = "transactions"


@pytest.fixture
def dynamodb_requests() -> contextlib.AbstractContextManager[Any]:
    return atomic_requests()


@pytest.fixture
def stream(ddb_client: Any) -> str:
    return create_sessions_table(ddb_client, TABLE)


def _key(pk: str, sk: str) -> dict[str, Any]:
    return {"PK": {"S": pk}, "SK": {"S": sk}}


def _put(pk: str, sk: str, **attributes: str) -> dict[str, Any]:
    item = {**_key(pk, sk), **{name: {"S": value} for name, value in attributes.items()}}
    return {"Put": {"TableName": TABLE, "Item": item}}


def _items(client: Any) -> list[dict[str, Any]]:
    return sorted(client.scan(TableName=TABLE)["Items"], key=lambda item: (item["PK"]["S"], item["SK"]["S"]))


def _stream_events(stream_arn: str) -> list[str]:
    """The table's stream records, as the stage's stream pump reads them (moto's backend, not its API)."""
    from moto.dynamodbstreams.models import dynamodbstreams_backends

    shard = dynamodbstreams_backends["123456789012"]["us-east-1"]._get_table_from_arn(stream_arn).stream_shard
    assert shard is not None
    return [record.record["eventName"] for record in shard.items]


def _cancelled(client: Any, actions: list[dict[str, Any]]) -> list[str]:
    with pytest.raises(ClientError) as refused:
        client.transact_write_items(TransactItems=actions)
    assert refused.value.response["Error"]["Code"] == "TransactionCanceledException"
    return [reason["Code"] for reason in refused.value.response["CancellationReasons"]]


def test_a_cancelled_transaction_leaves_every_item_and_the_stream_as_they_were(ddb_client: Any, stream: str) -> None:
    # Given two items, one of them never named by the transaction
    ddb_client.transact_write_items(TransactItems=[_put("S#1", "META", status="active"), _put("S#2", "META")])
    before, events = _items(ddb_client), _stream_events(stream)

    # When a transaction updates one, deletes it again elsewhere, puts a new partition, and then fails a condition
    reasons = _cancelled(
        ddb_client,
        [
            {
                "Update": {
                    "TableName": TABLE,
                    "Key": _key("S#1", "META"),
                    "UpdateExpression": "SET #s = :closed",
                    "ExpressionAttributeNames": {"#s": "status"},
                    "ExpressionAttributeValues": {":closed": {"S": "closed"}},
                }
            },
            _put("S#3", "META", status="new"),
            _put("S#3", "TURN#1"),
            {
                "ConditionCheck": {
                    "TableName": TABLE,
                    "Key": _key("S#2", "META"),
                    "ConditionExpression": "attribute_not_exists(PK)",
                }
            },
        ],
    )

    # Then the condition is the reason, and nothing of the transaction is left: no item, no partition, no record
    assert reasons == ["None", "None", "None", "ConditionalCheckFailed"]
    assert _items(ddb_client) == before
    assert (
        ddb_client.query(
            TableName=TABLE, KeyConditionExpression="PK = :pk", ExpressionAttributeValues={":pk": {"S": "S#3"}}
        )["Items"]
        == []
    )
    assert _stream_events(stream) == events


def test_a_cancelled_delete_puts_the_item_back_as_it_was(ddb_client: Any, stream: str) -> None:
    # Given an item with a nested attribute
    item = {**_key("S#1", "META"), "tags": {"M": {"genre": {"L": [{"S": "seinen"}]}}}}
    ddb_client.put_item(TableName=TABLE, Item=item)

    # When a transaction deletes it and then fails
    _cancelled(
        ddb_client,
        [
            {"Delete": {"TableName": TABLE, "Key": _key("S#1", "META")}},
            {
                "ConditionCheck": {
                    "TableName": TABLE,
                    "Key": _key("S#9", "META"),
                    "ConditionExpression": "attribute_exists(PK)",
                }
            },
        ],
    )

    # Then the item is back, whole, and later writes to it work
    assert _items(ddb_client) == [item]
    ddb_client.delete_item(TableName=TABLE, Key=_key("S#1", "META"))
    assert _items(ddb_client) == []


def test_a_transaction_that_succeeds_writes_every_item_and_one_record_each(ddb_client: Any, stream: str) -> None:
    # Given an item to update
    ddb_client.put_item(TableName=TABLE, Item={**_key("S#1", "META"), "n": {"N": "1"}})

    # When a transaction updates it and puts two more
    ddb_client.transact_write_items(
        TransactItems=[
            {
                "Update": {
                    "TableName": TABLE,
                    "Key": _key("S#1", "META"),
                    "UpdateExpression": "ADD n :one",
                    "ExpressionAttributeValues": {":one": {"N": "1"}},
                }
            },
            _put("S#1", "TURN#1"),
            _put("S#2", "META"),
        ]
    )

    # Then all three are written, with a stream record each
    assert [(item["PK"]["S"], item["SK"]["S"]) for item in _items(ddb_client)] == [
        ("S#1", "META"),
        ("S#1", "TURN#1"),
        ("S#2", "META"),
    ]
    assert _items(ddb_client)[0]["n"] == {"N": "2"}
    assert _stream_events(stream) == ["INSERT", "MODIFY", "INSERT", "INSERT"]


def test_a_cancelled_transaction_on_a_table_without_a_sort_key_leaves_it_as_it_was(ddb_client: Any) -> None:
    # Given a table keyed by its partition key alone, with one item
    ddb_client.create_table(
        TableName="by-id",
        BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
    )
    ddb_client.put_item(TableName="by-id", Item={"id": {"S": "a"}, "v": {"S": "1"}})

    # When a transaction replaces it and adds another, then fails a condition
    reasons = _cancelled(
        ddb_client,
        [
            {"Put": {"TableName": "by-id", "Item": {"id": {"S": "a"}, "v": {"S": "2"}}}},
            {"Put": {"TableName": "by-id", "Item": {"id": {"S": "b"}}}},
            {
                "ConditionCheck": {
                    "TableName": "by-id",
                    "Key": {"id": {"S": "c"}},
                    "ConditionExpression": "attribute_exists(id)",
                }
            },
        ],
    )

    # Then the table holds the first item as it was, and only it
    assert reasons == ["None", "None", "ConditionalCheckFailed"]
    assert ddb_client.scan(TableName="by-id")["Items"] == [{"id": {"S": "a"}, "v": {"S": "1"}}]
