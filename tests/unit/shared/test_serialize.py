"""lambdas.shared.serialize: Python values to DynamoDB's wire shape and back, and what an API may show."""

from __future__ import annotations

from decimal import Decimal

from lambdas.shared import serialize


def test_an_item_survives_the_round_trip() -> None:
    item = {"PK": "SESSION#1", "n": 3, "score": 0.5, "tags": ["a"], "meta": {"k": None}}
    wire = serialize.marshal_item(item)
    assert wire["n"] == {"N": "3"}
    assert serialize.unmarshal_item(wire) == {**item, "score": Decimal("0.5")}


def test_plain_turns_numbers_back_into_ints_and_floats() -> None:
    assert serialize.plain({"n": Decimal("3"), "f": Decimal("0.5"), "l": [Decimal("1")]}) == {
        "n": 3,
        "f": 0.5,
        "l": [1],
    }
