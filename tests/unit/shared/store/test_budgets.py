"""lambdas.shared.store.budgets: a customer's daily token budget and sent messages, on moto."""

from __future__ import annotations

import time

import pytest

from embedded.clock import START_TIME, FakeClock
from lambdas.shared import keys
from lambdas.shared.records import Role, TokenUsage, Turn
from lambdas.shared.store import DynamoSessionStore, SentMessage
from lambdas.shared.store.budgets import text_digest, utc_day
from lambdas.shared.store.table import Cancelled, Transaction

DAY = 24 * 3600


@pytest.mark.parametrize("zone", ["UTC", "Asia/Tokyo", "America/Los_Angeles"])
def test_the_day_is_the_utc_date_and_it_resets_at_the_next_utc_midnight(
    zone: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Whatever the machine's zone (Lambda's is UTC; a laptop running make local may not be)
    monkeypatch.setenv("TZ", zone)
    time.tzset()
    try:
        assert utc_day(1_767_225_600) == ("2026-01-01", 1_767_225_600 + DAY)  # midnight itself starts a day
        assert utc_day(1_767_225_600 + DAY - 1) == ("2026-01-01", 1_767_225_600 + DAY)
        assert utc_day(1_767_225_600 + DAY) == ("2026-01-02", 1_767_225_600 + 2 * DAY)
    finally:
        monkeypatch.undo()
        time.tzset()


def test_a_customer_below_the_budget_is_admitted_and_the_days_item_expires_a_day_after_the_day(
    store: DynamoSessionStore, clock: FakeClock
) -> None:
    clock.advance(3600)
    check = store.budgets.check_tokens("alice", budget=100)
    assert (check.admitted, check.used, check.resets_at) == (True, 0, START_TIME + DAY)
    assert check.resets_at_iso == "2026-01-02T00:00:00Z"
    # The check only reads; the day's first reply creates the item
    assert store.table.get(keys.token_budget_key("alice", "2026-01-01")) is None
    store.budgets.spend_tokens("alice", TokenUsage(5, 5))
    assert store.budgets.check_tokens("alice", budget=100).used == 10
    item = store.table.get(keys.token_budget_key("alice", "2026-01-01"))
    assert item is not None
    assert (item["PK"], item["SK"]) == ("LIMIT#customer#alice", "TOKENS#2026-01-01")
    assert (item["day"], item["ttl"]) == ("2026-01-01", START_TIME + 2 * DAY)


def test_spent_tokens_count_and_the_budget_refuses_once_they_reach_it(
    store: DynamoSessionStore, clock: FakeClock
) -> None:
    # Given replies of 60 and 39 tokens, then one of 1
    store.budgets.spend_tokens("alice", TokenUsage(50, 10))
    store.budgets.spend_tokens("alice", TokenUsage(30, 9))
    assert store.budgets.check_tokens("alice", budget=100).admitted  # 99 < 100
    store.budgets.spend_tokens("alice", TokenUsage(1, 0))
    # Then the budget of 100 refuses, with what was spent, and writes nothing
    before = store.table.get(keys.token_budget_key("alice", "2026-01-01"))
    refused = store.budgets.check_tokens("alice", budget=100)
    assert (refused.admitted, refused.used) == (False, 100)
    assert store.table.get(keys.token_budget_key("alice", "2026-01-01")) == before
    assert before is not None
    assert (before["tokens"], before["input_tokens"], before["output_tokens"], before["replies"]) == (100, 81, 19, 3)
    # And another customer, or a larger budget, is not refused
    assert store.budgets.check_tokens("bob", budget=100).admitted
    assert store.budgets.check_tokens("alice", budget=101).admitted
    # And the next UTC day starts from nothing
    clock.advance(DAY)
    assert store.budgets.check_tokens("alice", budget=100) == store.budgets.check_tokens("alice", budget=100)
    assert store.budgets.check_tokens("alice", budget=100).admitted


@pytest.mark.parametrize("budget", [0, -5, True, 2.5])
def test_a_budget_that_is_not_a_positive_int_is_refused_before_any_call(
    store: DynamoSessionStore, budget: object
) -> None:
    with pytest.raises(ValueError, match="budget must be an int >= 1"):
        store.budgets.check_tokens("alice", budget=budget)  # type: ignore[arg-type]
    assert store.table.get(keys.token_budget_key("alice", "2026-01-01")) is None


def _commit_sent(store: DynamoSessionStore, session_id: str, number: int, text: str = "hello") -> None:
    now = store.table.now()
    tx = Transaction(store.table.table_name)
    store.turns.put_in(tx, Turn(session_id, number, Role.USER, text, now, now + 60))
    store.budgets.sent_in(tx, "alice", "m-1", SentMessage(session_id, number, text_digest(text)))
    store.table.commit(tx)


def test_a_sent_message_is_found_by_its_id_and_holds_no_text(store: DynamoSessionStore) -> None:
    assert store.budgets.sent_message("alice", "m-1") is None
    _commit_sent(store, "s-1", 4)
    sent = store.budgets.sent_message("alice", "m-1")
    assert sent == SentMessage("s-1", 4, text_digest("hello"))
    assert sent.same("s-1", "hello")
    assert not sent.same("s-1", "hello!")
    assert not sent.same("s-2", "hello")
    item = store.table.get(keys.sent_message_key("alice", "m-1"))
    assert item is not None
    assert "hello" not in str(item)


def test_a_second_sent_record_of_the_same_session_is_refused_and_its_turn_is_not_written(
    store: DynamoSessionStore,
) -> None:
    _commit_sent(store, "s-1", 4)
    with pytest.raises(Cancelled) as cancelled:
        _commit_sent(store, "s-1", 5)
    assert cancelled.value.failed == frozenset({"sent"})
    assert store.table.get(keys.turn_key("s-1", 5)) is None
    assert store.budgets.sent_message("alice", "m-1") == SentMessage("s-1", 4, text_digest("hello"))


def test_the_id_is_free_again_in_another_session_or_once_its_record_expired(
    store: DynamoSessionStore, clock: FakeClock
) -> None:
    _commit_sent(store, "s-1", 4)
    _commit_sent(store, "s-2", 1)  # another session: a new message
    assert store.budgets.sent_message("alice", "m-1") == SentMessage("s-2", 1, text_digest("hello"))
    clock.advance(DAY)  # the record's TTL has passed (DynamoDB deletes it later)
    assert store.budgets.sent_message("alice", "m-1") is None
    _commit_sent(store, "s-2", 2)
    assert store.budgets.sent_message("alice", "m-1") == SentMessage("s-2", 2, text_digest("hello"))
