"""lambdas.events.dashboard: handoff messages become inbox items, written once and only while true."""

from __future__ import annotations

from typing import Any

from embedded.events import sns_notification, sqs_event
from lambdas.events import dashboard
from lambdas.shared import keys
from lambdas.shared.records import HandoffStatus
from lambdas.shared.serialize import unmarshal_item
from lambdas.shared.store import DynamoSessionStore, InboxWrite
from tests.unit.events.handoff_queues import CONTEXT, handoff_body


def test_put_inbox_item_writes_once(store: DynamoSessionStore, ddb_client: Any) -> None:
    sid = store.sessions.create_session("c-1").session_id
    store.handoffs.put_handoff(sid, reason="billing", status=HandoffStatus.ASSIGNED, agent_id="agent-1", handoff_id="h")
    assert store.inbox.put_inbox_item("agent-1", session_id=sid, handoff_id="h", reason="billing") == InboxWrite.WRITTEN
    assert store.inbox.put_inbox_item("agent-1", session_id=sid, handoff_id="h", reason="billing") == InboxWrite.PRESENT
    item = ddb_client.get_item(
        TableName=store.table.table_name, Key={"PK": {"S": "AGENT#agent-1"}, "SK": {"S": "INBOX#h"}}
    )
    assert unmarshal_item(item["Item"])["reason"] == "billing"
    assert keys.agent_inbox_key("agent-1", "h") == {"PK": "AGENT#agent-1", "SK": "INBOX#h"}


# -- dashboard ---------------------------------------------------------------------------------


def test_dashboard_puts_the_handoff_in_the_agents_inbox_and_reports_a_bad_message_alone(
    wired: DynamoSessionStore, ddb_client: Any
) -> None:
    # Given one good message (SNS envelope, as without raw delivery) and one that is not JSON
    sid = wired.sessions.create_session("c-1").session_id
    wired.handoffs.put_handoff(
        sid, reason="escalated", status=HandoffStatus.ASSIGNED, agent_id="agent-7", handoff_id="h-1"
    )
    good = sns_notification(handoff_body(sid, "h-1", agent_id="agent-7"))
    event = sqs_event(good, "not json")
    # When consumed
    response = dashboard.handler(event, CONTEXT)
    # Then the inbox item exists and only the bad message is reported
    assert response["batchItemFailures"] == [{"itemIdentifier": event["Records"][1]["messageId"]}]
    got = ddb_client.get_item(
        TableName=wired.table.table_name, Key={"PK": {"S": "AGENT#agent-7"}, "SK": {"S": "INBOX#h-1"}}
    )
    assert unmarshal_item(got["Item"])["session_id"] == sid
    # And a redelivery succeeds without a second item
    assert dashboard.handler(sqs_event(good), CONTEXT)["batchItemFailures"] == []


def test_dashboard_puts_a_waiting_customer_in_the_inbox_every_agent_reads(
    wired: DynamoSessionStore, ddb_client: Any
) -> None:
    # Given the workflow's broadcast that a customer waits (no agent is known yet)
    sid = wired.sessions.create_session("c-2").session_id
    handoff = wired.handoffs.put_handoff(
        sid, reason="billing", priority="high", status=HandoffStatus.QUEUED, handoff_id="h-2"
    )
    waiting = {"session_id": sid, "handoff_id": "h-2", "event_type": "handoff_waiting", "reason": "billing"}
    # When consumed
    assert dashboard.handler(sqs_event(waiting), CONTEXT)["batchItemFailures"] == []
    # Then it is in the shared waiting inbox, placed by the record's priority (high: rank 1) and age
    place = f"QUEUE#1#{handoff.created_at:010d}#h-2"
    got = ddb_client.get_item(TableName=wired.table.table_name, Key={"PK": {"S": "AGENT#_waiting"}, "SK": {"S": place}})
    assert unmarshal_item(got["Item"])["session_id"] == sid
    # And any other message without an agent is refused alone (reported, then the DLQ)
    stray = {"session_id": "s-3", "handoff_id": "h-3", "event_type": "handoff"}
    event = sqs_event(waiting, stray)
    assert dashboard.handler(event, CONTEXT)["batchItemFailures"] == [
        {"itemIdentifier": event["Records"][1]["messageId"]}
    ]


# -- escalation --------------------------------------------------------------------------------
