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
