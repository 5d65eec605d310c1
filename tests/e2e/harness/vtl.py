"""A minimal Velocity (VTL) evaluator for API Gateway mapping templates.

It supports what mapping templates of this app use: references (``$input``, ``$context``,
``$util``, ``$stageVariables``, ``$!quiet``, ``${formal}``), property and method chains with
literal or nested arguments, ``#set``, ``#if``/``#elseif``/``#else``/``#end``, ``#foreach``,
``##`` comments, and the comparison / boolean operators. ``$input.json``, ``$input.path``,
``$input.params``, ``$input.body`` and ``$util.*`` behave as API Gateway documents them (notably
``$util.escapeJavaScript`` escapes ``'`` as ``\\'``, as API Gateway's does). Anything else raises
``UnsupportedVtl`` naming the construct, so a template the harness cannot evaluate fails loudly.
"""

from __future__ import annotations

import base64
import json
import re
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


class UnsupportedVtl(ValueError):
    """A construct the evaluator does not implement; the message quotes it."""


# ---------------------------------------------------------------------- the API Gateway variables


def _json_path(document: Any, path: str) -> Any:
    from jsonpath_ng.ext import parse  # type: ignore[attr-defined]

    if path in ("$", ""):
        return document
    matches = [m.value for m in parse(path).find(document)]
    if not matches:
        return None
    return matches[0] if len(matches) == 1 else matches


@dataclass
class Input:
    """``$input``: the request (or integration response) body and the request parameters."""

    body: str
    params_by_kind: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def _document(self) -> Any:
        if not self.body:
            return {}
        try:
            return json.loads(self.body)
        except ValueError:
            raise UnsupportedVtl("$input.json/$input.path on a body that is not JSON") from None

    def json(self, path: str) -> str:
        return json.dumps(_json_path(self._document(), path))

    def path(self, path: str) -> Any:
        return _json_path(self._document(), path)

    def params(self, name: str | None = None) -> Any:
        if name is None:
            return {k: dict(v) for k, v in self.params_by_kind.items()}
        for kind in ("path", "querystring", "header"):
            values = self.params_by_kind.get(kind, {})
            if kind == "header":
                lowered = {k.lower(): v for k, v in values.items()}
                if name.lower() in lowered:
                    return lowered[name.lower()]
            elif name in values:
                return values[name]
        return ""


def escape_javascript(text: Any) -> str:
    """Apache Commons ``escapeEcmaScript``, which API Gateway's ``$util.escapeJavaScript`` uses."""
    out = []
    for char in str(text):
        code = ord(char)
        if char in "'\"\\/":
            out.append("\\" + char)
        elif char == "\b":
            out.append("\\b")
        elif char == "\n":
            out.append("\\n")
        elif char == "\t":
            out.append("\\t")
        elif char == "\f":
            out.append("\\f")
        elif char == "\r":
            out.append("\\r")
        elif code < 32 or code > 0x7E:
            out.extend(f"\\u{unit:04X}" for unit in _utf16_units(char))
        else:
            out.append(char)
    return "".join(out)


def _utf16_units(char: str) -> list[int]:
    data = char.encode("utf-16-be")
    return [int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2)]


class Util:
    """``$util``."""

    def escapeJavaScript(self, text: Any) -> str:
        return escape_javascript(text)

    def urlEncode(self, text: Any) -> str:
        return urllib.parse.quote_plus(str(text))

    def urlDecode(self, text: Any) -> str:
        return urllib.parse.unquote_plus(str(text))

    def base64Encode(self, text: Any) -> str:
        return base64.b64encode(str(text).encode()).decode()

    def base64Decode(self, text: Any) -> str:
        return base64.b64decode(str(text)).decode()

    def parseJson(self, text: Any) -> Any:
        return json.loads(str(text))


# ---------------------------------------------------------------------- expressions

_TOKEN = re.compile(
    r"""\s*(?:
    (?P<string>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
    |(?P<number>-?\d+(?:\.\d+)?)
    |(?P<op>==|!=|<=|>=|&&|\|\||[<>!()\[\]{},.:=+\-])
    |(?P<ref>\$!?\{?[A-Za-z_][A-Za-z0-9_]*\}?)
    |(?P<name>[A-Za-z_][A-Za-z0-9_]*)
    )""",
    re.VERBOSE,
)


