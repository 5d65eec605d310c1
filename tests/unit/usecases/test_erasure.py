"""lambdas.usecases.erasure: which items and export rows are one customer's, and the table's part of an erasure."""

from __future__ import annotations

import base64
import json

from lambdas.shared import keys
from lambdas.shared.records import TokenUsage
from lambdas.shared.serialize import marshal_item
from lambdas.shared.store import DynamoSessionStore
from lambdas.usecases import erasure

ALICE = "3f1c2a40-0000-4000-8000-00000000a11c"
BOB = "3f1c2a40-0000-4000-8000-0000000000b0"


class Waits:
    def __init__(self) -> None:
        self.stopped: list[tuple[str, str]] = []

    def __call__(self, token: str, handoff_id: str) -> bool:
        self.stopped.append((token, handoff_id))
        return True


def _chatting(store: DynamoSessionStore, customer_id: str, connection_id: str) -> str:
    session_id = store.sessions.create_session(customer_id, email=f"{customer_id}@example.com").session_id
    store.connections.put_connection(
        connection_id, session_id=session_id, customer_id=customer_id, domain_name="d", stage="s"
    )
    store.sessions.set_connection(session_id, connection_id)
    store.turns.add_turn(session_id, "user", f"{customer_id} says hello")
    store.limits.take_message_token("customer", customer_id, per_minute=10, burst=10)
    store.limits.take_message_token("conn", connection_id, per_minute=10, burst=10)
    store.budgets.spend_tokens(customer_id, TokenUsage(1200, 150))
    store.chat.accept_message(session_id, customer_id, "sent with an id", context_turns=1, client_message_id="m-1")
    return session_id


def _idempotency_record(store: DynamoSessionStore, name: str, answer: dict[str, str]) -> None:
    item = {
        "PK": f"SessionApi#{name}",
        "SK": "x",
        "idempotency_status": "COMPLETED",
        "idempotency_data": json.dumps(answer),
    }
    store.table.client.put_item(TableName=store.table.table_name, Item=marshal_item(item))


def _items(store: DynamoSessionStore) -> list[dict[str, object]]:
    return list(store.table.client.get_paginator("scan").paginate(TableName=store.table.table_name).search("Items"))


def test_erasing_a_customer_ends_her_waiting_handoff_and_deletes_everything_of_hers_only(
    store: DynamoSessionStore,
) -> None:
    # Given alice chatting with a handoff waiting for an agent, an idempotency record naming her, and bob chatting
    mine = _chatting(store, ALICE, "conn-a")
    store.handoffs.queue_handoff(
        mine, handoff_id="h-1", reason="billing", priority="normal", execution_arn=None, task_token="tok"
    )
    store.inbox.put_inbox_item(keys.WAITING_INBOX, session_id=mine, handoff_id="h-1", reason="billing")
    _idempotency_record(store, "mine", {"customer_id": ALICE})
    theirs = _chatting(store, BOB, "conn-b")
    _idempotency_record(store, "theirs", {"customer_id": BOB})
    waits = Waits()
    # When alice is erased
    counts = erasure.erase_table(store, ALICE, stop_wait=waits)
    # Then her wait was stopped, every kind of her items counted, and nothing of hers is left
    assert waits.stopped == [("tok", "h-1")]
    assert counts["handoffs_ended"] == 1
    assert {kind: counts[kind] for kind in ("sessions", "handoffs", "connections", "idempotency_records")} == {
        "sessions": 1,
        "handoffs": 1,
        "connections": 1,
        "idempotency_records": 1,
    }
    assert counts["turns"] >= 1
    assert counts["rate_buckets"] == 2
    assert (counts["token_budgets"], counts["sent_messages"]) == (1, 1)
    left = json.dumps(_items(store), default=str)
    assert ALICE not in left
    assert mine not in left
    assert "conn-a" not in left
    # And bob's data is all there
    assert store.sessions.get_session(theirs) is not None
    assert BOB in left
    assert "conn-b" in left
    assert store.connections.get_connection("conn-b") is not None


