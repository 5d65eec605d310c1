"""What the handoff tests share: a handoff begun as the workflow begins it, and an inbox's raw rows."""

from __future__ import annotations

from typing import Any

from lambdas.shared import keys
from lambdas.shared.store import DynamoSessionStore
from lambdas.usecases.assign_agent import begin_handoff


def begin(store: DynamoSessionStore, session_id: str, handoff_id: str = "h-1", agent_id: str = "a-1") -> Any:
    """Hand ``session_id`` to ``agent_id`` as the workflow's begin step does."""
    return begin_handoff(
        store,
        session_id,
        handoff_id=handoff_id,
        agent_id=agent_id,
        reason="billing",
        priority="normal",
        execution_arn="arn:exec",
        system_text="handed over",
    )


def inbox_of(store: DynamoSessionStore, inbox: str) -> list[str]:
    """The handoff ids stored in an inbox partition, whatever their truth (the raw rows)."""
    prefix = keys.QUEUE_PREFIX if inbox in keys.SHARED_INBOXES else keys.INBOX_PREFIX
    rows = store.table.client.query(
        TableName=store.table.table_name,
        KeyConditionExpression="PK = :pk AND begins_with(SK, :inbox)",
        ExpressionAttributeValues={":pk": {"S": keys.agent_pk(inbox)}, ":inbox": {"S": prefix}},
    )["Items"]
    return [row["handoff_id"]["S"] for row in rows]
