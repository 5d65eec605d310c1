"""The single table's physical schema: key attributes, index names and their key attributes.

One source for both sides: the Storage stack that creates the table and the store that reads it
import these names, so an index cannot be renamed on one side only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

PARTITION_KEY = "PK"
SORT_KEY = "SK"
TTL_ATTRIBUTE = "ttl"

KeyType = Literal["S", "N"]


@dataclass(frozen=True)
class IndexSchema:
    """A global secondary index: its name, key attributes and which attributes it projects."""

    name: str
    partition_key: str
    partition_type: KeyType
    sort_key: str
    sort_type: KeyType
    # None projects ALL attributes; a tuple projects the keys plus these attributes.
    include: tuple[str, ...] | None = None


# Sessions of a customer, newest first: only session META items carry both attributes.
CUSTOMER_SESSIONS = IndexSchema("GSI1", "customer_id", "S", "updated_at", "N")

# Sparse: only sessions waiting for cleanup (status disconnected or deleted) carry these
# attributes. The partition key is one of N shards ("CLEANUP#<n>") so that a burst of
# disconnects does not land on one partition; the sort key is the epoch second the session
# became eligible, so "waiting since before T" is one Query per shard.
CLEANUP = IndexSchema(
    "CleanupIndex",
    "cleanup_shard",
    "S",
    "cleanup_at",
    "N",
    include=("session_id", "status", "customer_id"),
)

# Sparse: one row per (available agent, skill); the attribute is removed when the agent is
# reserved or goes offline, so the index holds exactly the agents who can take a handoff now.
AVAILABLE_AGENTS = IndexSchema(
    "AvailableAgentsIndex",
    "available_skill",
    "S",
    "available_since",
    "N",
    include=("agent_id", "skills"),
)

# Sessions by status, newest into their status first: only session META items carry these
# attributes. Partition ``STATUS#<status>``, sort ``<epoch second it entered the status, 10
# digits>#<session id>`` (unique, so a page boundary never splits equal keys). Every status change
# rewrites both in the same write. The projection holds only attributes that change with the status
# or never (not ``updated_at`` or ``turn_count``): a projected attribute that changes is a write to
# the index too, and every turn changes those two, which would double the write cost of a chat.
SESSIONS_BY_STATUS = IndexSchema(
    "StatusIndex",
    "status_key",
    "S",
    "status_sort",
    "S",
    include=("session_id", "customer_id", "status", "created_at"),
)

GLOBAL_INDEXES: tuple[IndexSchema, ...] = (CUSTOMER_SESSIONS, CLEANUP, AVAILABLE_AGENTS, SESSIONS_BY_STATUS)
