"""moto answers as before without the work it repeated per request: the same dispatch, updates and items."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from moto import mock_aws
from moto.core import responses, serialize, utils
from moto.core.utils import get_service_model
from moto.dynamodb.parsing.expressions import UpdateExpressionParser  # type: ignore[attr-defined]
from moto.dynamodb.responses import DynamoHandler
from moto.sqs.responses import SQSResponse

from embedded import moto_responses
from embedded.services.dynamodb import create_sessions_table

_text = st.text(max_size=6)
# DynamoDB refuses an empty attribute name; moto's serializer, given one in a map, merges that
# value into the map itself, where the embedded DynamoDB writes the name as given.
_name = st.text(min_size=1, max_size=6)
_bytes = st.binary(max_size=6)
_number = st.integers(-(10**6), 10**6).map(str)
_scalar = st.one_of(
    st.builds(lambda v: {"S": v}, _text),
    st.builds(lambda v: {"N": v}, _number),
    st.builds(lambda v: {"B": v}, st.one_of(_bytes, _text)),  # raw bytes, or base64 text from a stream
    st.builds(lambda v: {"BOOL": v}, st.booleans()),
    st.just({"NULL": True}),
    st.builds(lambda v: {"SS": v}, st.lists(_text, min_size=1, max_size=3)),
    st.builds(lambda v: {"NS": v}, st.lists(_number, min_size=1, max_size=3)),
    st.builds(lambda v: {"BS": v}, st.lists(_bytes, min_size=1, max_size=3)),
)
# Nested maps and lists, a list's empty slot, a member set to None and a key that is no member.
_value = st.recursive(
    _scalar,
    lambda inner: st.one_of(
        st.builds(lambda v: {"M": v}, st.dictionaries(_name, st.one_of(inner, st.none()), max_size=3)),
        st.builds(lambda v: {"L": v}, st.lists(st.one_of(inner, st.none()), max_size=3)),
        st.builds(lambda v, n: {**v, "S": None, "not_a_member": n}, inner, _text),
    ),
    max_leaves=12,
)
_item = st.dictionaries(_name, _value, max_size=5)


def _body(serializer: type[serialize.ResponseSerializer], service: str, operation: str, result: Any) -> Any:
    writer = serializer(
        operation_model=get_service_model(service).operation_model(operation),
        pretty_print=False,
        value_picker=serialize.XFormedAttributePicker(response_transformers=None),
    )
    return json.loads(writer.serialize(result)["body"])


def _both(service: str, operation: str, result: Any) -> tuple[Any, Any]:
    fast = serialize.get_serializer_class(service, "json")
    assert fast is not serialize.JSONSerializer
    return _body(serialize.JSONSerializer, service, operation, result), _body(fast, service, operation, result)


@pytest.fixture(autouse=True, scope="module")
def _fast_serializer() -> Iterator[None]:
    was_installed = moto_responses.installed()
    moto_responses.install()
    yield
    if not was_installed:
        moto_responses.uninstall()


def test_a_response_class_is_listed_once_with_the_methods_moto_lists() -> None:
    dispatch_lists = vars(responses)["method_names_from_class"]  # what moto's dispatch calls
    for clazz in (DynamoHandler, SQSResponse):
        kept = dispatch_lists(clazz)
        assert kept == utils.method_names_from_class(clazz)
        assert dispatch_lists(clazz) is kept  # listed once, then kept
    assert "get_item" in dispatch_lists(DynamoHandler)


@settings(max_examples=150, deadline=None)
@given(item=_item)
def test_an_item_is_written_as_moto_writes_it(item: dict[str, Any]) -> None:
    moto_body, fast_body = _both("dynamodb", "GetItem", {"Item": item})
    assert fast_body == moto_body


@settings(max_examples=60, deadline=None)
@given(items=st.lists(_item, max_size=3), old=_item)
def test_pages_transactions_and_stream_records_are_written_as_moto_writes_them(
    items: list[dict[str, Any]], old: dict[str, Any]
) -> None:
    page = {"Items": items, "Count": len(items), "ScannedCount": len(items), "LastEvaluatedKey": old}
    transaction = {"Responses": [{"Item": i} for i in items]}
    records = {
        "Records": [
            {"eventName": "MODIFY", "dynamodb": {"Keys": old, "NewImage": item, "OldImage": old}} for item in items
        ]
    }
    for service, operation, result in (
        ("dynamodb", "Query", page),
        ("dynamodb", "TransactGetItems", transaction),
        ("dynamodbstreams", "GetRecords", records),
    ):
        moto_body, fast_body = _both(service, operation, result)
        assert fast_body == moto_body, operation


def test_the_sessions_table_round_trips_every_type_through_the_installed_serializer() -> None:
    item: dict[str, Any] = {
        "PK": {"S": "SESSION#s-1"},
        "SK": {"S": "META"},
        "blob": {"B": b"\x00\xffmanga"},
        "blobs": {"BS": [b"\x01", b"\x02"]},
        "nested": {"M": {"list": {"L": [{"N": "1"}, {"S": ""}, {"NULL": True}, {"BOOL": False}]}}},
        "tags": {"SS": ["a", "b"]},
        "counts": {"NS": ["1", "2.5"]},
    }
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_sessions_table(client, "sessions")
        client.put_item(TableName="sessions", Item=item)
        got = client.get_item(TableName="sessions", Key={"PK": item["PK"], "SK": item["SK"]}, ConsistentRead=True)
    assert got["Item"]["blob"] == item["blob"]
    assert sorted(got["Item"]["blobs"]["BS"]) == item["blobs"]["BS"]
    assert got["Item"]["nested"] == item["nested"]
    assert sorted(got["Item"]["tags"]["SS"]) == ["a", "b"]
    assert sorted(got["Item"]["counts"]["NS"]) == ["1", "2.5"]


def test_an_update_expression_is_parsed_once_and_applied_to_each_item_afresh() -> None:
    expression = "SET #n = :name ADD turns :one REMOVE gone"
    assert UpdateExpressionParser.make(expression) is UpdateExpressionParser.make(expression)
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_sessions_table(client, "sessions")
        for sid, name in (("s-1", "Aiko"), ("s-2", "Ben"), ("s-1", "Chie")):
            key = {"PK": {"S": f"SESSION#{sid}"}, "SK": {"S": "META"}}
            client.update_item(
                TableName="sessions",
                Key=key,
                UpdateExpression=expression,
                ExpressionAttributeNames={"#n": "name"},
                ExpressionAttributeValues={":name": {"S": name}, ":one": {"N": "1"}},
            )
        items = {
            sid: client.get_item(TableName="sessions", Key={"PK": {"S": f"SESSION#{sid}"}, "SK": {"S": "META"}})["Item"]
            for sid in ("s-1", "s-2")
        }
        for _ in range(2):  # a refused expression is refused every time, never kept
            with pytest.raises(client.exceptions.ClientError, match="Invalid UpdateExpression"):
                client.update_item(TableName="sessions", Key=key, UpdateExpression="SET = :v")
    assert (items["s-1"]["name"], items["s-1"]["turns"]) == ({"S": "Chie"}, {"N": "2"})
    assert (items["s-2"]["name"], items["s-2"]["turns"]) == ({"S": "Ben"}, {"N": "1"})
