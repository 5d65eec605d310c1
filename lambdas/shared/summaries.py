"""The summary-window rule: which turns a rolling summary covers.

Turn N closes a window when N is a positive multiple of the interval (``SUMMARY_INTERVAL``);
that window is turns N-interval+1..N and its summary is number N/interval. The stream router
triggers a summary only for such turns and the summary function summarises exactly that range.
"""

from __future__ import annotations


def closes_window(turn_number: int, interval: int) -> bool:
    """True when turn ``turn_number`` is the last turn of a summary window."""
    return turn_number >= interval and turn_number % interval == 0


def window(turn_number: int, interval: int) -> tuple[int, int, int] | None:
    """(summary_number, first_turn, last_turn) for turn N, or None when N is not at the interval."""
    if not closes_window(turn_number, interval):
        return None
    return turn_number // interval, turn_number - interval + 1, turn_number
