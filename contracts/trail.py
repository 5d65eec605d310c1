"""The fields of the analytics and audit lines the router writes, with the Athena (Hive) type of each.

The trail's Glue tables are built from these (``stacks/trail.py``), the router copies exactly
:data:`ANALYTICS_ATTRIBUTES` into its analytics lines (``lambdas.events.routing``), and the
router's tests check that every line it writes names only these fields, so the tables cannot
fall behind the router. A field a line leaves out reads as NULL; an attribute an item does not
have is left out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

#: Attributes analytics may see, by item type: counters, states and ids, never content.
ANALYTICS_ATTRIBUTES: Final[Mapping[str, tuple[str, ...]]] = {
    "session": ("status", "turn_count", "created_at", "updated_at"),
    "turn": ("turn_number", "role", "created_at"),
    "summary": ("summary_number", "window_start", "window_end", "turn_count_at_summary"),
    "handoff": ("handoff_id", "reason", "priority", "status", "agent_id"),
    "review": ("status",),
    "agent": ("status", "is_manager"),
    "connection": ("connected_at",),
}

#: What every line of both streams carries.
_COMMON: Final[Mapping[str, tuple[str, str]]] = {
    "event_id": ("string", "the stream record's eventID: a line delivered twice has the same one"),
    "event_name": ("string", "INSERT, MODIFY or REMOVE"),
    "change": ("string", "created, updated, deleted, or expired (removed by the table's TTL)"),
    "item_type": ("string", "session, turn, summary, handoff, review, agent, connection or other"),
    "approximate_time": ("bigint", "when the change was made, epoch seconds"),
}

#: Item attributes analytics may see, by name (the router copies them as the item holds them).
_ATTRIBUTE_TYPES: Final[Mapping[str, tuple[str, str]]] = {
    "status": ("string", "the item's status after the change (before it, for a removal)"),
    "turn_count": ("bigint", "turns of the session so far"),
    "created_at": ("bigint", "when the item was created, epoch seconds"),
    "updated_at": ("bigint", "when the item last changed, epoch seconds"),
    "turn_number": ("bigint", "the turn's number in its session"),
    "role": ("string", "who wrote the turn: user, assistant, agent or system"),
    "summary_number": ("bigint", "the summary's number in its session"),
    "window_start": ("bigint", "first turn the summary covers"),
    "window_end": ("bigint", "last turn the summary covers"),
    "turn_count_at_summary": ("bigint", "turns of the session when it was summarised"),
    "handoff_id": ("string", "the handoff's id"),
    "reason": ("string", "why the customer asked for a person"),
    "priority": ("string", "the handoff's priority"),
    "agent_id": ("string", "the agent serving the handoff"),
    "is_manager": ("boolean", "whether the agent takes escalations"),
    "connected_at": ("bigint", "when the WebSocket connection opened, epoch seconds"),
}

#: Analytics lines (``routing.analytics_line``): counters, states and ids, never content.
ANALYTICS_FIELDS: Final[Mapping[str, tuple[str, str]]] = {
    **_COMMON,
    "session_id": ("string", "the session the item belongs to; null for agents, reviews, connections"),
    "size_bytes": ("bigint", "size of the stream record"),
    "customer_pseudonym": (
        "string",
        "the customer's pseudonym (HMAC-SHA256 of the id under the stage's pseudonym key), for items with a customer",
    ),
    **{name: _ATTRIBUTE_TYPES[name] for name in sorted({a for attrs in ANALYTICS_ATTRIBUTES.values() for a in attrs})},
}

#: Audit lines (``routing.audit_line``): keys, the change, the actor, digests of the images.
AUDIT_FIELDS: Final[Mapping[str, tuple[str, str]]] = {
    **_COMMON,
    "sequence_number": ("string", "the stream record's sequence number (orders the changes of one item)"),
    "actor": ("string", "application, or ttl for a removal by the table's TTL"),
    "pk": ("string", "the item's partition key (SESSION#<id>, AGENT#<id>, ...)"),
    "sk": ("string", "the item's sort key (META, TURN#..., HANDOFF#..., ...)"),
    "changed_attributes": ("array<string>", "names of the attributes the change set, changed or removed"),
    "old_digest": ("string", "SHA-256 of the item before the change; null for a creation"),
    "new_digest": ("string", "SHA-256 of the item after the change; null for a removal"),
    "old_status": ("string", "status before the change, when the change set it"),
    "new_status": ("string", "status after the change, when the change set it"),
    "decided_by": ("string", "a review's decider: automatic for an export approved by its risk score"),
    "decision_reason": ("string", "why a review was decided so: the risk score and its parts"),
    "risk_score": ("bigint", "an export request's risk score"),
    "review_threshold": ("bigint", "the stage's score from which an export needs a person"),
}

#: The review attributes an audit line copies as values (facts of the decision, no personal data).
REVIEW_DECISION_ATTRIBUTES: Final = ("decided_by", "decision_reason", "risk_score", "review_threshold")
