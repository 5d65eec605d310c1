"""The handoff priorities, written once: the request schema's enum, the Lambdas' checks and the inbox order.

A handoff request names one of :data:`PRIORITIES` (``normal`` when it names none). The API
gateway refuses any other value (the ``HandoffRequest`` model's enum), and the handoff workflow's
first Lambda refuses it again (:class:`contracts.workflows.InvalidPriority`), since an execution
can be started without the gateway. The rank orders the shared inboxes: the most urgent first,
then the customer waiting longest.
"""

from __future__ import annotations

from typing import Final

#: Every priority, least urgent first (the order the request schema lists them in).
PRIORITIES: Final = ("low", "normal", "high", "urgent")
#: What a handoff request without a priority gets.
DEFAULT_PRIORITY: Final = "normal"
#: 0 is served first: ``urgent`` 0, ``high`` 1, ``normal`` 2, ``low`` 3 (one digit, so it sorts as text).
RANKS: Final = {priority: len(PRIORITIES) - 1 - index for index, priority in enumerate(PRIORITIES)}


def is_priority(value: object) -> bool:
    """True when ``value`` is one of :data:`PRIORITIES`."""
    return isinstance(value, str) and value in RANKS


def rank(priority: str) -> int:
    """The rank of ``priority`` (0 = most urgent); ValueError naming the allowed values for any other."""
    if not is_priority(priority):
        raise ValueError(f"priority must be one of {', '.join(PRIORITIES)} (given {priority!r})")
    return RANKS[priority]
