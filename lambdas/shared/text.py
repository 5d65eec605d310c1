"""What a person may write into a conversation: the one rule for customers' and agents' text.

A turn is stored compressed as UTF-8, sent to the model and shown to the other side, so its text
must be encodable and must not hide anything: a lone surrogate (JSON allows ``"\\ud800"``, UTF-8
does not) would fail the turn's write after the caller was charged for it; control characters
other than newline and tab, bidi overrides and zero-width characters can disguise what a reader
sees.
"""

from __future__ import annotations

import unicodedata
from typing import Final

#: Whitespace a message may hold; every other control character (Unicode category Cc) is refused.
ALLOWED_CONTROL: Final = frozenset("\n\t")
#: Format characters used to hide or reorder text (bidi overrides and isolates, zero-width, BOM).
FORBIDDEN_FORMAT: Final = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200b\ufeff")


def hidden_character(text: str) -> str | None:
    """Why ``text`` may not be stored (a lone surrogate, a control or hiding character), or None."""
    for char in text:
        category = unicodedata.category(char)
        if category == "Cs":
            return "must be valid Unicode (it holds a lone surrogate)"
        if (category == "Cc" and char not in ALLOWED_CONTROL) or char in FORBIDDEN_FORMAT:
            return "must not contain control characters"
    return None
