"""lambdas.events.customer_notifier: the customer hears of a handoff once, by frame, mail or transcript."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from embedded.events import sqs_event
from lambdas.events import customer_notifier
from lambdas.events.messages import parse_body
from lambdas.shared import connections, env, mail
from lambdas.shared.records import Role, SessionStatus
from lambdas.shared.serialize import public
from lambdas.shared.store import DynamoSessionStore
from tests.unit.events.handoff_queues import CONTEXT


class FakePoster:
    """Stands in for connections.post_to_connection (the WebSocket sender)."""

    def __init__(self, delivered: bool) -> None:
        self.delivered = delivered
        self.posts: list[tuple[str, str, dict[str, Any]]] = []

    def __call__(self, endpoint: str, connection_id: str, payload: dict[str, Any]) -> bool:
        self.posts.append((endpoint, connection_id, dict(payload)))
        return self.delivered


def _connected_session(store: DynamoSessionStore, email: str | None = None) -> tuple[str, str]:
    session = store.sessions.create_session("cust-1", email=email)
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


def test_a_handoff_closed_because_its_session_was_deleted_tells_no_one_the_assistant_is_back() -> None:
    # Given handoffs closed with the session back with the assistant, ended, and deleted
    outcomes = {}
    for outcome in ("active", "disconnected", "deleted"):
        notice = customer_notifier.notice_for(parse_body(json.dumps(_closed("s-1", outcome=outcome))))
        assert notice is not None
        outcomes[outcome] = (notice.frame["outcome"], notice.text)
    # Then only the first says the assistant is here again
    assert outcomes["active"][0] == "resume"
    assert customer_notifier.CLOSED_TEXT["resume"] in outcomes["active"][1]
    for ended in ("disconnected", "deleted"):
        assert outcomes[ended][0] == "end"
        assert customer_notifier.CLOSED_TEXT["resume"] not in outcomes[ended][1]


@pytest.mark.parametrize("connected", [True, False], ids=["connected", "away"])
@pytest.mark.parametrize("event_type", ["completed", "handoff_failed"])
def test_a_deleted_session_is_neither_posted_mailed_nor_written_to(
    wired: DynamoSessionStore,
    noticing: list[Any],
    monkeypatch: pytest.MonkeyPatch,
    connected: bool,
    event_type: str,
) -> None:
    # Given a session deleted during its handoff (by the customer, an admin or an erasure that has
    # not yet removed its items), with its address and, or not, its connection record
    email = "cust-1@example.com"
    if connected:
        session_id, _ = _connected_session(wired, email=email)
    else:
        session_id = wired.sessions.create_session("cust-1", email=email).session_id
    wired.sessions.update_status(session_id, SessionStatus.DELETED)
    poster = FakePoster(delivered=True)
    monkeypatch.setattr(connections, "post_to_connection", poster)
    # When the handoff's closed notice, or the workflow's failed notice, arrives
    body = {**_closed(session_id, outcome="deleted"), "event_type": event_type, "text": "No agent."}
    assert customer_notifier.notify(wired, parse_body(json.dumps(body))) == "dropped"
    # Then nothing is posted, mailed or recorded, and the session keeps what it had
    assert (poster.posts, noticing) == ([], [])
    assert wired.turns.list_turns(session_id).items == []
    stored = wired.sessions.get_session(session_id)
    assert stored is not None
    assert stored.connection_id == ("conn-1" if connected else None)


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


def _queued(store: DynamoSessionStore, session_id: str, handoff_id: str, priority: str = "normal") -> None:
    store.handoffs.queue_handoff(
        session_id, handoff_id=handoff_id, reason="general", priority=priority, execution_arn=None, task_token="t"
    )
    store.inbox.put_inbox_item("_waiting", session_id=session_id, handoff_id=handoff_id, reason="general")


def test_a_queued_customer_is_told_at_once_that_they_wait_and_how_many_are_before_them(
    wired: DynamoSessionStore, noticing: list[tuple[str, str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given another customer asking the same help already waits, more urgently
    other = wired.sessions.create_session("cust-0").session_id
    _queued(wired, other, "h-0", priority="urgent")
    session_id, connection_id = _connected_session(wired)
    _queued(wired, session_id, "h-1")
    poster = FakePoster(delivered=True)
    monkeypatch.setattr(connections, "post_to_connection", poster)
    # When the router's queued message arrives
    body = {"session_id": session_id, "event_type": "queued", "handoff_id": "h-1", "event_id": "e-1"}
    assert customer_notifier.handler(sqs_event(body), CONTEXT)["batchItemFailures"] == []
    # Then the live connection gets the queued notice, status handoff, one customer ahead
    ((_, to, frame),) = poster.posts
    assert to == connection_id
    assert {k: frame[k] for k in ("type", "event_type", "status", "handoff_id", "ahead")} == {
        "type": "notification",
        "event_type": "queued",
        "status": "handoff",
        "handoff_id": "h-1",
        "ahead": 1,
    }
    assert "1 customer before you" in frame["text"]
    # and nothing is written to the transcript or mailed
    assert wired.turns.list_turns(session_id).items == []
    assert noticing == []


@pytest.mark.parametrize("moved_on", ["assigned", "failed", "connection_gone"])
def test_a_queued_notice_is_only_for_a_customer_still_waiting_and_still_connected(
    wired: DynamoSessionStore, noticing: list[tuple[str, str, str]], monkeypatch: pytest.MonkeyPatch, moved_on: str
) -> None:
    session_id, connection_id = _connected_session(wired)
    _queued(wired, session_id, "h-1")
    if moved_on == "connection_gone":
        wired.connections.delete_connection(connection_id)
    else:
        wired.handoffs.update_handoff(session_id, "h-1", status=moved_on, agent_id="agent-1")
    poster = FakePoster(delivered=True)
    monkeypatch.setattr(connections, "post_to_connection", poster)
    body = {"session_id": session_id, "event_type": "queued", "handoff_id": "h-1", "event_id": "e-2"}
    assert customer_notifier.handler(sqs_event(body), CONTEXT)["batchItemFailures"] == []
    assert poster.posts == []
    assert wired.turns.list_turns(session_id).items == []
    assert noticing == []
