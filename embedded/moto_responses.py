"""moto's answers without the work it repeats for every request.

Three things moto 5.2 does anew for each request, whose results never change within a process.

**Dispatch.** To find the method that answers an action, moto lists every function of the
service's response class with ``inspect.getmembers``. :func:`install` keeps that list per class (a
method patched over another of the same name keeps its name).

**Update expressions.** An ``UpdateItem`` parsed its update expression twice, once to check the
names and values it uses and once to apply it, and a transaction once per update. The store sends
the same few expressions again and again; :func:`install` keeps each text's parse tree. moto
only reads that tree: its validator works on a deep copy, and the executor on the validator's.

**DynamoDB's items.** moto writes every response through one serializer for all services: it walks
the operation's output shape, and for each member of each structure asks an attribute picker which
of several spellings (``S``, ``s``, an alias) the value carries. An attribute value is a structure
of ten members (``S``, ``N``, ``B``, ``SS``, ``NS``, ``BS``, ``M``, ``L``, ``NULL``, ``BOOL``), so
a page of a query paid that search ten times per attribute, nested maps and lists included: about a
tenth of the CPU of a test that talks to the sessions table, and of the embedded stage's chat.

By the time the serializer runs, moto has turned each attribute value into a plain dict of one
member (``dynamo_to_dict``). :class:`_Serializer` writes those dicts out directly, member by member,
as moto's serializer does: strings through ``str``, binary members base64-encoded, maps and lists
recursively, a member whose value is ``None`` left out. Everything else of a response (the
structures around the items, timestamps, errors) still goes through moto's own code.
``tests/embedded/test_moto_responses.py`` holds the two to the same output for any item. One
difference: given a map attribute named by the empty string, which DynamoDB refuses, moto's
serializer merges that attribute's value into the map; this writes the name as given.
"""

from __future__ import annotations

import base64
import functools
from typing import Any, Final

from moto.core import responses, serialize
from moto.dynamodb.parsing.expressions import UpdateExpressionParser  # type: ignore[attr-defined]

__all__ = ["install", "installed", "uninstall", "wire_value"]

# Both APIs whose responses carry items: the table's (JSON 1.0) and its stream's (records' images).
_SERVICES: Final = ("dynamodb", "dynamodbstreams")
_PROTOCOL: Final = "json"
_STRING_MEMBERS: Final = frozenset({"S", "N"})
_STRING_SET_MEMBERS: Final = frozenset({"SS", "NS"})
_AS_IS_MEMBERS: Final = frozenset({"BOOL", "NULL"})


def _string(value: Any) -> Any:
    # moto's JSON serializer writes a string member through str() unless it is None or empty.
    return str(value) if value not in (None, {}, []) else value


def _base64(value: str | bytes) -> str:
    raw = value.encode("utf-8") if isinstance(value, str) else value
    return base64.b64encode(raw).strip().decode("utf-8")


def wire_value(value: Any) -> Any:
    """One attribute value as moto's serializer writes it; ``None`` (a list's empty slot) stays ``None``."""
    if value is None:
        return None
    out: dict[str, Any] = {}
    for member, member_value in value.items():
        if member_value is None:
            continue
        if member in _STRING_MEMBERS:
            out[member] = _string(member_value)
        elif member in _AS_IS_MEMBERS:
            out[member] = member_value
        elif member == "M":
            out[member] = {k: wire_value(v) for k, v in member_value.items() if v is not None}
        elif member == "L":
            out[member] = [wire_value(v) for v in member_value]
        elif member in _STRING_SET_MEMBERS:
            out[member] = [_string(v) for v in member_value]
        elif member == "B":
            out[member] = _base64(member_value)
        elif member == "BS":
            out[member] = [_base64(v) for v in member_value]
        # Any other key is not a member of the shape: moto's serializer drops it too.
    return out


class _Serializer(serialize.JSONSerializer):
    """moto's JSON serializer, with an attribute value written by :func:`wire_value`."""

    def _serialize(self, serialized: Any, value: Any, shape: Any, key: str) -> None:
        if key and shape.name == "AttributeValue" and type(value) is dict:
            serialized[key] = wire_value(value)
            return
        super()._serialize(serialized, value, shape, key)


# moto's responses module imports it by name: replaced there, where the dispatch calls it.
_LISTER: Final = "method_names_from_class"
_replaced: dict[str, type[serialize.ResponseSerializer] | None] = {}
_method_names: dict[type, list[str]] = {}
_original_method_names: list[Any] = []


def _method_names_of(clazz: Any) -> list[str]:
    names = _method_names.get(clazz)
    if names is None:
        names = _method_names[clazz] = _original_method_names[0](clazz)
    return names


_original_parse: list[Any] = []


@functools.lru_cache(maxsize=512)
def _parsed(expression: str) -> Any:
    return _original_parse[0].__func__(UpdateExpressionParser, expression)


def _parse_update_expression(_cls: Any, expression: str) -> Any:
    return _parsed(expression)


def install() -> None:
    """Dispatch from kept method lists, parse trees and DynamoDB items written directly (idempotent)."""
    if _original_method_names:
        return
    _original_method_names.append(getattr(responses, _LISTER))
    setattr(responses, _LISTER, _method_names_of)
    _original_parse.append(vars(UpdateExpressionParser)["make"])
    UpdateExpressionParser.make = classmethod(_parse_update_expression)
    for service in _SERVICES:
        by_protocol = serialize.SERVICE_SPECIFIC_SERIALIZERS.setdefault(service, {})
        _replaced[service] = by_protocol.get(_PROTOCOL)
        by_protocol[_PROTOCOL] = _Serializer


def uninstall() -> None:
    """moto's own dispatch, update expression parser and serializer again."""
    if not _original_method_names:
        return
    setattr(responses, _LISTER, _original_method_names.pop())
    _method_names.clear()
    UpdateExpressionParser.make = _original_parse.pop()
    _parsed.cache_clear()
    for service, previous in _replaced.items():
        by_protocol = serialize.SERVICE_SPECIFIC_SERIALIZERS[service]
        if previous is None:
            del by_protocol[_PROTOCOL]
        else:
            by_protocol[_PROTOCOL] = previous
        if not by_protocol:
            del serialize.SERVICE_SPECIFIC_SERIALIZERS[service]
    _replaced.clear()


def installed() -> bool:
    return bool(_original_method_names)
