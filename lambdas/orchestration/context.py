"""The handoff context an agent receives, bounded in bytes so it always fits its transport.

SNS refuses a message over 256 KiB (attributes included) and a Step Functions payload has the same
limit. The context holds the session's rolling summary and its last turns, each cut to
:data:`TURN_CHARS` characters; serialized as UTF-8 (not ``\\uXXXX`` escapes, which turn one emoji
into 12 bytes) 20 such turns of four-byte characters take 160 KB, but control characters escape to
6 bytes each and the stage may ask for up to 100 turns. So the message is built newest turn first
and stops before :data:`MAX_MESSAGE_BYTES`: the newest turns always arrive whole, older ones that do
not fit are left out (``omitted_turns`` counts them, and the summary covers them).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from lambdas.shared.records import Summary, Turn

#: SNS's message limit is 262,144 bytes including attributes; this leaves room for them.
MAX_MESSAGE_BYTES: Final = 240 * 1024
#: How much of one turn the agent gets (a customer message is at most 4,000 characters).
TURN_CHARS: Final = 2000
#: The summary's share of the message when it is longer (the summarizer keeps it far shorter).
SUMMARY_CHARS: Final = 8000


def encode(message: Mapping[str, Any]) -> str:
    """The wire form: compact JSON, non-ASCII as UTF-8 (4 bytes per emoji, not 12)."""
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False)


def size(message: Mapping[str, Any]) -> int:
    """Bytes of :func:`encode` of ``message``."""
    return len(encode(message).encode("utf-8"))


def _turn(turn: Turn) -> dict[str, Any]:
    return {
        "turn_number": turn.turn_number,
        "role": str(turn.role),
        "content": turn.content[:TURN_CHARS],
        "created_at": turn.created_at,
    }


def build(
    header: Mapping[str, Any],
    summary: Summary | None,
    turns: Sequence[Turn],
    *,
    max_bytes: int = MAX_MESSAGE_BYTES,
) -> dict[str, Any]:
    """``header`` + summary + the newest of ``turns`` (chronological) that fit in ``max_bytes``.

    Raises ValueError when not even the header and summary fit (a caller error: the header is
    a handful of ids).
    """
    message: dict[str, Any] = dict(header)
    message["summary"] = (
        None
        if summary is None
        else {
            "text": summary.summary_text[:SUMMARY_CHARS],
            "window_start": summary.window_start,
            "window_end": summary.window_end,
        }
    )
    message["turns"] = []
    message["omitted_turns"] = len(turns)
    used = size(message)
    if used > max_bytes:
        raise ValueError(f"the handoff context header alone takes {used} bytes (limit {max_bytes})")
    kept: list[dict[str, Any]] = []
    for turn in reversed(turns):
        entry = _turn(turn)
        # One more list element: its JSON plus a separating comma; the omitted count only shrinks.
        cost = len(encode(entry).encode("utf-8")) + (1 if kept else 0)
        if used + cost > max_bytes:
            break
        kept.append(entry)
        used += cost
    kept.reverse()
    message["turns"] = kept
    message["omitted_turns"] = len(turns) - len(kept)
    return message
