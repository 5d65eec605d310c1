"""BASELINE for `make bench` only, never deployed: the chat message path as it was, one AWS call after another.

Before the model is called: GetItem of the connection; the connection's rate bucket, then the
customer's, each a conditional UpdateItem that assumes the bucket is in a burst, plus a second,
compare-and-set write when it is new or idle (a person typing); GetItem of the session; the
turn's counter UpdateItem, then its PutItem; a Query of the newest turns; a Query of the latest
summary. Then the reply is stored (two writes) and posted. Same checks and same answers as the
message Lambda; only the order of the calls differs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from botocore.exceptions import ClientError

from lambdas.shared import keys
from lambdas.shared.records import TURN_ACCEPTING, Role, SessionStatus, Summary, Turn
from lambdas.shared.serialize import marshal, marshal_item, unmarshal_item
from lambdas.shared.store import DynamoSessionStore, Rate
from lambdas.shared.store.limits import CONNECTION_SCOPE, CUSTOMER_SCOPE
from lambdas.ws.frames import ack_frame, error_frame, message_frame, rate_limited_frame

Send = Callable[[Mapping[str, Any]], bool]


class WholeReply(Protocol):
    """A model answered in one call: the reply arrives whole, as Converse gives it."""

    def reply(self, turns: Sequence[Turn], *, summary: Summary | None = None) -> str: ...


def handle_message(
    store: DynamoSessionStore,
    model: WholeReply,
    connection_id: str,
    customer_id: str,
    text: str,
    send: Send,
    *,
    per_connection: Rate,
    per_customer: Rate,
    context_turns: int,
    clock: Callable[[], float],
) -> str:
    """The message path of before, for a frame that parsed; returns the outcome."""
    connection = store.connections.get_connection(connection_id)
    if connection is None or connection.customer_id != customer_id:
        send(error_frame("session_not_ready", "not ready"))
        return "not_ready"
    for scope, subject, rate in (
        (CONNECTION_SCOPE, connection_id, per_connection),
        (CUSTOMER_SCOPE, customer_id, per_customer),
    ):
        retry_after = _take_token(store, clock, scope, subject, rate)
        if retry_after:
            send(rate_limited_frame(retry_after))
            return "rate_limited"
    session = store.sessions.get_session(connection.session_id)
    if session is None or session.status not in TURN_ACCEPTING:
        send(error_frame("session_closed", "closed"))
        return "session_closed"
    user_turn = store.turns.add_turn(session.session_id, Role.USER, text)
    if session.status == SessionStatus.HANDOFF:
        frame = ack_frame(
            session_id=session.session_id, turn_number=user_turn.turn_number, status="handoff", message=""
        )
        return "handoff" if send(frame) else "gone"
    turns = store.turns.list_turns(session.session_id, limit=context_turns).items
    summary = store.turns.latest_summary(session.session_id)
    reply = model.reply(turns, summary=summary)
    reply_turn = store.turns.add_turn(session.session_id, Role.ASSISTANT, reply)
    frame = message_frame(
        role="assistant", session_id=session.session_id, turn_number=reply_turn.turn_number, text=reply
    )
    return "replied" if send(frame) else "gone"


def _take_token(store: DynamoSessionStore, clock: Callable[[], float], scope: str, subject: str, rate: Rate) -> int:
    """The bucket as it was: 0 when admitted, else the seconds to wait."""
    interval = math.ceil(60_000 / rate.per_minute)
    tolerance = (rate.burst - 1) * interval
    key = marshal_item(keys.rate_bucket_key(scope, subject))
    names = {"#tat": "tat", "#ttl": "ttl"}
    for _ in range(4):
        now = int(clock() * 1000)
        ttl = math.ceil((now + tolerance + interval) / 1000) + 60
        try:
            store.table.client.update_item(
                TableName=store.table.table_name,
                Key=key,
                UpdateExpression="SET #tat = #tat + :interval, #ttl = :ttl",
                ConditionExpression="#tat BETWEEN :now AND :limit",
                ExpressionAttributeNames=names,
                ExpressionAttributeValues={
                    ":interval": marshal(interval),
                    ":ttl": marshal(ttl),
                    ":now": marshal(now),
                    ":limit": marshal(now + tolerance),
                },
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
            return 0
        except ClientError as err:
            if err.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            old = unmarshal_item(err.response["Item"]) if err.response.get("Item") else {}
        old_tat = int(old["tat"]) if "tat" in old else None
        if old_tat is not None and old_tat > now + tolerance:
            return max(1, math.ceil((old_tat - now - tolerance) / 1000))
        restart: dict[str, Any] = {
            ":tat": marshal(now + interval),
            ":ttl": marshal(math.ceil((now + interval) / 1000) + 60),
        }
        if old_tat is None:
            condition = "attribute_not_exists(#tat)"
        else:
            condition = "#tat = :old"
            restart[":old"] = marshal(old_tat)
        try:
            store.table.client.update_item(
                TableName=store.table.table_name,
                Key=key,
                UpdateExpression="SET #tat = :tat, #ttl = :ttl",
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=restart,
            )
            return 0
        except ClientError as err:
            if err.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
    return 1
