"""Handoff queue consumers (dashboard, escalation, customer notifier) and the metrics target, on moto."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError

from embedded.events import lambda_context, sns_notification, sqs_event
from lambdas.events import customer_notifier, dashboard, escalation, metrics
from lambdas.shared import connections, env, keys, mail
from lambdas.shared.records import HandoffStatus, Role, SessionStatus
from lambdas.shared.serialize import public, unmarshal_item
from lambdas.shared.store import DynamoSessionStore, InboxWrite

CONTEXT = lambda_context("fn", memory_limit_in_mb=128)


def handoff_body(session_id: str, handoff_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "handoff_id": handoff_id,
        "event_type": "handoff",
        "agent_id": None,
        "reason": "escalated",
        "priority": "high",
        "text": "We are connecting you with a support agent.",
        "event_id": "ev-1",
        **extra,
    }


@pytest.fixture
def wired(store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch) -> Iterator[DynamoSessionStore]:
    """Every consumer's store() is the moto store."""
    for module in (dashboard, escalation, customer_notifier):
        monkeypatch.setattr(module, "store", lambda: store)
    monkeypatch.setattr(customer_notifier, "configured_endpoint", lambda: None)
    yield store
    env.reset()


# -- store addition ----------------------------------------------------------------------------


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
    wired.handoffs.put_handoff(sid, reason="billing", status=HandoffStatus.QUEUED, handoff_id="h-2")
    waiting = {"session_id": sid, "handoff_id": "h-2", "event_type": "handoff_waiting", "reason": "billing"}
    # When consumed
    assert dashboard.handler(sqs_event(waiting), CONTEXT)["batchItemFailures"] == []
    # Then it is in the shared waiting inbox
    got = ddb_client.get_item(
        TableName=wired.table.table_name, Key={"PK": {"S": "AGENT#_waiting"}, "SK": {"S": "INBOX#h-2"}}
    )
    assert unmarshal_item(got["Item"])["session_id"] == sid
    # And any other message without an agent is refused alone (reported, then the DLQ)
    stray = {"session_id": "s-3", "handoff_id": "h-3", "event_type": "handoff"}
    event = sqs_event(waiting, stray)
    assert dashboard.handler(event, CONTEXT)["batchItemFailures"] == [
        {"itemIdentifier": event["Records"][1]["messageId"]}
    ]


# -- escalation --------------------------------------------------------------------------------


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


class FakePoster:
    """Stands in for connections.post_to_connection (the WebSocket sender)."""

    def __init__(self, delivered: bool) -> None:
        self.delivered = delivered
        self.posts: list[tuple[str, str, dict[str, Any]]] = []

    def __call__(self, endpoint: str, connection_id: str, payload: dict[str, Any]) -> bool:
        self.posts.append((endpoint, connection_id, dict(payload)))
        return self.delivered


def _connected_session(store: DynamoSessionStore) -> tuple[str, str]:
    session = store.sessions.create_session("cust-1")
    store.connections.put_connection(
        "conn-1", session_id=session.session_id, customer_id="cust-1", domain_name="ws.example", stage="dev"
    )
    store.sessions.set_connection(session.session_id, "conn-1")
    return session.session_id, "conn-1"


