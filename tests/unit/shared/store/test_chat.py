"""The chat's message path in the store: admission and acceptance, their round trips and refusals, on moto."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from embedded.round_trips import RoundTrips
from lambdas.shared.errors import Conflict, InvalidInput, SessionClosed, SessionNotFound
from lambdas.shared.records import Role, Turn
from lambdas.shared.serialize import marshal_item
from lambdas.shared.store import Admission, DynamoSessionStore, Rate
from lambdas.shared.store.limits import CONNECTION_SCOPE, CUSTOMER_SCOPE

CONN = "conn-1"
#: A connection bucket of 2 and a customer bucket of 3, one message a minute each.
PER_CONNECTION = Rate(per_minute=1, burst=2)
PER_CUSTOMER = Rate(per_minute=1, burst=3)


#: Simulated network time per call, so that calls made at once overlap on moto.
LATENCY = 0.02


def chatting(store: DynamoSessionStore, customer_id: str = "alice", connection_id: str = CONN) -> str:
    """A session of ``customer_id`` with a greeting, and its connection record; returns the session id."""
    session_id = store.sessions.create_session(customer_id).session_id
    store.turns.add_turn(session_id, "assistant", "Hi! How can I help?")
    store.connections.put_connection(
        connection_id, session_id=session_id, customer_id=customer_id, domain_name="d", stage="dev"
    )
    return session_id


def admit(store: DynamoSessionStore, customer_id: str = "alice", connection_id: str = CONN) -> Any:
    return store.chat.admit_message(
        connection_id, customer_id, per_connection=PER_CONNECTION, per_customer=PER_CUSTOMER
    )


def tokens_left(store: DynamoSessionStore, scope: str, subject: str, rate: Rate) -> int:
    """How many messages the bucket would admit now (taken and given back, so it is left as it was)."""
    admitted = 0
    while (
        admitted <= rate.burst
        and store.limits.take_message_token(scope, subject, per_minute=rate.per_minute, burst=rate.burst).admitted
    ):
        admitted += 1
    for _ in range(admitted):
        store.limits.give_back_message_token(scope, subject, per_minute=rate.per_minute)
    return admitted


# ------------------------------------------------------------------ admit_message


def test_admission_reads_the_connection_and_takes_both_tokens_at_once(store: DynamoSessionStore) -> None:
    # Given a customer's connection
    session_id = chatting(store)
    # When a message is admitted
    with RoundTrips(store.table.client, latency=LATENCY) as trips:
        gate = admit(store)
    # Then it names the connection and is admitted, from three calls made at once (one round trip)
    assert gate.admitted
    assert gate.connection is not None
    assert gate.connection.session_id == session_id
    assert sorted(trips.operations()) == ["GetItem", "UpdateItem", "UpdateItem"]
    assert trips.sequential() == 1
    assert tokens_left(store, CONNECTION_SCOPE, CONN, PER_CONNECTION) == 1
    assert tokens_left(store, CUSTOMER_SCOPE, "alice", PER_CUSTOMER) == 2


def test_a_connection_that_is_not_recorded_yet_is_not_ready_and_keeps_no_token(store: DynamoSessionStore) -> None:
    gate = admit(store, connection_id="not-onboarded")
    assert gate.connection is None
    assert not gate.admitted
    assert tokens_left(store, CONNECTION_SCOPE, "not-onboarded", PER_CONNECTION) == 2
    assert tokens_left(store, CUSTOMER_SCOPE, "alice", PER_CUSTOMER) == 3


def test_another_customers_connection_is_not_ready_and_charges_neither_bucket(store: DynamoSessionStore) -> None:
    chatting(store, "alice")
    gate = admit(store, customer_id="mallory")
    assert gate.connection is None
    assert tokens_left(store, CONNECTION_SCOPE, CONN, PER_CONNECTION) == 2
    assert tokens_left(store, CUSTOMER_SCOPE, "mallory", PER_CUSTOMER) == 3


def test_a_connection_bucket_refusal_wins_and_keeps_no_customer_token(store: DynamoSessionStore) -> None:
    # Given a connection that used its burst of 2
    chatting(store)
    assert [admit(store).admitted for _ in range(2)] == [True, True]
    # When it sends a third message
    gate = admit(store)
    # Then the connection's bucket refuses it, with the wait, and the customer keeps their last token
    assert gate.connection is not None
    assert gate.admission == Admission(False, 60)
    assert not gate.admitted
    assert tokens_left(store, CUSTOMER_SCOPE, "alice", PER_CUSTOMER) == 1


def test_a_customer_bucket_refusal_keeps_the_connection_token_as_the_sequential_order_did(
    store: DynamoSessionStore,
) -> None:
    # Given alice used her customer burst of 3 on another connection
    chatting(store, "alice", "conn-2")
    for _ in range(3):
        store.limits.take_message_token(CUSTOMER_SCOPE, "alice", per_minute=1, burst=3)
    chatting(store, "alice", CONN)
    # When she writes on this one
    gate = admit(store)
    # Then the customer's bucket refuses; the connection's token was spent before that decision
    assert gate.admission == Admission(False, 60)
    assert tokens_left(store, CONNECTION_SCOPE, CONN, PER_CONNECTION) == 1


def test_admission_refuses_blank_ids_before_any_call(store: DynamoSessionStore) -> None:
    with RoundTrips(store.table.client) as trips, pytest.raises(InvalidInput):
        admit(store, connection_id="")
    assert trips.calls == []


# ------------------------------------------------------------------ accept_message


def test_accept_reserves_then_stores_and_reads_the_context_at_once(store: DynamoSessionStore) -> None:
    # Given a session with turns 1..5 and a summary of 1..4
    session_id = chatting(store)
    for n in range(2, 6):
        store.turns.add_turn(session_id, "user" if n % 2 == 0 else "assistant", f"turn {n}")
    store.turns.put_summary(
        session_id, 1, summary_text="They talked.", window_start=1, window_end=4, turn_count_at_summary=4
    )
    # When a message is accepted with a context of 3 turns
    with RoundTrips(store.table.client, latency=LATENCY) as trips:
        accepted = store.chat.accept_message(session_id, "alice", "Is volume 3 out?", context_turns=3)
    # Then it is turn 6, stored; the context is turns 4, 5 and it, with the summary
    assert accepted.turn.turn_number == 6
    assert accepted.session.turn_count == 6
    assert store.turns.turns_between(session_id, 6, 6) == [accepted.turn]
    assert accepted.context is not None
    assert [t.turn_number for t in accepted.context.turns] == [4, 5, 6]
    assert accepted.context.turns[-1].content == "Is volume 3 out?"
    assert accepted.context.summary is not None
    assert accepted.context.summary.summary_text == "They talked."
    # from one UpdateItem, then a PutItem and two Queries at once: two round trips
    assert trips.operations()[0] == "UpdateItem"
    assert sorted(trips.operations()[1:]) == ["PutItem", "Query", "Query"]
    assert trips.sequential() == 2


def test_accept_with_a_context_of_one_turn_reads_no_turns(store: DynamoSessionStore) -> None:
    session_id = chatting(store)
    with RoundTrips(store.table.client) as trips:
        accepted = store.chat.accept_message(session_id, "alice", "hello", context_turns=1)
    assert accepted.context is not None
    assert accepted.context.turns == [accepted.turn]
    assert accepted.context.summary is None
    assert sorted(trips.operations()) == ["PutItem", "Query", "UpdateItem"]


def test_accept_in_a_handoff_stores_the_turn_and_reads_nothing_for_the_model(store: DynamoSessionStore) -> None:
    session_id = chatting(store)
    store.sessions.update_status(session_id, "handoff")
    with RoundTrips(store.table.client) as trips:
        accepted = store.chat.accept_message(session_id, "alice", "Where is my order?", context_turns=20)
    assert accepted.context is None
    assert accepted.session.status == "handoff"
    assert trips.operations() == ["UpdateItem", "PutItem"]
    assert store.turns.turns_between(session_id, 2, 2) == [accepted.turn]


def test_accept_while_the_handoff_waits_stores_the_turn_for_the_agent_and_gives_the_model_nothing(
    store: DynamoSessionStore,
) -> None:
    # Given a customer whose handoff waits in the queue (the session itself is still active)
    session_id = chatting(store)
    store.handoffs.queue_handoff(
        session_id, handoff_id="h-1", reason="billing", priority="normal", execution_arn=None, task_token="tok"
    )
    # When they write (each call held long enough that a busy machine still starts the four together)
    with RoundTrips(store.table.client, latency=10 * LATENCY) as trips:
        accepted = store.chat.accept_message(session_id, "alice", "Are you there?", context_turns=20)
    # Then the turn is stored and nothing is for the model: the agent who takes over reads it
    assert (accepted.context, accepted.waiting) == (None, True)
    assert accepted.session.status == "active"
    assert store.turns.turns_between(session_id, 2, 2) == [accepted.turn]
    # and the handoff was read beside the context: still two round trips
    assert sorted(trips.operations()[1:]) == ["GetItem", "PutItem", "Query", "Query"]
    assert trips.sequential() == 2


@pytest.mark.parametrize("ended", ["completed", "failed"])
def test_accept_after_the_handoff_ended_is_the_models_again(store: DynamoSessionStore, ended: str) -> None:
    session_id = chatting(store)
    store.handoffs.queue_handoff(
        session_id, handoff_id="h-1", reason="billing", priority="normal", execution_arn=None, task_token="tok"
    )
    store.handoffs.update_handoff(session_id, "h-1", status=ended)
    accepted = store.chat.accept_message(session_id, "alice", "Hello again", context_turns=20)
    assert accepted.waiting is False
    assert accepted.context is not None
    assert accepted.context.turns[-1].content == "Hello again"


@pytest.mark.parametrize("status", ["disconnected", "deleted"])
def test_accept_in_a_session_that_no_longer_accepts_turns_stores_nothing_and_moves_no_counter(
    store: DynamoSessionStore, status: str
) -> None:
    # Given a session that ended after the connection was admitted
    session_id = chatting(store)
    store.sessions.update_status(session_id, status)
    before = store.sessions.get_session(session_id)
    # When the message is accepted
    with RoundTrips(store.table.client) as trips, pytest.raises(SessionClosed):
        store.chat.accept_message(session_id, "alice", "anyone?", context_turns=20)
    # Then the one conditional write refused it: no turn, the counter unmoved, nothing read
    assert trips.operations() == ["UpdateItem"]
    assert store.sessions.get_session(session_id) == before
    assert len(store.turns.list_turns(session_id).items) == 1


def test_accept_for_another_customer_stores_nothing(store: DynamoSessionStore) -> None:
    session_id = chatting(store, "alice")
    with pytest.raises(SessionNotFound):
        store.chat.accept_message(session_id, "mallory", "hijack", context_turns=20)
    assert store.sessions.get_session(session_id).turn_count == 1  # type: ignore[union-attr]
    with pytest.raises(SessionNotFound):
        store.chat.accept_message("no-such-session", "alice", "hello", context_turns=20)


@pytest.mark.parametrize("context_turns", [0, 102, True])
def test_accept_refuses_a_context_size_out_of_range_before_any_write(
    store: DynamoSessionStore, context_turns: Any
) -> None:
    session_id = chatting(store)
    with pytest.raises(InvalidInput, match="limit"):
        store.chat.accept_message(session_id, "alice", "hello", context_turns=context_turns)
    assert store.sessions.get_session(session_id).turn_count == 1  # type: ignore[union-attr]


def test_a_failed_put_is_raised_after_the_reads_end_and_leaves_a_gap_not_a_duplicate(
    store: DynamoSessionStore,
) -> None:
    # Given turn 2 is already stored (as if an earlier write had raced ahead under the same number)
    session_id = chatting(store)
    squatter = Turn(session_id, 2, Role.USER, "first", created_at=0, ttl=0)
    store.table.client.put_item(TableName=store.table.table_name, Item=marshal_item(squatter.to_item()))
    # When a message is accepted under number 2
    with pytest.raises(Conflict, match="exists already"):
        store.chat.accept_message(session_id, "alice", "hello", context_turns=5)
    # Then the stored turn is untouched, and the counter moved past it: the next message gets number 3
    assert [t.content for t in store.turns.turns_between(session_id, 2, 2)] == ["first"]
    assert store.chat.accept_message(session_id, "alice", "again", context_turns=5).turn.turn_number == 3


# ------------------------------------------------------------------ concurrency plumbing


def test_together_waits_for_every_call_before_it_raises_the_first_error(store: DynamoSessionStore) -> None:
    finished: list[str] = []

    def slow() -> str:
        time.sleep(0.05)
        finished.append("slow")
        return "slow"

    def failing() -> str:
        raise ValueError("first")

    with pytest.raises(ValueError, match="first"):
        store.table.together(failing, slow)
    assert finished == ["slow"]
    assert store.table.together(lambda: 1, lambda: "two", lambda: None) == (1, "two", None)


def test_a_burst_of_admissions_on_one_connection_never_admits_more_than_the_burst(make_store: Any) -> None:
    # Given 10 messages of one connection racing, each in its own Lambda
    store = make_store()
    chatting(store)
    results: list[bool] = []
    lock = threading.Lock()

    def racer() -> None:
        gate = admit(make_store())
        with lock:
            results.append(gate.admitted)

    threads = [threading.Thread(target=racer) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Then at most the connection's burst of 2 is admitted, at least one is, and the customer paid
    # for the admitted ones only: every customer token a refused racer held is back. (Both tokens
    # are taken at once, so a racer refused by the connection may hold a customer token for a
    # moment while a connection winner asks: that winner is refused, never one too many admitted.)
    admitted = results.count(True)
    assert 1 <= admitted <= 2
    assert tokens_left(store, CUSTOMER_SCOPE, "alice", PER_CUSTOMER) == PER_CUSTOMER.burst - admitted


def test_admission_with_a_budget_and_an_id_checks_both_in_the_same_round_trip(store: DynamoSessionStore) -> None:
    # Given a customer's connection and a message she sent before under the id m-1
    session_id = chatting(store)
    first = store.chat.accept_message(session_id, "alice", "hello", context_turns=1, client_message_id="m-1")
    # When the same id is admitted again, under a budget
    with RoundTrips(store.table.client, latency=LATENCY) as trips:
        gate = store.chat.admit_message(
            CONN,
            "alice",
            per_connection=PER_CONNECTION,
            per_customer=PER_CUSTOMER,
            token_budget=1000,
            client_message_id="m-1",
        )
    # Then five calls were made at once (the connection, the budget and the first send read; two buckets
    # written): one round trip; the budget admits and the first send is found
    assert sorted(trips.operations()) == ["GetItem", "GetItem", "GetItem", "UpdateItem", "UpdateItem"]
    assert trips.sequential() == 1
    assert gate.budget is not None
    assert gate.budget.admitted
    assert gate.sent is not None
    assert (gate.sent.session_id, gate.sent.turn_number) == (session_id, first.turn.turn_number)


def test_a_keyed_message_in_a_handoff_is_stored_with_its_sent_record(store: DynamoSessionStore) -> None:
    session_id = chatting(store)
    store.sessions.update_status(session_id, "handoff")
    accepted = store.chat.accept_message(session_id, "alice", "hello", context_turns=5, client_message_id="m-1")
    assert accepted.context is None
    sent = store.budgets.sent_message("alice", "m-1")
    assert sent is not None
    assert sent.turn_number == accepted.turn.turn_number
