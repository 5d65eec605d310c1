"""Conversion between Python values, DynamoDB AttributeValues and public JSON, in one place.

* :func:`marshal_item` / :func:`unmarshal_item` wrap boto3's ``TypeSerializer`` /
  ``TypeDeserializer`` (the store uses the low-level client); floats become ``Decimal`` on the
  way in, ``Binary`` becomes ``bytes`` on the way out.
* :func:`public` is the only output sanitiser: it drops keys, TTL, index and concurrency
  attributes and every binary value, and turns ``Decimal`` into ``int``/``float`` so the result
  goes straight into ``json.dumps``. Handlers, archives and events all call it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import Binary, TypeDeserializer, TypeSerializer

from lambdas.shared.schema import (
    AVAILABLE_AGENTS,
    CLEANUP,
    PARTITION_KEY,
    SESSIONS_BY_STATUS,
    SORT_KEY,
    TTL_ATTRIBUTE,
)

AttributeValue = dict[str, Any]
"""One DynamoDB wire value, such as ``{"S": "x"}``."""

INTERNAL_ATTRIBUTES = frozenset(
    {
        PARTITION_KEY,
        SORT_KEY,
        TTL_ATTRIBUTE,
        CLEANUP.partition_key,
        CLEANUP.sort_key,
        AVAILABLE_AGENTS.partition_key,
        SESSIONS_BY_STATUS.partition_key,
        SESSIONS_BY_STATUS.sort_key,
        "revision",
        # A session's rewind count: the reply path's concurrency token, not part of the session's API.
        "rewinds",
        # The customer's address: notices use it; no API response shows it (agents read sessions).
        "customer_email",
        # A waiting workflow task's token (handoff records): whoever holds it can resume the task.
        "callback_token",
        # The session's pointer to its newest handoff: the store's bookkeeping, shown as the status.
        "current_handoff_id",
    }
)
"""Attributes that never leave the service: keys, TTL, sparse-index and concurrency tokens."""

_serializer = TypeSerializer()
_deserializer = TypeDeserializer()


def _to_dynamo_native(value: Any) -> Any:
    """Make ``value`` acceptable to ``TypeSerializer``: floats to Decimal, tuples to lists."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float):
        return Decimal(repr(value))
    if isinstance(value, Mapping):
        return {str(k): _to_dynamo_native(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_dynamo_native(v) for v in value]
    return value


def marshal(value: Any) -> AttributeValue:
    """One Python value as a DynamoDB AttributeValue."""
    result: AttributeValue = _serializer.serialize(_to_dynamo_native(value))
    return result


def marshal_item(item: Mapping[str, Any]) -> dict[str, AttributeValue]:
    """A Python item as a DynamoDB item; ``None`` attributes are left out, not stored as NULL."""
    return {name: marshal(value) for name, value in item.items() if value is not None}


def _from_wire(value: Any) -> Any:
    if isinstance(value, Binary):
        return bytes(value.value)
    if isinstance(value, dict):
        return {k: _from_wire(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_wire(v) for v in value]
    return value


def unmarshal(value: AttributeValue) -> Any:
    """One AttributeValue as Python (numbers stay ``Decimal``, binaries become ``bytes``)."""
    return _from_wire(_deserializer.deserialize(value))


def unmarshal_item(item: Mapping[str, AttributeValue]) -> dict[str, Any]:
    """A DynamoDB item (GetItem, Query, or a stream image) as a Python dict."""
    return {name: unmarshal(value) for name, value in item.items()}


def plain(value: Any) -> Any:
    """JSON-ready copy of ``value``: Decimal to int/float, sets to sorted lists, binary dropped.

    Binary values (``bytes``, ``Binary``) inside containers are removed, not stringified.
    """
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items() if not isinstance(v, (bytes, Binary))}
    if isinstance(value, (set, frozenset)):
        return sorted(plain(v) for v in value if not isinstance(v, (bytes, Binary)))
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value if not isinstance(v, (bytes, Binary))]
    return value


def public(obj: Any) -> dict[str, Any]:
    """What a caller outside the service may see of a record or item.

    Accepts a record dataclass (Session, Turn, ...) or a Python item dict (from
    :func:`unmarshal_item`). Drops :data:`INTERNAL_ATTRIBUTES`, ``None`` values and binaries.
    """
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        data: Mapping[str, Any] = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    elif isinstance(obj, Mapping):
        data = obj
    else:
        raise TypeError(f"public() takes a record or an item dict (given {type(obj).__name__})")
    cleaned = {k: v for k, v in data.items() if k not in INTERNAL_ATTRIBUTES and v is not None}
    result: dict[str, Any] = plain(cleaned)
    return result


def dumps(obj: Any) -> str:
    """``json.dumps`` of :func:`public` output (or of a list of them), compact and stable."""
    return json.dumps(plain(obj), separators=(",", ":"), sort_keys=True)
