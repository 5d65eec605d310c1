"""The evaluator's errors: a malformed policy document, and what it refuses to guess at."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeAlias

#: Builds the error of one place of a document from a message (``fail("no Effect")``).
Fail: TypeAlias = Callable[[str], "PolicyError"]


class PolicyError(ValueError):
    """A malformed policy document; the message names the policy, the statement and what is wrong."""


class UnsupportedCondition(PolicyError):
    """A condition operator or key this evaluator does not know, a policy variable, or a request value an
    operator cannot read: the evaluator refuses to guess."""
