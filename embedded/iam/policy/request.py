"""One request to decide: its action, resource and principal, and the condition keys present in it."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from embedded.iam.policy.keys import ContextValue, Scalar, context_values, lookup_key
from embedded.iam.policy.matching import split_arn
from embedded.iam.policy.principals import Principal

_ACTION = re.compile(r"[A-Za-z0-9-]+:[A-Za-z0-9]+")


@dataclass(frozen=True)
class Request:
    """One call: ``action`` on ``resource`` (an ARN, or "*" for an action without resource-level permissions) by
    ``principal``, with the condition keys present in the request. A key absent from ``context`` is absent."""

    action: str
    resource: str
    principal: Principal
    context: Mapping[str, ContextValue] = field(default_factory=dict)
    _values: Mapping[str, tuple[Scalar, ...]] = field(
        init=False, repr=False, compare=False, hash=False, default_factory=dict
    )

    def __post_init__(self) -> None:
        if _ACTION.fullmatch(self.action) is None:
            raise ValueError(f"not an action (service:Action, no wildcards): {self.action!r}")
        if self.resource != "*" and split_arn(self.resource) is None:
            raise ValueError(f"the resource must be an ARN or *, not {self.resource!r}")
        values: dict[str, tuple[Scalar, ...]] = {}
        for key, value in self.context.items():
            lookup = lookup_key(key)
            if lookup is None:
                raise ValueError(f"condition key {key!r} in the request context is not supported")
            if lookup in values:
                raise ValueError(f"condition key {key!r} is in the request context twice")
            values[lookup] = context_values(key, lookup, value)
        object.__setattr__(self, "_values", values)

    def values(self, lookup: str) -> tuple[Scalar, ...] | None:
        """The request's values of a key (by its lookup form), or None when absent (or an empty set)."""
        found = self._values.get(lookup)
        return found if found else None
