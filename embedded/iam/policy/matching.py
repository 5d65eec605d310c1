"""Pattern matching of actions, resources and ARNs: IAM's wildcards (``*`` and ``?``) and the segments of an ARN."""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache


def split_arn(text: str) -> list[str] | None:
    parts = text.split(":", 5)
    return parts if len(parts) == 6 and parts[0] == "arn" else None


@lru_cache(maxsize=8192)
def wildcard(pattern: str) -> re.Pattern[str]:
    """``*`` any run of characters (slashes and colons included), ``?`` one character, the rest literal."""
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern), re.DOTALL)


@lru_cache(maxsize=1024)
def _segment_tail(pattern: str) -> re.Pattern[str]:
    """The last segment of an ARN pattern with fewer than six segments, matched against the rest of an ARN.

    Wildcards stay within the segment, except a ``*`` that ends it: that one "can expand to match beyond the
    colon boundaries" ("IAM JSON policy elements: Resource").
    """
    parts = []
    for position, c in enumerate(pattern):
        if c == "*":
            parts.append(".*" if position == len(pattern) - 1 else "[^:]*")
        elif c == "?":
            parts.append("[^:]")
        else:
            parts.append(re.escape(c))
    return re.compile("".join(parts), re.DOTALL)


def action_matches(pattern: str, action: str) -> bool:
    return wildcard(pattern.lower()).fullmatch(action.lower()) is not None


def arn_matches(pattern_parts: Sequence[str], arn_parts: Sequence[str]) -> bool:
    """Six pattern segments against six ARN segments, each separately; the last one (the resource part,
    which may hold colons and slashes) as a glob."""
    return all(wildcard(p).fullmatch(a) is not None for p, a in zip(pattern_parts, arn_parts, strict=True))


def resource_matches(pattern: str, resource: str) -> bool:
    if pattern == "*":
        return True
    arn = split_arn(resource)
    if arn is None:
        return False
    parts = pattern.split(":", 5)
    if len(parts) == 6:
        return arn_matches(parts, arn)
    head, tail = parts[:-1], parts[-1]
    if not all(wildcard(p).fullmatch(a) is not None for p, a in zip(head, arn, strict=False)):
        return False
    return _segment_tail(tail).fullmatch(":".join(arn[len(head) :])) is not None
