"""lambdas.shared.text: the one rule for the text a customer or an agent writes."""

from __future__ import annotations

import json

import pytest

from lambdas.shared.text import hidden_character


def test_plain_text_with_newlines_tabs_and_any_script_passes() -> None:
    assert hidden_character("Is volume 3 out?\n\tフリーレン 📚 Ünïcode") is None


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (json.loads('"hi \\ud800 there"'), "lone surrogate"),
        (json.loads('"\\udfff"'), "lone surrogate"),
        ("bell\x07", "control characters"),
        ("evil\u202egnp.exe", "control characters"),
        ("zero\u200bwidth", "control characters"),
    ],
)
def test_refuses_what_cannot_be_stored_or_hides_what_is_written(text: str, why: str) -> None:
    problem = hidden_character(text)
    assert problem is not None
    assert why in problem
