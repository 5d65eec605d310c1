"""API Gateway mapping templates, evaluated by airspeed with API Gateway's variables.

airspeed-ext is the Velocity engine LocalStack uses; its own tests are snapshots recorded against
AWS, so it follows API Gateway's quirks (an undefined reference in ``#if`` is true, ``#set`` with a
null right-hand side assigns null). This module adds what API Gateway puts in scope:

* ``$input``: ``json(path)``, ``path(path)`` (JSONPath), ``params()`` / ``params(name)``, ``body``;
* ``$util``: ``escapeJavaScript`` exactly as Apache Commons Lang 2 (``'`` -> ``\\'``,
  ``/`` -> ``\\/``, non-ASCII -> ``\\uXXXX`` per UTF-16 unit), ``urlEncode``/``urlDecode`` as
  Java's URLEncoder/URLDecoder, ``base64Encode``/``base64Decode``, ``parseJson``;
* ``$context`` (with ``responseOverride``) and ``$stageVariables``.

It is stricter than API Gateway so that a template cannot pass a test by accident: a reference
printed as text (alone or inside a double-quoted string) that is undefined or null raises unless
it is quiet (``$!x``), and Velocity directives beyond ``#set``, ``#if``/``#elseif``/``#else``,
``#foreach`` and ``#end`` (``#macro``, ``#parse``, ``#evaluate``, ...) raise ``VtlError``.
"""

from __future__ import annotations

import base64
import functools
import json
import re
import urllib.parse
from collections.abc import Mapping
from typing import Any

import airspeed
from airspeed.operators import FormalReference, StoppableStream, _Element, value_to_string
from jsonpath_ng.ext import parse as parse_jsonpath  # type: ignore[attr-defined]


class VtlError(ValueError):
    """A template this evaluator refuses or cannot run; the message says which part and why."""


# ---------------------------------------------------------------------- $util


def escape_javascript(value: Any) -> str:
    """Apache Commons Lang 2 ``StringEscapeUtils.escapeJavaScript``, which API Gateway uses."""
    if value is None:
        return ""
    out = []
    for unit in _utf16_units(_java_text(value)):
        if unit > 0x7F or (unit < 0x20 and unit not in _CONTROL):
            out.append(f"\\u{unit:04X}")
        else:
            out.append(_CONTROL.get(unit) or _QUOTED.get(chr(unit), chr(unit)))
    return "".join(out)


_CONTROL = {8: "\\b", 9: "\\t", 10: "\\n", 12: "\\f", 13: "\\r"}
_QUOTED = {"'": "\\'", '"': '\\"', "\\": "\\\\", "/": "\\/"}


def _utf16_units(text: str) -> list[int]:
    data = text.encode("utf-16-be", "surrogatepass")
    return [int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2)]


def _java_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class Util:
    """``$util``."""

    def escapeJavaScript(self, value: Any) -> str:
        return escape_javascript(value)

    def urlEncode(self, value: Any) -> str:
        # java.net.URLEncoder: space -> +, and only letters, digits and . - * _ stay as they are
        return urllib.parse.quote_plus(_java_text(value), safe="*").replace("~", "%7E")

    def urlDecode(self, value: Any) -> str:
        return urllib.parse.unquote_plus(_java_text(value))

    def base64Encode(self, value: Any) -> str:
        return base64.b64encode(_java_text(value).encode()).decode()

    def base64Decode(self, value: Any) -> str:
        return base64.b64decode(_java_text(value)).decode()

    def parseJson(self, value: Any) -> Any:
        return json.loads(_java_text(value))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        raise VtlError(f"$util.{name} is not an API Gateway $util function this evaluator knows")


# ---------------------------------------------------------------------- $input


