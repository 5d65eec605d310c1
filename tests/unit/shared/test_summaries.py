"""lambdas.shared.summaries: which turn closes a summary window, and the window's exact bounds."""

from __future__ import annotations

import pytest

from lambdas.shared.summaries import closes_window, window


@pytest.mark.parametrize(("turn", "closes"), [(9, False), (10, True), (11, False), (20, True), (0, False)])
def test_every_tenth_turn_closes_a_window_of_ten(turn: int, closes: bool) -> None:
    assert closes_window(turn, 10) is closes


def test_the_window_of_a_closing_turn_is_its_summary_number_and_turn_range() -> None:
    assert window(20, 10) == (2, 11, 20)
    assert window(10, 10) == (1, 1, 10)
    assert window(15, 10) is None
