"""When a streamed reply's text is posted: one ``delta`` frame per batch of tokens, never one per token.

A model writes a token (about four characters) at a time; a PostToConnection per token would be
a call, a frame and a client repaint for every few characters. :class:`DeltaCoalescer` decides:

1. The reply's first text is posted at once: the customer sees the reply begin as soon as the
   model does.
2. After that, text is buffered and posted as soon as the buffer

   - holds :data:`MAX_CHARS` characters (a long sentence still moves), or
   - ends a sentence (``.``, ``!``, ``?``, an ellipsis, their Japanese full-width forms, or a
     line break, then any closing quotes or brackets) and holds at least
     :data:`MIN_SENTENCE_CHARS` (a frame holds a sentence or two, and "e.g." or "vol. 3" is
     never a frame's end), or
   - began :data:`MAX_WAIT_SECONDS` ago or more (no text waits longer while the model writes).

   The rules are checked when text arrives (there is no timer): text buffered when the model
   pauses goes out with the next text or at the end.
3. The end of the reply posts what is left.

Why frames this size: API Gateway bills a WebSocket message per 32 KB ("Amazon API Gateway
pricing"), so a frame of 4 characters costs what one of 400 does, and a model writes 10-20 times
faster than a customer reads (some 100-500 characters a second against 20-30): after the first
words, a frame every 200 characters or every second keeps the text well ahead of the reader. A
reply of N tokens costs some N/50 posts plus the final frame (a 150-token reply: 3 and the
final), against N one post per token would.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Final

MAX_CHARS: Final = 480
MIN_SENTENCE_CHARS: Final = 200
MAX_WAIT_SECONDS: Final = 1.0
_SENTENCE_END: Final = re.compile("([.!?\u2026\u3002\uff01\uff1f]|\n)[\"')\\]\u2019\u201d\u300d\u300f]*\\s*$")


class DeltaCoalescer:
    """Buffers a reply's text and says when to post it (see the module docstring).

    Args (keyword-only): ``max_chars``, ``min_sentence_chars``, ``max_wait_seconds`` default to
    the module's constants; ``clock`` (seconds) defaults to ``time.monotonic``.
    """

    def __init__(
        self,
        *,
        max_chars: int = MAX_CHARS,
        min_sentence_chars: int = MIN_SENTENCE_CHARS,
        max_wait_seconds: float = MAX_WAIT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_chars < 1 or not 0 <= min_sentence_chars <= max_chars or max_wait_seconds < 0:
            raise ValueError(
                "need max_chars >= 1, 0 <= min_sentence_chars <= max_chars and max_wait_seconds >= 0 "
                f"(given {max_chars}, {min_sentence_chars}, {max_wait_seconds})"
            )
        self._max_chars = max_chars
        self._min_sentence_chars = min_sentence_chars
        self._max_wait = max_wait_seconds
        self._clock = clock
        self._buffer: list[str] = []
        self._buffered = 0
        self._since = 0.0
        self._parts: list[str] = []
        self.posts = 0

    @property
    def text(self) -> str:
        """Everything added so far, posted or not: the whole reply once the stream has ended."""
        return "".join(self._parts)

    def add(self, text: str) -> str | None:
        """Take the next piece of the reply; returns the text to post now, or None to keep buffering."""
        if not text:
            return None
        if not self._buffer:
            self._since = self._clock()
        self._parts.append(text)
        self._buffer.append(text)
        self._buffered += len(text)
        if self.posts == 0 or self._buffered >= self._max_chars:
            return self._take()
        if self._buffered >= self._min_sentence_chars and _SENTENCE_END.search("".join(self._buffer[-3:])):
            return self._take()
        if self._clock() - self._since >= self._max_wait:
            return self._take()
        return None

    def rest(self) -> str | None:
        """What is still buffered, to post at the end of the reply (None when nothing is)."""
        return self._take() if self._buffer else None

    def _take(self) -> str:
        batch = "".join(self._buffer)
        self._buffer.clear()
        self._buffered = 0
        self.posts += 1
        return batch