class Input:
    """``$input`` over one request (or integration response): its body text and parameters."""

    def __init__(
        self,
        body: str,
        *,
        path: Mapping[str, str] | None = None,
        querystring: Mapping[str, str] | None = None,
        header: Mapping[str, str] | None = None,
    ) -> None:
        self.body = body
        self._params = {"path": dict(path or {}), "querystring": dict(querystring or {}), "header": dict(header or {})}

    def params(self, name: str | None = None) -> Any:
        """All parameters by kind, or one by name: path, then query string, then header ("" when absent)."""
        if name is None:
            return self._params
        for kind in ("path", "querystring"):
            if name in self._params[kind]:
                return self._params[kind][name]
        headers = {k.lower(): v for k, v in self._params["header"].items()}
        return headers.get(name.lower(), "")

    def json(self, path: str) -> str:
        """The selected value as JSON text; "" when the path selects nothing."""
        found, value = self._select(path)
        return json.dumps(value, ensure_ascii=False) if found else ""

    def path(self, path: str) -> Any:
        """The selected value as an object (string, number, map, list); null when nothing matches."""
        return self._select(path)[1]

    def _select(self, path: str) -> tuple[bool, Any]:
        try:
            document = json.loads(self.body) if self.body.strip() else {}
        except ValueError:
            raise VtlError(f"$input.json/$input.path({path!r}) on a body that is not JSON") from None
        if path in ("$", ""):
            return True, document
        matches = [match.value for match in _jsonpath(path).find(document)]
        if not matches:
            return False, None
        return True, matches[0] if len(matches) == 1 else matches

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        raise VtlError(f"$input.{name} is not part of API Gateway's $input (json, path, params, body)")


@functools.lru_cache(maxsize=256)
def _jsonpath(path: str) -> Any:
    return parse_jsonpath(path)


def mapping_scope(
    *,
    body: str = "",
    path: Mapping[str, str] | None = None,
    querystring: Mapping[str, str] | None = None,
    header: Mapping[str, str] | None = None,
    context: dict[str, Any] | None = None,
    stage_variables: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The variables API Gateway gives a mapping template.

    ``context`` is used as it is (not copied), so the caller sees what the template sets in it,
    such as ``$context.responseOverride.status``.
    """
    context = {} if context is None else context
    context.setdefault("responseOverride", {"header": {}})
    return {
        "input": Input(body, path=path, querystring=querystring, header=header),
        "context": context,
        "util": Util(),
        "stageVariables": dict(stage_variables or {}),
    }


# ---------------------------------------------------------------------- templates

SUPPORTED_DIRECTIVES = frozenset({"set", "if", "elseif", "else", "end", "foreach"})
_VELOCITY_DIRECTIVES = frozenset({"macro", "parse", "include", "define", "evaluate", "break", "stop", "return"})
_COMMENT = re.compile(r"##[^\n]*|#\*.*?\*#", re.S)
_DIRECTIVE = re.compile(r"(?<!\\)#\{?([A-Za-z][A-Za-z0-9_]*)\}?(\s*\()?")


def render(template: str, scope: Mapping[str, Any]) -> str:
    """The output of ``template`` with the variables of ``scope`` (see ``mapping_scope``)."""
    compiled = _compile(template)
    try:
        return str(compiled.merge(dict(scope)))
    except airspeed.TemplateExecutionError as error:
        if isinstance(error.__cause__, VtlError):
            raise error.__cause__ from None
        raise VtlError(f"the template failed: {error}") from error


@functools.lru_cache(maxsize=64)
def _compile(template: str) -> airspeed.Template:
    for match in _DIRECTIVE.finditer(_COMMENT.sub("", template)):
        word = match.group(1)
        if word in _VELOCITY_DIRECTIVES or (word not in SUPPORTED_DIRECTIVES and match.group(2)):
            raise VtlError(f"#{word} is not supported; use only #{', #'.join(sorted(SUPPORTED_DIRECTIVES))}")
    compiled = airspeed.Template(template)
    try:
        compiled.ensure_compiled()
    except airspeed.TemplateSyntaxError as error:
        raise VtlError(f"the template does not parse: {error}") from None
    _make_references_strict(compiled.root_element, set())
    return compiled


def _make_references_strict(element: Any, seen: set[int]) -> None:
    """Give every reference the template prints a strict ``evaluate_raw`` (see the module docstring)."""
    if id(element) in seen:
        return
    seen.add(id(element))
    if isinstance(element, FormalReference) and element.expression is not None:
        element.evaluate_raw = functools.partial(_print_reference, element)
    for value in vars(element).values():
        for child in value if isinstance(value, list) else [value]:
            if isinstance(child, _Element):
                _make_references_strict(child, seen)


def _print_reference(reference: Any, stream: StoppableStream, namespace: Any, loader: Any) -> None:
    value = reference.expression.calculate(namespace, loader)
    if value is None and reference.alternate is not None:
        value = reference.alternate.calculate(namespace, loader)
    if value is None:
        text = reference.my_text()
        if not text.startswith("$!"):
            raise VtlError(f"{text} is undefined or null: set it, or write it quiet ($!...) to print nothing")
        return
    stream.write(value if isinstance(value, str) else value_to_string(value))
