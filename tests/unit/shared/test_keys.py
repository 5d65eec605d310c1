"""lambdas.shared.keys: every PK/SK shape formatted in one place."""

from __future__ import annotations

import pytest

from lambdas.shared import keys


def test_session_turn_and_handoff_keys() -> None:
    assert keys.session_key("s-1") == {"PK": "SESSION#s-1", "SK": "META"}
    assert keys.turn_sk(7) == "TURN#0000000007"
    assert keys.is_turn_sk(keys.turn_sk(7))
    assert not keys.is_turn_sk(keys.turn_sk(7) + "\n")
    assert keys.handoff_key("s-1", "h-1") == {"PK": "SESSION#s-1", "SK": "HANDOFF#h-1"}


def test_turn_numbers_sort_as_strings_in_number_order() -> None:
    assert sorted([keys.turn_sk(10), keys.turn_sk(9), keys.turn_sk(100)]) == [
        keys.turn_sk(9),
        keys.turn_sk(10),
        keys.turn_sk(100),
    ]


def test_a_session_lands_on_the_same_cleanup_shard_in_every_process() -> None:
    shard = keys.cleanup_shard("0b8c4a1e-6d7f-4e1a-9b55-2f3c8a9d1e42", 8)
    assert shard in keys.cleanup_shards(8)
    assert shard == keys.cleanup_shard("0b8c4a1e-6d7f-4e1a-9b55-2f3c8a9d1e42", 8)
    assert keys.cleanup_shards(3) == ["CLEANUP#0", "CLEANUP#1", "CLEANUP#2"]


def test_inbox_and_limit_keys() -> None:
    assert keys.agent_inbox_key("agent-1", "h-1") == {"PK": "AGENT#agent-1", "SK": "INBOX#h-1"}
    assert keys.rate_bucket_key("conn", "c-1") == {"PK": "LIMIT#conn#c-1", "SK": "RATE"}


def test_fails_on_a_negative_turn_number() -> None:
    with pytest.raises(ValueError, match="turn_number"):
        keys.turn_sk(-1)


SID = "0b0c6a3e-8f5d-4b8e-9c1f-2a7e5d3c4b1a"


def test_status_index_keys_sort_by_the_second_the_status_was_entered() -> None:
    assert keys.status_pk("handoff") == "STATUS#handoff"
    assert keys.status_sort(1_700_000_000, SID) == f"1700000000#{SID}"
    assert keys.status_sort(999, SID) < keys.status_sort(1_000, SID)  # zero-padded: text order is time order
    assert keys.status_since(keys.status_sort(42, SID)) == 42


#: Arabic-Indic digits: str.isdigit() accepts them, int() reads them; a key never holds them.
OTHER_DIGITS = "\u0661\u0667" + "\u0660" * 8


@pytest.mark.parametrize(
    "text", ["", "42", f"42#{SID}", f"170000000a#{SID}", "1700000000#not-a-uuid", f"{OTHER_DIGITS}#{SID}"]
)
def test_fails_to_read_a_status_sort_key_it_did_not_build(text: str) -> None:
    with pytest.raises(ValueError, match="not a status sort key"):
        keys.status_since(text)


def test_a_shared_inbox_item_sorts_by_priority_rank_then_by_time_waiting() -> None:
    assert keys.queue_sk("urgent", 1_700_000_000, "h-1") == "QUEUE#0#1700000000#h-1"
    assert [keys.queue_sk(p, 5, "h")[:8] for p in ("urgent", "high", "normal", "low")] == [
        "QUEUE#0#",
        "QUEUE#1#",
        "QUEUE#2#",
        "QUEUE#3#",
    ]
    # A later urgent customer still sorts before an earlier high one; within a priority the older first
    assert keys.queue_sk("urgent", 900, "h-z") < keys.queue_sk("high", 10, "h-a")
    assert keys.queue_sk("normal", 99, "h-z") < keys.queue_sk("normal", 100, "h-a")
    assert keys.inbox_item_key(keys.WAITING_INBOX, "h-1", priority="low", waiting_since=7) == {
        "PK": "AGENT#_waiting",
        "SK": "QUEUE#3#0000000007#h-1",
    }
    # An agent's own inbox keeps its id-keyed items
    assert keys.inbox_item_key("agent-1", "h-1", priority="low", waiting_since=7) == {
        "PK": "AGENT#agent-1",
        "SK": "INBOX#h-1",
    }
    with pytest.raises(ValueError, match="priority must be one of low, normal, high, urgent"):
        keys.queue_sk("asap", 5, "h")
