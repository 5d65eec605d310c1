"""lambdas.shared.idempotency: a client's key makes a request act once; the key's shape is checked first."""

from __future__ import annotations

import pytest

from lambdas.shared import idempotency


def test_without_a_key_the_request_just_acts() -> None:
    calls: list[int] = []
    answer = idempotency.replay("alice", "POST /x", None, {"a": 1}, lambda: {"n": calls.append(1) or len(calls)})
    assert answer == {"n": 1}
    assert calls == [1]


@pytest.mark.parametrize("key", ["has space", "x" * 81, "new\nline"])
def test_fails_on_a_key_of_the_wrong_shape_before_acting(key: str) -> None:
    with pytest.raises(idempotency.InvalidKey):
        idempotency.replay("alice", "POST /x", key, {}, lambda: pytest.fail("acted"))
