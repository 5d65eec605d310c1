"""lambdas.shared.cursor: opaque page cursors, valid only for the listing that issued them."""

from __future__ import annotations

import base64
import json

import pytest

from lambdas.shared import cursor
from lambdas.shared.errors import InvalidCursor

SHAPE = {"PK": str, "n": int}


def test_a_cursor_decodes_to_the_position_it_was_made_from() -> None:
    token = cursor.encode("turns:s-1", {"PK": "SESSION#s-1", "n": 3})
    assert "=" not in token
    assert cursor.decode(token, "turns:s-1", SHAPE) == {"PK": "SESSION#s-1", "n": 3}


def test_fails_on_a_cursor_of_another_listing() -> None:
    token = cursor.encode("turns:s-1", {"PK": "SESSION#s-1", "n": 3})
    with pytest.raises(InvalidCursor, match="another listing"):
        cursor.decode(token, "turns:s-2", SHAPE)


@pytest.mark.parametrize(
    "token",
    [
        "",
        "x" * 2049,
        "%%%",
        base64.urlsafe_b64encode(b"[" * 1500).decode(),
        base64.urlsafe_b64encode(json.dumps({"v": 2, "s": "turns:s-1", "k": {}}).encode()).decode(),
        cursor.encode("turns:s-1", {"PK": "SESSION#s-1"}),
        cursor.encode("turns:s-1", {"PK": "SESSION#s-1", "n": "3"}),
    ],
)
def test_fails_on_a_malformed_cursor(token: str) -> None:
    with pytest.raises(InvalidCursor):
        cursor.decode(token, "turns:s-1", SHAPE)


def test_a_negative_or_boolean_number_is_not_a_position() -> None:
    for value in (-1, True):
        raw = json.dumps({"v": 1, "s": "x", "k": {"PK": "p", "n": value}}).encode()
        with pytest.raises(InvalidCursor):
            cursor.decode(base64.urlsafe_b64encode(raw).decode(), "x", SHAPE)


def test_a_position_past_what_dynamodb_holds_is_not_a_position() -> None:
    token = cursor.encode("x", {"PK": "p", "n": cursor.MAX_NUMBER})
    assert cursor.decode(token, "x", SHAPE)["n"] == cursor.MAX_NUMBER
    for value in (cursor.MAX_NUMBER + 1, 10**40, 1e200):
        raw = json.dumps({"v": 1, "s": "x", "k": {"PK": "p", "n": value}}).encode()
        with pytest.raises(InvalidCursor):
            cursor.decode(base64.urlsafe_b64encode(raw).decode(), "x", SHAPE)
