"""BASELINE for `make bench` only, never deployed: the Message Lambda written the obvious way.

The obvious design for a session handler on a boto3 ``Table`` with full-item writes (read, change
in memory, put back), run by bench/cost.py in place of ``lambdas.ws.message.handler`` on the
same stage:

1. GetItem of the connection (which session), GetItem of the session (its status, its count).
2. Each turn is its own PutItem, and the session item is put back whole with the new count: two
   writes per turn, nothing batched.
3. Two Queries: the newest turns, the latest summary. One model call (the app's responder, so
   prompt and tokens match), read to its end, the reply stored as in 2, then posted as one frame.

It has no rate limits (the app takes one token per message from two buckets) and reports no
errors to the customer; both favour it in the count. Items have the app's shapes (the record
classes), so sizes compare like for like.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import boto3
from boto3.dynamodb.conditions import Key
from boto3.dynamodb.types import Binary

from lambdas.shared import keys
from lambdas.shared.records import Role, Summary, Turn
from lambdas.shared.responder import BedrockResponder
from lambdas.ws.frames import message_frame


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    request = event["requestContext"]
    text = str(json.loads(event.get("body") or "{}").get("text", ""))
    table = boto3.resource("dynamodb").Table(os.environ["TABLE_NAME"])
    connection = table.get_item(Key=keys.connection_key(request["connectionId"])).get("Item")
    if connection is None:
        return {"statusCode": 200}
    session_id = str(connection["session_id"])
    meta = table.get_item(Key=keys.session_key(session_id)).get("Item")
    if meta is None or meta.get("status") != "active":
        return {"statusCode": 200}
    _append(table, meta, Role.USER, text)
    pk = keys.session_pk(session_id)
    newest = table.query(
        KeyConditionExpression=Key("PK").eq(pk) & Key("SK").begins_with(keys.TURN_PREFIX),
        ScanIndexForward=False,
        Limit=int(os.environ.get("CONTEXT_TURNS", "20")),
    )["Items"]
    latest = table.query(
        KeyConditionExpression=Key("PK").eq(pk) & Key("SK").begins_with(keys.SUMMARY_PREFIX),
        ScanIndexForward=False,
        Limit=1,
    )["Items"]
    model = BedrockResponder(
        os.environ["BEDROCK_MODEL_ID"], max_context_tokens=int(os.environ.get("CONTEXT_MAX_TOKENS", "3000"))
    )
    turns = [Turn.from_item(_plain(item)) for item in reversed(newest)]
    # The whole reply, then one frame. ConverseStream read to its end, as the stage's function is
    # allowed to call the model only so (a Converse would be refused).
    pieces = model.stream(turns, summary=Summary.from_item(latest[0]) if latest else None)
    reply = "".join(piece for piece in pieces if isinstance(piece, str))
    number = _append(table, meta, Role.ASSISTANT, reply)
    endpoint = f"https://{request['domainName']}/{request['stage']}"
    frame = message_frame(role=str(Role.ASSISTANT), session_id=session_id, turn_number=number, text=reply)
    boto3.client("apigatewaymanagementapi", endpoint_url=endpoint).post_to_connection(
        ConnectionId=request["connectionId"], Data=json.dumps(frame).encode()
    )
    return {"statusCode": 200}


def _plain(item: dict[str, Any]) -> dict[str, Any]:
    """The item with boto3's ``Binary`` wrappers unwrapped (the record classes read bytes)."""
    return {k: v.value if isinstance(v, Binary) else v for k, v in item.items()}


def _append(table: Any, meta: dict[str, Any], role: Role, content: str) -> int:
    """Put the turn, then the whole session item with the new count (the seeds' two writes)."""
    now = int(time.time())
    ttl = now + int(os.environ.get("SESSION_TTL_HOURS", "24")) * 3600
    number = int(meta.get("turn_count", 0)) + 1
    table.put_item(Item=Turn(str(meta["session_id"]), number, role, content, now, ttl).to_item())
    meta.update(turn_count=number, updated_at=now, ttl=ttl)
    table.put_item(Item=meta)
    return number
