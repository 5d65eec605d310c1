"""Scan what a run left on the embedded stage for personal data: log lines and bucket objects.

``needles`` are the e-mail addresses, phone numbers and message texts to look for. A phone
number is also found written with other separators (or none): its digits are searched in the
digits of each line. The places that hold the conversation on purpose are left out by the caller
(``exempt_buckets``). What is read, and how, is :mod:`embedded.texts`'s, as for the erasure's search.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from embedded import EmbeddedStage
from embedded.texts import object_texts, output_texts

_NOT_DIGITS = re.compile(r"\D")


@dataclass(frozen=True)
class Hit:
    """One needle found somewhere it must not be."""

    where: str
    needle: str
    excerpt: str

    def __str__(self) -> str:
        return f"{self.needle!r} in {self.where}: ...{self.excerpt}..."


@dataclass(frozen=True)
class Needles:
    """What to look for: texts (e-mail addresses, message texts) and phone numbers."""

    texts: tuple[str, ...]
    phones: tuple[str, ...]

    def find(self, where: str, text: str) -> list[Hit]:
        hits = []
        lowered = text.lower()
        for needle in self.texts:
            at = lowered.find(needle.lower())
            if at >= 0:
                hits.append(Hit(where, needle, text[max(0, at - 60) : at + len(needle) + 60]))
        digits = _NOT_DIGITS.sub("", text)
        for phone in self.phones:
            if _NOT_DIGITS.sub("", phone) in digits:
                hits.append(Hit(where, phone, text[:200]))
        return hits


def log_lines(stage: EmbeddedStage) -> Iterator[tuple[str, str]]:
    """Every line a function wrote (its Logger and its prints), every error it ended with, every log event."""
    return output_texts(stage, log_groups=True)


def bucket_objects(
    stage: EmbeddedStage, *, exempt_buckets: Iterable[str] = (), only: str | None = None
) -> Iterator[tuple[str, str]]:
    """Every text of every object version of every bucket (or ``only`` one) but ``exempt_buckets`` (gzip opened)."""
    return object_texts(stage, exempt_buckets=exempt_buckets, only=only)
