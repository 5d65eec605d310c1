"""Prop validation through CDK's own mechanism, so every error names the construct it belongs to.

A construct collects what is wrong with its props in a :class:`PropErrors` and keeps building;
CDK runs the collected checks when the app synthesizes (``node.add_validation``) and fails with
every message, each prefixed by the construct's path::

    Validation failed with the following errors:
      [MyStack/Orders] max_concurrency must be 1..40 (given 0)

Usage inside a construct::

    errors = PropErrors(self)
    errors.check(1 <= max_concurrency <= 40, f"max_concurrency must be 1..40 (given {max_concurrency})")
    errors.check_range("retention_days", retention_days, 1, 3653)   # skips an unresolved token

Values that are unresolved tokens (known only at deploy time) are skipped, never judged.
"""

from __future__ import annotations

from typing import Any

import jsii
from aws_cdk import Token
from constructs import Construct, IValidation


def is_unresolved(value: Any) -> bool:
    """Whether ``value`` is (or contains) a CDK token resolved only at deploy time."""
    return value is not None and Token.is_unresolved(value)


@jsii.implements(IValidation)
class PropErrors:
    """The prop errors of one construct, reported by CDK at synthesis with the construct's path."""

    def __init__(self, scope: Construct) -> None:
        self._scope = scope
        self._messages: list[str] = []

    def check(self, ok: bool, message: str) -> bool:
        """Record ``message`` unless ``ok``; returns ``ok`` so a caller can skip dependent checks."""
        if not ok:
            if not self._messages:
                # Registered on the first error only: a validation CDK would find empty costs
                # two jsii round trips here and a callback at synth, for each of ~120 constructs.
                self._scope.node.add_validation(self)
            self._messages.append(message)
        return ok

    def check_range(self, name: str, value: float | None, low: float, high: float, *, unit: str = "") -> bool:
        """``value`` within ``low..high`` (``None`` and unresolved tokens pass)."""
        if value is None or is_unresolved(value):
            return True
        suffix = f" {unit}" if unit else ""
        return self.check(low <= value <= high, f"{name} must be {low}..{high}{suffix} (given {value}{suffix})")

    def check_exclusive(self, **given: Any) -> bool:
        """At most one of the named props is given: ``existing_<x>`` (used as it is) or ``<x>_props`` (a new one)."""
        names = [name for name, value in given.items() if value is not None]
        return self.check(
            len(names) <= 1,
            f"give {' or '.join(given)}, not both (given {', '.join(names)}): an existing resource is used "
            "as it is, props shape a new one",
        )

    @property
    def messages(self) -> list[str]:
        """What has been recorded so far (tests read it without synthesizing)."""
        return list(self._messages)

    def validate(self) -> list[str]:
        return list(self._messages)


def struct_values(props: Any) -> dict[str, Any]:
    """The given fields of a typed CDK props struct (e.g. ``sqs.QueueProps``) as keyword arguments.

    Lets a construct take ``queue_props: sqs.QueueProps`` and merge it over its own defaults.
    """
    if props is None:
        return {}
    return dict(getattr(props, "_values", {}))
