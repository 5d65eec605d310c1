"""Scan what a run left on the embedded stage for personal data: log lines and bucket objects.

``needles`` are the e-mail addresses, phone numbers and message texts to look for. A phone
number is also found written with other separators (or none): its digits are searched in the
digits of each line. The places that hold the conversation on purpose are left out by the caller
(``exempt_buckets``).
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from embedded import EmbeddedStage

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
    """Every line a function wrote (its Logger and its prints) and every error it ended with."""
    for number, call in enumerate(stage.calls.calls):
        where = f"log of {call.handler} (invocation {number})"
        for line in call.output.splitlines():
            yield where, line
        if call.error is not None:
            yield f"{where}, its error", f"{type(call.error).__name__}: {call.error}"
    logs = stage.client("logs")
    for group in _pages(logs, "describe_log_groups", "logGroups"):
        name = group["logGroupName"]
        for event in _pages(logs, "filter_log_events", "events", logGroupName=name):
            yield f"log group {name}", str(event.get("message", ""))


def bucket_objects(
    stage: EmbeddedStage, *, exempt_buckets: Iterable[str] = (), only: str | None = None
) -> Iterator[tuple[str, str]]:
    """Every version of every object of every bucket (or ``only`` one) but ``exempt_buckets``, as text (gzip opened)."""
    s3, exempt = stage.client("s3"), set(exempt_buckets)
    for bucket in (b["Name"] for b in s3.list_buckets()["Buckets"]):
        if bucket in exempt or only not in (None, bucket):
            continue
        for version in _pages(s3, "list_object_versions", "Versions", Bucket=bucket):
            key, version_id = version["Key"], version["VersionId"]
            extra = {} if version_id in (None, "null") else {"VersionId": version_id}
            body = s3.get_object(Bucket=bucket, Key=key, **extra)["Body"].read()
            if body[:2] == b"\x1f\x8b":
                body = gzip.decompress(body)
            yield f"s3://{bucket}/{key} (version {version_id})", body.decode("utf-8", errors="replace")


def _pages(client: Any, operation: str, items: str, **params: Any) -> Iterator[dict[str, Any]]:
    for page in client.get_paginator(operation).paginate(**params):
        yield from page.get(items, [])