def test_a_second_erasure_finds_nothing_and_counts_zeros(store: DynamoSessionStore) -> None:
    _chatting(store, ALICE, "conn-a")
    erasure.erase_table(store, ALICE, stop_wait=Waits())
    again = erasure.erase_table(store, ALICE, stop_wait=Waits())
    assert set(again) == {*erasure.KINDS, "handoffs_ended"}
    assert not any(again.values())


def test_an_items_kind_follows_its_key() -> None:
    assert erasure.kind_of({"PK": "SESSION#s", "SK": "META"}) == "sessions"
    assert erasure.kind_of({"PK": "SESSION#s", "SK": "TURN#0000000001"}) == "turns"
    assert erasure.kind_of({"PK": "SESSION#s", "SK": "SUMMARY#0000000001"}) == "summaries"
    assert erasure.kind_of({"PK": "SESSION#s", "SK": "HANDOFF#h"}) == "handoffs"
    assert erasure.kind_of({"PK": "AGENT#_waiting", "SK": "QUEUE#1#0000000001#h"}) == "inbox_items"
    assert erasure.kind_of({"PK": "AGENT#a-1", "SK": "INBOX#h"}) == "inbox_items"
    assert erasure.kind_of({"PK": "CONN#c", "SK": "META"}) == "connections"
    assert erasure.kind_of({"PK": "LIMIT#customer#x", "SK": "RATE"}) == "rate_buckets"
    assert erasure.kind_of({"PK": "LIMIT#customer#x", "SK": "CONNECTIONS"}) == "rate_buckets"
    assert erasure.kind_of({"PK": "LIMIT#customer#x", "SK": "TOKENS#2026-01-01"}) == "token_budgets"
    assert erasure.kind_of({"PK": "LIMIT#customer#x", "SK": "SENT#m-1"}) == "sent_messages"
    assert erasure.kind_of({"PK": "fn#abc", "SK": "x", "idempotency_status": "COMPLETED"}) == "idempotency_records"
    assert erasure.kind_of({"PK": "AGENT#a-1", "SK": "META"}) == "other_items"


def test_the_erasure_record_is_never_the_customers_and_a_mention_in_any_text_is() -> None:
    sessions = frozenset({"s-1"})
    assert not erasure.belongs({"PK": "ERASURE#abc", "SK": "META", "customer_id": ALICE}, ALICE, sessions)
    assert erasure.belongs({"PK": "fn#x", "SK": "x", "data": {"nested": [f"id {ALICE}"]}}, ALICE, sessions)
    assert erasure.belongs({"PK": "SESSION#s-1", "SK": "TURN#0000000002"}, ALICE, sessions)
    assert erasure.belongs({"PK": "AGENT#a", "SK": "INBOX#h", "session_id": "s-1"}, ALICE, sessions)
    assert not erasure.belongs({"PK": "SESSION#s-2", "SK": "META", "customer_id": BOB}, ALICE, sessions)


def test_export_rows_of_the_customers_sessions_go_and_the_others_stay() -> None:
    def row(item: dict[str, object]) -> str:
        return json.dumps({"Item": marshal_item(item)}, default=lambda raw: base64.b64encode(raw).decode())

    body = "\n".join(
        [
            row({"PK": "SESSION#s-1", "SK": "META", "customer_id": ALICE}),
            row({"PK": "SESSION#s-1", "SK": "TURN#0000000001", "content": "her words"}),
            row({"PK": "SESSION#s-2", "SK": "META", "customer_id": BOB}),
            row({"PK": "SESSION#s-2", "SK": "TURN#0000000001", "content": "his words"}),
            row({"PK": f"LIMIT#customer#{ALICE}", "SK": "RATE"}),
            row({"PK": "fn#x", "SK": "x", "blob": b"\x00binary, base64 in an export"}),
        ]
    )
    kept, removed = erasure.export_rows_without(body + "\n", ALICE)
    assert removed == 3
    assert "her words" not in kept
    assert ALICE not in kept
    assert "his words" in kept
    assert kept.count("\n") == 3


def test_the_execution_name_is_the_same_for_the_same_request_and_holds_no_customer_id() -> None:
    first = erasure.execution_name(ALICE, "default")
    assert first == erasure.execution_name(ALICE, "default")
    assert first != erasure.execution_name(ALICE, "again") != erasure.execution_name(BOB, "default")
    assert ALICE not in first
    assert len(first) <= 80
