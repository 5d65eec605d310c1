"""Expression builders: placeholders for every name and value, and UpdateExpressions built clause by clause."""

from __future__ import annotations

from typing import Any

from lambdas.shared.serialize import AttributeValue, marshal


class Expr:
    """Collects ``ExpressionAttributeNames``/``Values`` while an expression is written.

    Every attribute goes through a ``#name`` placeholder, so reserved words (status, ttl, name)
    never matter.
    """

    def __init__(self) -> None:
        self._names: dict[str, str] = {}
        self._values: dict[str, AttributeValue] = {}

    def n(self, attribute: str) -> str:
        placeholder = f"#{attribute}"
        self._names[placeholder] = attribute
        return placeholder

    def key(self, name: str) -> str:
        """A placeholder for any name, such as a map key that is a connection id (``#k0``, ``#k1``, ...)."""
        placeholder = f"#k{sum(1 for p in self._names if p.startswith('#k'))}"
        self._names[placeholder] = name
        return placeholder

    def v(self, value: Any) -> str:
        placeholder = f":v{len(self._values)}"
        self._values[placeholder] = marshal(value)
        return placeholder

    def params(self) -> dict[str, Any]:
        params: dict[str, Any] = {}
        if self._names:
            params["ExpressionAttributeNames"] = dict(self._names)
        if self._values:
            params["ExpressionAttributeValues"] = dict(self._values)
        return params


class Update:
    """An UpdateExpression under construction: SET / REMOVE / ADD clauses sharing one Expr."""

    def __init__(self, expr: Expr) -> None:
        self.expr = expr
        self._set: list[str] = []
        self._remove: list[str] = []
        self._add: list[str] = []

    def set(self, attribute: str, value: Any) -> None:
        if value is None:
            self._remove.append(self.expr.n(attribute))
        else:
            self._set.append(f"{self.expr.n(attribute)} = {self.expr.v(value)}")

    def remove(self, attribute: str) -> None:
        self._remove.append(self.expr.n(attribute))

    def add(self, attribute: str, value: int) -> None:
        self._add.append(f"{self.expr.n(attribute)} {self.expr.v(value)}")

    def set_clause(self, clause: str) -> None:
        """A SET clause written with this update's placeholders (arithmetic, a map entry)."""
        self._set.append(clause)

    def remove_path(self, path: str) -> None:
        """A REMOVE of a path written with this update's placeholders (a map entry)."""
        self._remove.append(path)

    def expression(self) -> str:
        parts = []
        if self._set:
            parts.append("SET " + ", ".join(self._set))
        if self._remove:
            parts.append("REMOVE " + ", ".join(self._remove))
        if self._add:
            parts.append("ADD " + ", ".join(self._add))
        return " ".join(parts)