def test_customer_notifier_posts_to_the_live_connection(
    wired: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    session_id, connection_id = _connected_session(wired)
    poster = FakePoster(delivered=True)
    monkeypatch.setattr(connections, "post_to_connection", poster)
    body = {"session_id": session_id, "event_type": "handoff", "text": "An agent is coming."}
    assert customer_notifier.handler(sqs_event(body), CONTEXT)["batchItemFailures"] == []
    assert poster.posts == [
        (
            "https://ws.example/dev",
            connection_id,
            {
                "type": "notification",
                "event_type": "handoff",
                "session_id": session_id,
                "text": "An agent is coming.",
                "event_id": None,
            },
        )
    ]
    assert wired.turns.list_turns(session_id).items == []


def test_customer_notifier_records_the_text_when_the_client_is_gone(
    wired: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the connection answers 410 Gone
    session_id, _ = _connected_session(wired)
    monkeypatch.setattr(connections, "post_to_connection", FakePoster(delivered=False))
    body = {"session_id": session_id, "event_type": "handoff", "text": "An agent is coming."}
    # When notified
    assert customer_notifier.handler(sqs_event(body), CONTEXT)["batchItemFailures"] == []
    # Then the connection is cleared and the text is a system turn the customer reads on return
    session = wired.sessions.get_session(session_id)
    assert session is not None
    assert session.connection_id is None
    (turn,) = wired.turns.list_turns(session_id).items
    assert (turn.role, turn.content) == (Role.SYSTEM, "An agent is coming.")


def test_customer_notifier_uses_the_configured_endpoint_and_skips_messages_without_text(
    wired: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    session_id, _ = _connected_session(wired)
    poster = FakePoster(delivered=True)
    monkeypatch.setattr(connections, "post_to_connection", poster)
    monkeypatch.setattr(customer_notifier, "configured_endpoint", lambda: "https://api.example/prod")
    context_for_agent = {"session_id": session_id, "event_type": "handoff_context", "agent_id": "a-1"}
    event = sqs_event(context_for_agent, {"session_id": session_id, "event_type": "assigned", "text": "Hi"})
    assert customer_notifier.handler(event, CONTEXT)["batchItemFailures"] == []
    assert [(endpoint, payload["text"]) for endpoint, _, payload in poster.posts] == [
        ("https://api.example/prod", "Hi")
    ]


def test_customer_notifier_drops_notifications_of_closed_or_unknown_sessions(
    wired: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    poster = FakePoster(delivered=True)
    monkeypatch.setattr(connections, "post_to_connection", poster)
    closed = wired.sessions.create_session("cust-1")
    wired.sessions.update_status(closed.session_id, SessionStatus.DISCONNECTED)
    event = sqs_event(
        {"session_id": closed.session_id, "event_type": "handoff", "text": "t"},
        {"session_id": "unknown", "event_type": "handoff", "text": "t"},
        {"event_type": "handoff"},  # no session id: malformed
    )
    response = customer_notifier.handler(event, CONTEXT)
    assert response["batchItemFailures"] == [{"itemIdentifier": event["Records"][2]["messageId"]}]
    assert poster.posts == []
    assert wired.turns.list_turns(closed.session_id).items == []


@pytest.fixture
def noticing(wired: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, str, str]]]:
    """The notifier as deployed: idempotency on the table, a mailer that records what it sends."""
    monkeypatch.setenv("TABLE_NAME", wired.table.table_name)
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "CustomerNotifier")
    monkeypatch.setenv("NOTICE_SENDER", "notices@dev.mangaassist.example")
    monkeypatch.setenv("NOTICE_RECIPIENT_DOMAINS", "example.com")
    env.reset()
    sent: list[tuple[str, str, str]] = []

    def send(to: str, subject: str, text: str) -> mail.MailOutcome:
        if not mail.may_mail(to):
            return mail.MailOutcome.NOT_ALLOWED
        sent.append((to, subject, text))
        return mail.MailOutcome.SENT

    monkeypatch.setattr(mail, "send_mail", send)
    yield sent
    env.reset()


def _closed(session_id: str, event_id: str = "ev-closed", outcome: str = "active") -> dict[str, Any]:
    return {
        "session_id": session_id,
        "handoff_id": "h-1",
        "event_type": "completed",
        "agent_id": "agent-7",
        "reason": "billing",
        "resolution": "Volume 3 ships on the 14th.",
        "outcome": outcome,
        "event_id": event_id,
    }


def test_a_closed_handoff_reaches_the_connected_customer_once_as_the_closed_frame(
    wired: DynamoSessionStore, noticing: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    session_id, connection_id = _connected_session(wired)
    poster = FakePoster(delivered=True)
    monkeypatch.setattr(connections, "post_to_connection", poster)
    # When the router's "completed" event arrives twice (SQS redelivers)
    for _ in range(2):
        assert customer_notifier.handler(sqs_event(_closed(session_id)), CONTEXT)["batchItemFailures"] == []
    # Then one handoff_closed frame, with how it ended; nothing mailed or recorded
    ((_, to, frame),) = poster.posts
    assert to == connection_id
    assert (frame["type"], frame["outcome"], frame["resolution"]) == (
        "handoff_closed",
        "resume",
        "Volume 3 ships on the 14th.",
    )
    assert frame["event_id"] == "ev-closed"
    assert noticing == []
    assert wired.turns.list_turns(session_id).items == []


def test_a_customer_away_from_the_chat_is_mailed_once(wired: DynamoSessionStore, noticing: list[Any]) -> None:
    session = wired.sessions.create_session("cust-1", email="cust-1@example.com")
    for _ in range(2):
        body = _closed(session.session_id, outcome="disconnected")
        assert customer_notifier.handler(sqs_event(body), CONTEXT)["batchItemFailures"] == []
    ((to, subject, text),) = noticing
    assert to == "cust-1@example.com"
    assert "closed this conversation" in text
    assert "Volume 3 ships on the 14th." in text
    assert subject == customer_notifier.SUBJECT


def test_an_address_the_stage_may_not_mail_gets_the_notice_in_the_conversation(
    wired: DynamoSessionStore, noticing: list[Any]
) -> None:
    session = wired.sessions.create_session("cust-1", email="cust-1@customer.test")
    escalated = {**_closed(session.session_id, event_id="ev-esc"), "event_type": "escalated"}
    assert customer_notifier.handler(sqs_event(escalated), CONTEXT)["batchItemFailures"] == []
    assert noticing == []
    (turn,) = wired.turns.list_turns(session.session_id).items
    assert (turn.role, turn.content) == (Role.SYSTEM, customer_notifier.ESCALATED_TEXT)


def test_the_session_keeps_the_address_from_no_api_response(wired: DynamoSessionStore) -> None:
    session = wired.sessions.create_session("cust-1", email="cust-1@example.com")
    stored = wired.sessions.get_session(session.session_id)
    assert stored is not None
    assert stored.customer_email == "cust-1@example.com"
    assert "customer_email" not in public(stored)


# -- metrics -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("detail", "expected"),
    [
        ({"old_status": "none", "new_status": "active"}, "SessionsStarted"),
        ({"old_status": "handoff", "new_status": "active"}, "SessionsResumed"),
        ({"old_status": "active", "new_status": "handoff"}, None),
    ],
)
def test_metric_counts_new_sessions_apart_from_resumed_ones(detail: dict[str, str], expected: str | None) -> None:
    assert metrics.metric_name(detail) == expected


def test_metrics_handler_emits_one_emf_metric(capsys: pytest.CaptureFixture[str]) -> None:
    event = {
        "version": "0",
        "id": "e-1",
        "detail-type": "SessionStatusChanged",
        "source": "mangaassist.sessions",
        "account": "123456789012",
        "time": "2026-01-01T00:00:00Z",
        "region": "us-east-1",
        "resources": [],
        "detail": {"session_id": "s", "old_status": "none", "new_status": "active"},
    }
    assert metrics.handler(event, CONTEXT) == {"metric": "SessionsStarted"}
    emf = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    assert len(emf) == 1
    assert emf[0]["SessionsStarted"] == [1.0] or emf[0]["SessionsStarted"] == 1.0