def _tokens(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    position = 0
    while position < len(text):
        if text[position:].strip() == "":
            break
        match = _TOKEN.match(text, position)
        if not match or match.end() == position:
            raise UnsupportedVtl(f"cannot read expression {text!r} at {text[position:]!r}")
        kind = match.lastgroup or ""
        tokens.append((kind, match.group(kind)))
        position = match.end()
    return tokens


class _Parser:
    """Recursive descent over one VTL expression, evaluating as it goes."""

    def __init__(self, text: str, scope: dict[str, Any]) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.position = 0
        self.scope = scope

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def take(self, value: str | None = None) -> tuple[str, str]:
        token = self.peek()
        if token is None or (value is not None and token[1] != value):
            raise UnsupportedVtl(f"expected {value or 'more'} in {self.text!r}")
        self.position += 1
        return token

    def done(self) -> bool:
        return self.position >= len(self.tokens)

    def expression(self) -> Any:
        return self._or()

    def _or(self) -> Any:
        value = self._and()
        while self.peek() in (("op", "||"), ("name", "or")):
            self.take()
            right = self._and()
            value = _truthy(value) or _truthy(right)
        return value

    def _and(self) -> Any:
        value = self._compare()
        while self.peek() in (("op", "&&"), ("name", "and")):
            self.take()
            right = self._compare()
            value = _truthy(value) and _truthy(right)
        return value

    def _compare(self) -> Any:
        left = self._additive()
        token = self.peek()
        if token and token[1] in ("==", "!=", "<", ">", "<=", ">="):
            self.take()
            right = self._additive()
            op = token[1]
            if op == "==":
                return left == right
            if op == "!=":
                return left != right
            return {"<": left < right, ">": left > right, "<=": left <= right, ">=": left >= right}[op]
        return left

    def _additive(self) -> Any:
        value = self._unary()
        while self.peek() in (("op", "+"), ("op", "-")):
            op = self.take()[1]
            right = self._unary()
            if op == "+":
                value = f"{value}{right}" if isinstance(value, str) or isinstance(right, str) else value + right
            else:
                value = value - right
        return value

    def _unary(self) -> Any:
        if self.peek() in (("op", "!"), ("name", "not")):
            self.take()
            return not _truthy(self._unary())
        return self._primary()

    def _primary(self) -> Any:
        kind, value = self.take()
        if kind == "string":
            inner = value[1:-1]
            if value[0] == '"':
                return render(inner.replace('\\"', '"'), self.scope)
            return inner.replace("\\'", "'")
        if kind == "number":
            return float(value) if "." in value else int(value)
        if kind == "name" and value in ("true", "false", "null"):
            return {"true": True, "false": False, "null": None}[value]
        if kind == "op" and value == "(":
            result = self.expression()
            self.take(")")
            return result
        if kind == "op" and value == "[":
            items = []
            while self.peek() != ("op", "]"):
                items.append(self.expression())
                if self.peek() == ("op", ","):
                    self.take()
            self.take("]")
            return items
        if kind == "op" and value == "{":
            mapping = {}
            while self.peek() != ("op", "}"):
                key = self.expression()
                self.take(":")
                mapping[key] = self.expression()
                if self.peek() == ("op", ","):
                    self.take()
            self.take("}")
            return mapping
        if kind == "ref":
            return self._reference(value)
        raise UnsupportedVtl(f"unexpected {value!r} in {self.text!r}")

    def _reference(self, token: str) -> Any:
        name = token.lstrip("$!").strip("{}")
        if name not in self.scope:
            return None
        value = self.scope[name]
        while self.peek() == ("op", "."):
            self.take()
            member = self.take()[1]
            if self.peek() == ("op", "("):
                self.take()
                args = []
                while self.peek() != ("op", ")"):
                    args.append(self.expression())
                    if self.peek() == ("op", ","):
                        self.take()
                self.take(")")
                value = _call(value, member, args)
            else:
                value = _member(value, member)
        return value


def _truthy(value: Any) -> bool:
    return value is not None and value is not False and value != ""


def _member(value: Any, name: str) -> Any:
    if isinstance(value, Mapping):
        return value.get(name)
    if hasattr(value, name):
        attribute = getattr(value, name)
        return attribute() if callable(attribute) and name == "body" else attribute
    return None


def _call(value: Any, name: str, args: list[Any]) -> Any:
    if isinstance(value, Mapping):
        methods: dict[str, Callable[..., Any]] = {
            "get": lambda k: value.get(k),
            "containsKey": lambda k: k in value,
            "keySet": lambda: list(value.keys()),
            "size": lambda: len(value),
            "isEmpty": lambda: not value,
        }
        if name in methods:
            return methods[name](*args)
    if isinstance(value, (str, list)):
        methods = {
            "size": lambda: len(value),
            "length": lambda: len(value),
            "isEmpty": lambda: not value,
            "contains": lambda x: x in value,
            "toString": lambda: str(value),
            "replaceAll": lambda a, b: re.sub(a, b.replace("$", "\\"), str(value)),
            "toLowerCase": lambda: str(value).lower(),
            "toUpperCase": lambda: str(value).upper(),
        }
        if name in methods:
            return methods[name](*args)
    method = getattr(value, name, None)
    if value is not None and callable(method) and not name.startswith("_"):
        return method(*args)
    raise UnsupportedVtl(f"method {name}() on {type(value).__name__} is not supported")


def evaluate(expression: str, scope: dict[str, Any]) -> Any:
    parser = _Parser(expression, scope)
    value = parser.expression()
    if not parser.done():
        raise UnsupportedVtl(f"trailing input in expression {expression!r}")
    return value


# ---------------------------------------------------------------------- templates

_DIRECTIVE = re.compile(
    r"#(set|if|elseif|else|end|foreach|break|stop|macro|parse|include|define|evaluate)\b|##[^\n]*|#\*.*?\*#", re.S
)
_INLINE_REF = re.compile(r"\$!?\{?[A-Za-z_][A-Za-z0-9_]*\}?")


def _balanced(text: str, start: int) -> int:
    """Index just after the parenthesised group opening at ``text[start] == '('``."""
    depth, quote, i = 0, "", start
    while i < len(text):
        char = text[i]
        if quote:
            if char == "\\":
                i += 1
            elif char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise UnsupportedVtl(f"unbalanced parentheses in {text[start : start + 80]!r}")


def _reference_end(text: str, start: int) -> int:
    """End of a reference chain starting at ``text[start] == '$'`` (members and calls)."""
    match = _INLINE_REF.match(text, start)
    if match is None:
        return start
    end = match.end()
    if match.group(0).startswith(("${", "$!{")):
        return end
    while end < len(text):
        if text[end] == "." and end + 1 < len(text) and (text[end + 1].isalpha() or text[end + 1] == "_"):
            member = re.match(r"[A-Za-z_][A-Za-z0-9_]*", text[end + 1 :])
            assert member is not None
            end = end + 1 + member.end()
        elif text[end] == "(":
            end = _balanced(text, end)
        else:
            break
    return end


@dataclass
class _Node:
    kind: str  # text | ref | set | if | foreach
    text: str = ""
    branches: list[tuple[str | None, list[_Node]]] = field(default_factory=list)
    body: list[_Node] = field(default_factory=list)


def _parse(template: str) -> list[_Node]:
    root: list[_Node] = []
    stack: list[tuple[_Node, list[_Node]]] = []
    current = root
    i = 0
    while i < len(template):
        dollar = template.find("$", i)
        hash_ = template.find("#", i)
        candidates = [p for p in (dollar, hash_) if p >= 0]
        if not candidates:
            current.append(_Node("text", template[i:]))
            break
        position = min(candidates)
        if position > i:
            current.append(_Node("text", template[i:position]))
        if position == hash_ and (match := _DIRECTIVE.match(template, position)):
            word = match.group(1)
            end = match.end()
            if word is None:  # a comment
                i = (
                    end + 1
                    if template.startswith("##", position) and end < len(template) and template[end] == "\n"
                    else end
                )
                continue
            argument = ""
            if word in ("set", "if", "elseif", "foreach"):
                open_paren = template.find("(", end)
                if open_paren < 0 or template[end:open_paren].strip():
                    raise UnsupportedVtl(f"#{word} without (...) near {template[position : position + 60]!r}")
                close = _balanced(template, open_paren)
                argument = template[open_paren + 1 : close - 1]
                end = close
            if word in ("break", "stop", "macro", "parse", "include", "define", "evaluate"):
                raise UnsupportedVtl(f"#{word} is not supported")
            if word == "set":
                current.append(_Node("set", argument))
            elif word == "if":
                node = _Node("if", branches=[(argument, [])])
                current.append(node)
                stack.append((node, current))
                current = node.branches[0][1]
            elif word == "foreach":
                node = _Node("foreach", argument)
                current.append(node)
                stack.append((node, current))
                current = node.body
            elif word in ("elseif", "else"):
                if not stack or stack[-1][0].kind != "if":
                    raise UnsupportedVtl(f"#{word} outside #if")
                node = stack[-1][0]
                node.branches.append((argument if word == "elseif" else None, []))
                current = node.branches[-1][1]
            elif word == "end":
                if not stack:
                    raise UnsupportedVtl("#end without #if/#foreach")
                _node, current = stack.pop()
            # a directive alone on its line swallows the newline, as Velocity does
            if word in ("set", "if", "elseif", "else", "end", "foreach"):
                rest = template[end : template.find("\n", end) + 1 if "\n" in template[end:] else len(template)]
                if rest.strip() == "" and rest.endswith("\n"):
                    line_start = template.rfind("\n", 0, position) + 1
                    if template[line_start:position].strip() == "":
                        end += len(rest)
            i = end
            continue
        if position == dollar and _INLINE_REF.match(template, position):
            end = _reference_end(template, position)
            current.append(_Node("ref", template[position:end]))
            i = end
            continue
        current.append(_Node("text", template[position]))
        i = position + 1
    if stack:
        raise UnsupportedVtl("#if/#foreach without #end")
    return root


def _run(nodes: list[_Node], scope: dict[str, Any], out: list[str]) -> None:
    for node in nodes:
        if node.kind == "text":
            out.append(node.text)
        elif node.kind == "ref":
            quiet = node.text.startswith("$!")
            value = evaluate(node.text, scope)
            if value is None:
                out.append("" if quiet else node.text)
            else:
                out.append(_stringify(value))
        elif node.kind == "set":
            name, _, expression = node.text.partition("=")
            variable = name.strip().lstrip("$").strip("{}")
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", variable):
                raise UnsupportedVtl(f"#set of {name.strip()!r} (only variables and map properties)")
            value = evaluate(expression.strip(), scope)
            *parents, leaf = variable.split(".")
            target: Any = scope
            for parent in parents:  # $context.responseOverride.status = 409
                if not isinstance(target.get(parent), dict):
                    target[parent] = {}
                target = target[parent]
            target[leaf] = value
        elif node.kind == "if":
            for condition, body in node.branches:
                if condition is None or _truthy(evaluate(condition, scope)):
                    _run(body, scope, out)
                    break
        elif node.kind == "foreach":
            match = re.fullmatch(r"\s*\$([A-Za-z_][A-Za-z0-9_]*)\s+in\s+(.+)", node.text, re.S)
            if not match:
                raise UnsupportedVtl(f"#foreach({node.text})")
            items = evaluate(match.group(2), scope) or []
            for index, item in enumerate(items if not isinstance(items, Mapping) else list(items)):
                scope[match.group(1)] = item
                scope["foreach"] = {"hasNext": index < len(items) - 1, "index": index, "count": index + 1}
                _run(node.body, scope, out)


def _stringify(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}={_stringify(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_stringify(v) for v in value) + "]"
    return str(value)


def render(template: str, scope: dict[str, Any]) -> str:
    """Evaluate a mapping template with the given variables (``input``, ``context``, ``util``...)."""
    out: list[str] = []
    _run(_parse(template), scope, out)
    return "".join(out)


def mapping_scope(
    *,
    body: str,
    params: Mapping[str, Mapping[str, str]],
    context: Mapping[str, Any],
    stage_variables: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The variables API Gateway gives a mapping template."""
    return {
        "input": Input(body, params),
        "context": dict(context),
        "util": Util(),
        "stageVariables": dict(stage_variables or {}),
    }
