"""lambdas.usecases.send_message: a customer's message admitted and stored once, or refused with nothing stored."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lambdas.shared import env
from lambdas.shared.records import SessionStatus
from lambdas.shared.store import DynamoSessionStore
from lambdas.usecases import send_message

CONN = "conn-1"


@pytest.fixture
def chat(store: DynamoSessionStore, table_name: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A session of alice with its connection recorded; a burst of 2 per connection. Yields the session id."""
    monkeypatch.setenv("TABLE_NAME", table_name)  # the idempotency records live in the stage's table
    monkeypatch.setenv("CHAT_CONNECTION_BURST", "2")
    env.reset()
    session_id = store.sessions.create_session("alice").session_id
    store.connections.put_connection(CONN, session_id=session_id, customer_id="alice", domain_name="d", stage="s")
    yield session_id
    env.reset()


def receive(
    store: DynamoSessionStore, text: str = "hello", key: str | None = None, customer: str = "alice"
) -> send_message.Received:
    return send_message.receive(store, CONN, customer, text, key)


def test_a_message_is_stored_as_the_next_turn_with_the_models_context(store: DynamoSessionStore, chat: str) -> None:
    received = receive(store)
    assert received.outcome == send_message.STORED
    assert received.accepted is not None
    assert (received.session_id, received.turn_number) == (chat, 1)
    assert received.accepted.context is not None
    assert [t.content for t in received.accepted.context.turns] == ["hello"]


def test_a_message_before_the_connection_is_recorded_is_not_ready(store: DynamoSessionStore, chat: str) -> None:
    received = send_message.receive(store, "conn-unknown", "alice", "hello", None)
    assert received.outcome == send_message.NOT_READY
    assert store.turns.list_turns(chat).items == []


def test_another_customers_connection_is_not_ready(store: DynamoSessionStore, chat: str) -> None:
    assert receive(store, customer="mallory").outcome == send_message.NOT_READY
    assert store.turns.list_turns(chat).items == []


def test_a_burst_past_the_limit_is_refused_with_when_to_retry(store: DynamoSessionStore, chat: str) -> None:
    assert [receive(store, f"m{n}").outcome for n in range(2)] == [send_message.STORED] * 2
    refused = receive(store, "m2")
    assert refused.outcome == send_message.RATE_LIMITED
    assert refused.retry_after_seconds >= 1
    assert len(store.turns.list_turns(chat).items) == 2


def test_a_closed_session_refuses_the_message(store: DynamoSessionStore, chat: str) -> None:
    store.sessions.update_status(chat, SessionStatus.DISCONNECTED)
    assert receive(store).outcome == send_message.SESSION_CLOSED


def test_a_resent_keyed_message_is_a_duplicate_of_the_stored_turn(store: DynamoSessionStore, chat: str) -> None:
    first = receive(store, "hello", key="m-1")
    again = receive(store, "hello", key="m-1")
    assert (again.outcome, again.session_id, again.turn_number) == (send_message.DUPLICATE, chat, first.turn_number)
    assert len(store.turns.list_turns(chat).items) == 1


def test_a_key_reused_with_other_text_stores_nothing(store: DynamoSessionStore, chat: str) -> None:
    receive(store, "hello", key="m-1")
    assert receive(store, "something else", key="m-1").outcome == send_message.CLIENT_MESSAGE_ID_REUSED
    assert len(store.turns.list_turns(chat).items) == 1
