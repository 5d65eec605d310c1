"""Every review decision reaches the audit trail: the table stream carries it, the router audits it.

The reviews are written by the approval gate's own records module, with the key layout the app
gives the gate (``REVIEW#<id>`` / ``META`` in the sessions table).

The stream (NEW_AND_OLD_IMAGES) is read with moto's ``dynamodbstreams`` exactly as Lambda's event
source mapping would deliver it; the records then go through the stream router's own routing
(``lambdas.events.routing.classify``), which builds the audit line the router writes.
"""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecord

from constructs_lib.approval_gate.gate_runtime.records import KeyLayout, ReviewStore
from embedded.events import stream_record_from
from embedded.services.dynamodb import create_sessions_table
from lambdas.events import routing
from lambdas.shared import keys, schema

TOKEN = "task-token-that-must-stay-in-the-table"
#: Where the app's gate keeps its reviews (OrchestrationStack passes the same values).
APP_LAYOUT = KeyLayout(
    partition_key=schema.PARTITION_KEY,
    sort_key=schema.SORT_KEY,
    key_prefix=keys.REVIEW_PREFIX,
    sort_key_value=keys.META_SK,
    ttl_attribute=schema.TTL_ATTRIBUTE,
)


@pytest.fixture
def streamed(ddb_client: Any) -> tuple[ReviewStore, str]:
    stream_arn = create_sessions_table(ddb_client, "reviews-streamed")
    return ReviewStore("reviews-streamed", layout=APP_LAYOUT, client=ddb_client), stream_arn


def stream_records(stream_arn: str) -> list[dict[str, Any]]:
    # botocore >= 1.38 sends stream calls to <account>.streams-ddb.<region>, which moto 5.2.5
    # does not route; its handler answers on the classic endpoint.
    streams = boto3.client(
        "dynamodbstreams", region_name="us-east-1", endpoint_url="https://streams.dynamodb.us-east-1.amazonaws.com"
    )
    shards = streams.describe_stream(StreamArn=stream_arn)["StreamDescription"]["Shards"]
    records: list[dict[str, Any]] = []
    for shard in shards:
        iterator = streams.get_shard_iterator(
            StreamArn=stream_arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        records += streams.get_records(ShardIterator=iterator)["Records"]
    return records


STREAM_ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/reviews-streamed/stream/x"


def as_lambda_record(record: dict[str, Any]) -> DynamoDBRecord:
    """The stream record as Lambda's event source mapping hands it over (epoch-second timestamps)."""
    return DynamoDBRecord(stream_record_from(record, stream_arn=STREAM_ARN))


@pytest.mark.parametrize("decision", ["approved", "rejected"])
def test_a_decided_review_is_a_modify_record_with_old_and_new_status(
    streamed: tuple[ReviewStore, str], decision: str
) -> None:
    # Given a pending review holding a task token
    store, stream_arn = streamed
    review = store.put_review({"n": 1}, requested_by="admin-7", task_token=TOKEN)

    # When the reviewer decides
    store.decide_review(review.review_id, decision, decided_by="review-link from 203.0.113.9")

    # Then the stream holds the creation and the decision, with both images
    records = stream_records(stream_arn)
    assert [r["eventName"] for r in records] == ["INSERT", "MODIFY"]
    modify = records[1]["dynamodb"]
    assert modify["OldImage"]["status"] == {"S": "pending_review"}
    assert modify["NewImage"]["status"] == {"S": decision}
    assert modify["NewImage"]["decided_by"] == {"S": "review-link from 203.0.113.9"}

    # and the router's audit line records who changed what, without the token itself
    audit = routing.classify(as_lambda_record(records[1]), summary_interval=10, bus_name="bus").audit
    assert audit["item_type"] == "review"
    assert audit["pk"] == f"REVIEW#{review.review_id}"
    assert audit["change"] == "updated"
    assert audit["old_status"] == "pending_review"
    assert audit["new_status"] == decision
    assert {"status", "decided_at", "decided_by"} <= set(audit["changed_attributes"])
    assert TOKEN not in repr(audit)


def test_an_expired_click_is_audited_as_pending_to_expired(streamed: tuple[ReviewStore, str]) -> None:
    store, stream_arn = streamed
    now = [1_767_225_600.0]
    clocked = ReviewStore(store.table_name, layout=APP_LAYOUT, client=store.client, clock=lambda: now[0])
    review = clocked.put_review({"n": 1}, requested_by="admin-7", expires_in_seconds=60, task_token=TOKEN)
    now[0] += 61

    with pytest.raises(Exception, match="expired"):
        clocked.decide_review(review.review_id, "approved", decided_by="late reviewer")

    modify = stream_records(stream_arn)[-1]
    audit = routing.classify(as_lambda_record(modify), summary_interval=10, bus_name="bus").audit
    assert (audit["old_status"], audit["new_status"]) == ("pending_review", "expired")
