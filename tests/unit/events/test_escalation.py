"""lambdas.events.escalation: an escalated handoff pages the managers once, in their inbox and on their topic."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError

from embedded.events import sqs_event
from lambdas.events import escalation
from lambdas.shared.records import HandoffStatus
from lambdas.shared.store import DynamoSessionStore
from tests.unit.events.handoff_queues import CONTEXT, handoff_body


@pytest.fixture
def managers(ddb_client: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    """A managers topic on moto with an observer queue; returns the queue URL."""
    sns = boto3.client("sns", region_name="us-east-1")
    sqs = boto3.client("sqs", region_name="us-east-1")
    topic = sns.create_topic(Name="managers")["TopicArn"]
    url = sqs.create_queue(QueueName="managers-observer")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn, Attributes={"RawMessageDelivery": "true"})
    monkeypatch.setattr(escalation, "managers_topic", lambda: topic)
    monkeypatch.setattr(escalation, "sns", lambda: sns)
    return str(url)


def _drain(url: str) -> list[dict[str, Any]]:
    sqs = boto3.client("sqs", region_name="us-east-1")
    return [
        json.loads(m["Body"]) for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
    ]


def _texts(url: str) -> list[str]:
    sqs = boto3.client("sqs", region_name="us-east-1")
    return [m["Body"] for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])]


def test_escalation_pages_the_managers_once_in_their_inbox_and_on_their_topic(
    wired: DynamoSessionStore, managers: str
) -> None:
    # Given a handoff the workflow escalated (no agent took it in time)
    session = wired.sessions.create_session("cust-1")
    handoff = wired.handoffs.put_handoff(
        session.session_id, reason="billing", priority="high", status=HandoffStatus.ESCALATED
    )
    body = handoff_body(session.session_id, handoff.handoff_id, event_type="escalated", priority="high")
    # When the router's escalated event is consumed twice (at-least-once delivery)
    assert escalation.handler(sqs_event(body), CONTEXT)["batchItemFailures"] == []
    assert escalation.handler(sqs_event(body), CONTEXT)["batchItemFailures"] == []
    # Then the managers heard of it once, with how to take it, and their shared inbox holds it
    told = _texts(managers)
    assert len(told) == 1
    assert f"POST /handoffs/{session.session_id}/accept" in told[0]
    items = wired.inbox.list_inbox("manager-1", managers=True).items
    assert [i.handoff_id for i in items] == [handoff.handoff_id]
    # and the consumer did not touch the handoff (the workflow owns its status)
    stored = wired.handoffs.get_handoff(session.session_id, handoff.handoff_id)
    assert stored is not None
    assert stored.status == HandoffStatus.ESCALATED


def test_escalation_of_a_handoff_taken_meanwhile_pages_nobody(wired: DynamoSessionStore, managers: str) -> None:
    session = wired.sessions.create_session("cust-1")
    handoff = wired.handoffs.put_handoff(
        session.session_id, reason="billing", status=HandoffStatus.ASSIGNED, agent_id="a-1"
    )
    body = handoff_body(session.session_id, handoff.handoff_id, event_type="escalated")
    assert escalation.handler(sqs_event(body), CONTEXT)["batchItemFailures"] == []
    assert _texts(managers) == []
    assert wired.inbox.list_inbox("manager-1", managers=True).items == []


def test_escalation_ignores_other_events(wired: DynamoSessionStore, managers: str) -> None:
    session = wired.sessions.create_session("cust-1")
    handoff = wired.handoffs.put_handoff(session.session_id, reason="billing", status=HandoffStatus.ESCALATED)
    body = handoff_body(session.session_id, handoff.handoff_id, event_type="assigned", agent_id="a-1")
    assert escalation.handler(sqs_event(body), CONTEXT)["batchItemFailures"] == []
    assert _texts(managers) == []


def test_a_failed_page_takes_the_inbox_item_back_so_the_retry_pages_again(
    wired: DynamoSessionStore, managers: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = wired.sessions.create_session("cust-1")
    handoff = wired.handoffs.put_handoff(session.session_id, reason="billing", status=HandoffStatus.ESCALATED)
    body = handoff_body(session.session_id, handoff.handoff_id, event_type="escalated")

    class Down:
        def publish(self, **_: Any) -> None:
            raise RuntimeError("SNS is down")

    working = escalation.sns
    monkeypatch.setattr(escalation, "sns", Down)
    with pytest.raises(BatchProcessingError):  # the one record failed: SQS delivers it again
        escalation.handler(sqs_event(body), CONTEXT)
    assert wired.inbox.list_inbox("manager-1", managers=True).items == []
    monkeypatch.setattr(escalation, "sns", working)
    assert escalation.handler(sqs_event(body), CONTEXT)["batchItemFailures"] == []
    assert len(_texts(managers)) == 1


# -- customer notifier -------------------------------------------------------------------------
