"""Opaque pagination cursors bound to the listing they were minted for.

A cursor is urlsafe-base64 JSON ``{"v": 1, "s": <scope>, "k": <position>}``: ``scope`` names the
listing and its partition (``turns:<session_id>``, ``customer:<customer_id>``, ...) and
``position`` is the LastEvaluatedKey (or the store's own position) in plain Python form.

Decoding is strict: the scope must be the caller's, the position must have exactly one of the
expected shapes (attribute names and types), and the store then checks that the key lies inside
the caller's partition. A cursor therefore cannot move a Query to another session or customer.
Cursors are not signed: a client can forge one, but only into a position it could reach anyway.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any, Final

from lambdas.shared.errors import InvalidCursor

VERSION: Final = 1
MAX_LENGTH: Final = 2048
#: The largest number a position may hold. Positions are epoch times and counters; DynamoDB keeps
#: 38 significant digits and boto3's serializer raises (Inexact, Overflow) past them, so a forged
#: 41-digit position must be refused here as a bad cursor, not fail the Query.
MAX_NUMBER: Final = 2**63 - 1

Position = dict[str, str | int]
Shape = Mapping[str, type]
"""Attribute name -> ``str`` or ``int``: what a decoded position must hold, exactly."""


def encode(scope: str, position: Mapping[str, Any]) -> str:
    """A cursor for ``position`` within ``scope`` (values: str or integral numbers)."""
    clean: Position = {}
    for name, value in position.items():
        if isinstance(value, str):
            clean[name] = value
        else:
            clean[name] = int(value)  # Decimal from the deserializer, always integral here
    raw = json.dumps({"v": VERSION, "s": scope, "k": clean}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode(token: str, scope: str, *shapes: Shape) -> Position:
    """The position inside ``token``; raises InvalidCursor unless it is well-formed for scope."""
    if not isinstance(token, str) or not token or len(token) > MAX_LENGTH:
        raise InvalidCursor()
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = json.loads(raw.decode("utf-8"))
    except (binascii.Error, ValueError, RecursionError):
        # RecursionError: JSON nested deeper than the parser's stack (``[`` 1,500 times).
        raise InvalidCursor() from None
    if not isinstance(data, dict) or set(data) != {"v", "s", "k"} or data["v"] != VERSION:
        raise InvalidCursor()
    if data["s"] != scope:
        raise InvalidCursor("it was issued for another listing")
    position = data["k"]
    if not isinstance(position, dict):
        raise InvalidCursor()
    for shape in shapes:
        if set(position) == set(shape) and all(_is(position[name], kind) for name, kind in shape.items()):
            return position
    raise InvalidCursor()


def _is(value: Any, kind: type) -> bool:
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_NUMBER
    return isinstance(value, kind)
