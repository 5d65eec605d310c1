"""lambdas.usecases.send_message: a customer's message admitted and stored once, or refused with nothing stored."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from embedded.clock import FakeClock
from lambdas.shared import env
from lambdas.shared.records import SessionStatus, TokenUsage
from lambdas.shared.store import DynamoSessionStore, SentMessage
from lambdas.usecases import send_message

CONN = "conn-1"


@pytest.fixture
def chat(store: DynamoSessionStore, table_name: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A session of alice with its connection recorded; a burst of 2 per connection. Yields the session id."""
    monkeypatch.setenv("TABLE_NAME", table_name)
    monkeypatch.setenv("CHAT_CONNECTION_BURST", "2")
    monkeypatch.setenv("CHAT_DAILY_TOKEN_BUDGET", "1000")
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


def test_a_resend_is_a_duplicate_without_a_new_turn_number_or_write(store: DynamoSessionStore, chat: str) -> None:
    first = receive(store, "hello", key="m-1")
    counted = store.sessions.get_session(chat)
    receive(store, "hello", key="m-1")
    # the turn counter did not move: the resend was answered from the admission's read
    after = store.sessions.get_session(chat)
    assert counted is not None
    assert after is not None
    assert after.turn_count == counted.turn_count == first.turn_number


def test_the_same_id_in_another_session_is_a_new_message(
    store: DynamoSessionStore, chat: str, clock: FakeClock
) -> None:
    receive(store, "hello", key="m-1")
    other = store.sessions.create_session("alice").session_id
    store.connections.put_connection(CONN, session_id=other, customer_id="alice", domain_name="d", stage="s")
    again = receive(store, "hello", key="m-1")
    assert (again.outcome, again.session_id, again.turn_number) == (send_message.STORED, other, 1)
    clock.advance(60)  # a burst of 2 per connection
    assert receive(store, "hello", key="m-1").outcome == send_message.DUPLICATE


def test_two_sends_of_one_message_racing_store_it_once(
    store: DynamoSessionStore, chat: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a first send stored, and a second whose admission read came before the first was written
    first = receive(store, "hello", key="m-1")
    real = store.budgets.sent_message
    reads: list[str] = []

    def late(customer_id: str, client_message_id: str) -> SentMessage | None:
        reads.append(client_message_id)
        return None if len(reads) == 1 else real(customer_id, client_message_id)

    monkeypatch.setattr(store.budgets, "sent_message", late)
    # When the second goes on to store it
    again = receive(store, "hello", key="m-1")
    # Then its transaction is refused, it is a duplicate of the first, and one turn is stored
    assert (again.outcome, again.turn_number) == (send_message.DUPLICATE, first.turn_number)
    assert len(reads) == 2
    assert [t.content for t in store.turns.list_turns(chat).items] == ["hello"]


def test_a_racing_send_with_other_text_is_a_reused_id(
    store: DynamoSessionStore, chat: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    receive(store, "hello", key="m-1")
    real = store.budgets.sent_message
    calls = iter([None])
    monkeypatch.setattr(store.budgets, "sent_message", lambda c, k: next(calls, None) or real(c, k))
    assert receive(store, "other text", key="m-1").outcome == send_message.CLIENT_MESSAGE_ID_REUSED
    assert [t.content for t in store.turns.list_turns(chat).items] == ["hello"]


def test_a_customer_over_the_daily_budget_is_refused_with_when_it_resets_and_nothing_is_stored(
    store: DynamoSessionStore, chat: str, clock: FakeClock
) -> None:
    # Given replies that spent the budget of 1000 tokens today
    clock.advance(6 * 3600)  # 06:00 UTC
    store.budgets.spend_tokens("alice", TokenUsage(900, 100))
    # When she sends a message
    refused = receive(store, "hello")
    # Then it is refused until midnight UTC, and nothing is stored
    assert refused.outcome == send_message.OVER_BUDGET
    assert refused.retry_after_seconds == 18 * 3600
    assert refused.resets_at == "2026-01-02T00:00:00Z"
    assert store.turns.list_turns(chat).items == []
    # And the next UTC day she may chat again
    clock.advance(18 * 3600)
    assert receive(store, "hello").outcome == send_message.STORED


def test_a_resend_of_a_stored_message_is_answered_even_over_the_budget(
    store: DynamoSessionStore, chat: str, clock: FakeClock
) -> None:
    first = receive(store, "hello", key="m-1")
    store.budgets.spend_tokens("alice", TokenUsage(1000, 0))
    again = receive(store, "hello", key="m-1")
    assert (again.outcome, again.turn_number) == (send_message.DUPLICATE, first.turn_number)
    clock.advance(60)  # a burst of 2 per connection
    assert receive(store, "new", key="m-2").outcome == send_message.OVER_BUDGET
