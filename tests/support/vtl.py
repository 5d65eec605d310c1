"""A strict evaluator for the subset of API Gateway's VTL (Velocity) our mapping templates use.

Enough to run a request template against a request and check the JSON it produces:

* directives on their own line: ``#set($x = EXPR)``, ``#if(COND)``, ``#elseif(COND)``,
  ``#else``, ``#end``; COND is ``EXPR == EXPR``, ``EXPR != EXPR`` or ``EXPR``;
* references ``$a.b.c('x').d()`` and ``$!a`` (quiet: empty when null), in text and expressions;
* string literals: ``'...'`` verbatim, ``"..."`` with ``$x`` / ``$!x`` interpolation;
* ``#set`` with a null right-hand side leaves the variable unchanged (Velocity 1.x, as API Gateway);
* ``$util.escapeJavaScript`` exactly as Apache Commons Lang 2 (``'`` -> ``\\'``, ``/`` -> ``\\/``,
  non-ASCII -> ``\\uXXXX`` per UTF-16 unit); Java ``String.replaceAll`` and ``contains``;
* ``$input.params()`` / ``.params(name)`` / ``.json(path)`` / ``.path(path)`` for ``$.field``
  paths, ``$context.*`` from a dict.

Anything else (an unknown directive, a reference to an undefined variable in text) raises, so a
template cannot pass a test by using syntax this evaluator silently misreads.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any


class VtlError(ValueError):
    pass


class JString(str):
    """A Java String: the methods our templates call."""

    def replaceAll(self, regex: str, replacement: str) -> JString:
        # Java replacement strings treat \ and $ specially; ours have neither.
        if "\\" in replacement or "$" in replacement:
            raise VtlError(f"unsupported replacement {replacement!r}")
        return JString(re.sub(regex, lambda _: replacement, self))

    def contains(self, other: str) -> bool:
        return other in self


def escape_javascript(value: Any) -> JString:
    """Apache Commons Lang 2 ``StringEscapeUtils.escapeJavaScript``."""
    if value is None:
        return JString("")
    out = []
    for unit in _utf16_units(str(value)):
        if unit > 0xFFF:
            out.append(f"\\u{unit:04X}")
        elif unit > 0xFF:
            out.append(f"\\u0{unit:03X}")
        elif unit > 0x7F:
            out.append(f"\\u00{unit:02X}")
        elif unit < 32:
            special = {8: "\\b", 10: "\\n", 9: "\\t", 12: "\\f", 13: "\\r"}
            out.append(special.get(unit, f"\\u00{unit:02X}" if unit > 0xF else f"\\u000{unit:X}"))
        else:
            ch = chr(unit)
            out.append({"'": "\\'", '"': '\\"', "\\": "\\\\", "/": "\\/"}.get(ch, ch))
    return JString("".join(out))


def _utf16_units(text: str) -> list[int]:
    data = text.encode("utf-16-be", "surrogatepass")
    return [int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2)]


class Util:
    def escapeJavaScript(self, value: Any) -> JString:
        return escape_javascript(value)


class Params:
    def __init__(self, path: Mapping[str, str], querystring: Mapping[str, str], header: Mapping[str, str]) -> None:
        self.path = {k: JString(v) for k, v in path.items()}
        self.querystring = {k: JString(v) for k, v in querystring.items()}
        self.header = {k: JString(v) for k, v in header.items()}


class Input:
    """``$input`` over a request: its body text, path parameters, query string and headers."""

    def __init__(
        self,
        body: str,
        *,
        path: Mapping[str, str] | None = None,
        querystring: Mapping[str, str] | None = None,
        header: Mapping[str, str] | None = None,
    ) -> None:
        self._body = body
        self._params = Params(path or {}, querystring or {}, header or {})

    def params(self, name: str | None = None) -> Any:
        if name is None:
            return self._params
        for source in (self._params.path, self._params.querystring, self._params.header):
            if name in source:
                return source[name]
        return JString("")

    def _select(self, path: str) -> tuple[bool, Any]:
        if path == "$":
            return True, json.loads(self._body) if self._body.strip() else None
        match = re.fullmatch(r"\$\.([A-Za-z_][A-Za-z0-9_]*)", path)
        if not match:
            raise VtlError(f"unsupported JSONPath {path!r}")
        doc = json.loads(self._body) if self._body.strip() else None
        if isinstance(doc, dict) and match.group(1) in doc:
            return True, doc[match.group(1)]
        return False, None

    def json(self, path: str) -> JString:
        found, value = self._select(path)
        return JString(json.dumps(value, ensure_ascii=False) if found else "")

    def path(self, path: str) -> Any:
        found, value = self._select(path)
        if not found or value is None:
            return None
        if isinstance(value, str):
            return JString(value)
        return value


def _to_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        # Java's toString of a map/list: only ever compared with "" in our templates.
        return json.dumps(value)
    return str(value)


class _Parser:
    def __init__(self, text: str, variables: dict[str, Any]) -> None:
        self.text = text
        self.pos = 0
        self.vars = variables

    def _peek(self, token: str) -> bool:
        return self.text.startswith(token, self.pos)

    def _skip_ws(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in " \t":
            self.pos += 1

    def _ident(self) -> str:
        match = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*").match(self.text, self.pos)
        if not match:
            raise VtlError(f"identifier expected at {self.text[self.pos : self.pos + 20]!r}")
        self.pos = match.end()
        return match.group(0)

    def reference(self) -> tuple[Any, bool, bool]:
        """(value, quiet, defined) of the reference at ``pos`` (which is at ``$``)."""
        assert self.text[self.pos] == "$"
        self.pos += 1
        quiet = self._peek("!")
        if quiet:
            self.pos += 1
        name = self._ident()
        defined = name in self.vars
        value = self.vars.get(name)
        while self._peek(".") and re.match(r"\.[A-Za-z_]", self.text[self.pos :]):
            self.pos += 1
            member = self._ident()
            if self._peek("("):
                self.pos += 1
                args = self._args()
                if value is None:
                    raise VtlError(f"method {member} called on null")
                method = getattr(value, member, None)
                if method is None:
                    raise VtlError(f"no method {member} on {type(value).__name__}")
                value = method(*args)
            elif isinstance(value, Mapping):
                value = value.get(member)
            elif value is None:
                value = None
            else:
                value = getattr(value, member, None)
        return value, quiet, defined

    def _args(self) -> list[Any]:
        args: list[Any] = []
        self._skip_ws()
        if self._peek(")"):
            self.pos += 1
            return args
        while True:
            args.append(self.expression())
            self._skip_ws()
            if self._peek(","):
                self.pos += 1
                continue
            if self._peek(")"):
                self.pos += 1
                return args
            raise VtlError(f"',' or ')' expected at {self.text[self.pos : self.pos + 20]!r}")

    def expression(self) -> Any:
        self._skip_ws()
        if self._peek("$"):
            value, _, _ = self.reference()
            return value
        if self._peek("'"):
            end = self.text.index("'", self.pos + 1)
            literal = self.text[self.pos + 1 : end]
            self.pos = end + 1
            return JString(literal)
        if self._peek('"'):
            end = self.text.index('"', self.pos + 1)
            literal = self.text[self.pos + 1 : end]
            self.pos = end + 1
            return JString(render_text(literal, self.vars))
        match = re.compile(r"-?\d+").match(self.text, self.pos)
        if match:
            self.pos = match.end()
            return int(match.group(0))
        raise VtlError(f"expression expected at {self.text[self.pos : self.pos + 20]!r}")

    def condition(self) -> bool:
        left = self.expression()
        self._skip_ws()
        for op in ("==", "!="):
            if self._peek(op):
                self.pos += 2
                right = self.expression()
                equal = _to_text(left) == _to_text(right)
                return equal if op == "==" else not equal
        return bool(left)


def render_text(text: str, variables: dict[str, Any]) -> str:
    """Interpolate references in one line of text (strict about undefined, non-quiet ones)."""
    out = []
    pos = 0
    while True:
        index = text.find("$", pos)
        if index < 0:
            out.append(text[pos:])
            return "".join(out)
        out.append(text[pos:index])
        if not re.match(r"\$!?[A-Za-z_]", text[index:]):
            out.append("$")
            pos = index + 1
            continue
        parser = _Parser(text, variables)
        parser.pos = index
        value, quiet, defined = parser.reference()
        if value is None and not quiet:
            raise VtlError(f"reference {text[index : parser.pos]!r} is null (use $! or define it)")
        if not defined and not quiet:
            raise VtlError(f"undefined variable in {text[index : parser.pos]!r}")
        out.append(_to_text(value))
        pos = parser.pos


_DIRECTIVE = re.compile(r"^\s*#(set|if|elseif|else|end)\b(.*)$")


def render(template: str, *, input: Input, context: Mapping[str, Any]) -> str:
    """The output of ``template`` for one request."""
    # The context dict itself, so a test can read what the template set (responseOverride).
    ctx = context if isinstance(context, dict) else dict(context)
    variables: dict[str, Any] = {"input": input, "context": ctx, "util": Util()}
    out: list[str] = []
    # Each frame: (this branch is active, some branch of this #if was taken, parent active)
    stack: list[tuple[bool, bool, bool]] = []
    active = True
    for line in template.split("\n"):
        match = _DIRECTIVE.match(line)
        if not match:
            if line.lstrip().startswith("#"):
                raise VtlError(f"unsupported directive in {line!r}")
            if active:
                out.append(render_text(line, variables))
            continue
        kind, rest = match.group(1), match.group(2).strip()
        if kind in ("set", "if", "elseif"):
            if not (rest.startswith("(") and rest.endswith(")")):
                raise VtlError(f"#{kind} needs (...) on its own line: {line!r}")
            body = rest[1:-1]
        if kind == "set":
            if active:
                name_match = re.match(r"\s*\$([A-Za-z_][A-Za-z0-9_]*)((?:\.[A-Za-z_]+)*)\s*=", body)
                if not name_match:
                    raise VtlError(f"unsupported #set target in {line!r}")
                parser = _Parser(body, variables)
                parser.pos = name_match.end()
                value = parser.expression()
                parser._skip_ws()
                if parser.pos != len(body):
                    raise VtlError(f"trailing text in {line!r}")
                if name_match.group(2):
                    target = variables[name_match.group(1)]
                    for part in name_match.group(2).split(".")[1:-1]:
                        target = target.setdefault(part, {})
                    if value is not None:
                        target[name_match.group(2).split(".")[-1]] = value
                elif value is not None:
                    variables[name_match.group(1)] = value
        elif kind == "if":
            taken = active and _Parser(body, variables).condition()
            stack.append((taken, taken, active))
            active = taken
        elif kind == "elseif":
            _, done, parent = stack.pop()
            taken = parent and not done and _Parser(body, variables).condition()
            stack.append((taken, done or taken, parent))
            active = taken
        elif kind == "else":
            _, done, parent = stack.pop()
            taken = parent and not done
            stack.append((taken, True, parent))
            active = taken
        else:
            if not stack:
                raise VtlError("#end without #if")
            _, _, active = stack.pop()
    if stack:
        raise VtlError("#if without #end")
    return "\n".join(out)
