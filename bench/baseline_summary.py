"""BASELINE for `make bench` only, never deployed: seed 003's summary generator.

The seed's router invokes it asynchronously for EVERY turn insert (bench/baseline_router.py) and
it decides whether to work: a GetItem of the session's count on each invocation, and at the
interval a Query of ALL the session's turns (paginated: it grows with the session), a Query of
the latest summary, one model call with the seed's prompt, and a conditional PutItem.

One change from the seed, so that both designs write the same summaries: it decides on the
number of the turn that triggered it (the ``turn_sk`` the seed's router sends), not on the count
it read. The count has moved on by the time the invocation runs (the reply is stored right after
the message), so the seed's test would skip windows or summarise one twice.
"""

from __future__ import annotations

import os
import time
from typing import Any

import boto3
from boto3.dynamodb.conditions import Key
from botocore.exceptions import ClientError

from lambdas.shared import keys
from lambdas.shared.records import Summary, Turn, decompress


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    interval = int(os.environ.get("SUMMARY_INTERVAL", "10"))
    session_id = str(event["session_id"])
    table = boto3.resource("dynamodb").Table(os.environ["TABLE_NAME"])
    pk = keys.session_pk(session_id)
    table.get_item(Key=keys.session_key(session_id), ProjectionExpression="turn_count")
    number = int(str(event.get("turn_sk", "TURN#0")).removeprefix(keys.TURN_PREFIX))
    if number < interval or number % interval:
        return {"status": "skipped"}
    turns = _all_turns(table, pk)[-interval:]
    previous = table.query(
        KeyConditionExpression=Key("PK").eq(pk) & Key("SK").begins_with(keys.SUMMARY_PREFIX),
        ScanIndexForward=False,
        Limit=1,
    )["Items"]
    context_text = f"Previous summary: {previous[0]['summary_text']}\n\n" if previous else ""
    lines = "\n".join(f"{t.role}: {t.content}" for t in turns)
    prompt = (
        f"{context_text}New conversation segment:\n{lines}\n\n"
        "Generate a concise summary (3-5 sentences) that captures the key topics, decisions, and any "
        "unresolved questions from this conversation segment. Incorporate context from the previous "
        "summary if available."
    )
    answer = boto3.client("bedrock-runtime").converse(
        modelId=os.environ["BEDROCK_MODEL_ID"],
        messages=[{"role": "user", "content": [{"text": prompt}]}],
        inferenceConfig={"maxTokens": 512},
    )
    text = "".join(block.get("text", "") for block in answer["output"]["message"]["content"])
    now = int(time.time())
    summary = Summary(session_id, number // interval, text, turns[0].turn_number, number, number, now, now + 86400)
    try:
        table.put_item(Item=summary.to_item(), ConditionExpression="attribute_not_exists(SK)")
    except ClientError as error:
        if error.response["Error"]["Code"] != "ConditionalCheckFailedException":
            raise
        return {"status": "exists"}
    return {"status": "generated"}


def _all_turns(table: Any, pk: str) -> list[Turn]:
    """Every turn of the session, oldest first (the seed's paginated Query)."""
    items: list[dict[str, Any]] = []
    params: dict[str, Any] = {
        "KeyConditionExpression": Key("PK").eq(pk) & Key("SK").begins_with(keys.TURN_PREFIX),
        "ScanIndexForward": True,
    }
    while True:
        page = table.query(**params)
        items.extend(page.get("Items", []))
        if "LastEvaluatedKey" not in page:
            break
        params["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    return [
        Turn.from_item({**item, "content": decompress(item["content"].value)} if "content" in item else item)
        for item in items
    ]
