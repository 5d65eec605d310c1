"""Key builders and sort-key prefixes of the single table, in one place.

No other module formats a ``PK``/``SK`` value: records, the store and the stream router all call
these functions, so a prefix or a padding width cannot drift between writer and reader.
"""

from __future__ import annotations

import re
import zlib
from typing import Final

from lambdas.shared.schema import PARTITION_KEY, SORT_KEY

SESSION_PREFIX: Final = "SESSION#"
#: Partition key prefix of the approval gate's review records in this table (the gate is given it).
REVIEW_PREFIX: Final = "REVIEW#"
AGENT_PREFIX: Final = "AGENT#"
CONNECTION_PREFIX: Final = "CONN#"
#: Partition key prefix of the chat's rate buckets and connection slots (never in a session partition).
LIMIT_PREFIX: Final = "LIMIT#"
RATE_SK: Final = "RATE"
SLOTS_SK: Final = "CONNECTIONS"

META_SK: Final = "META"
TURN_PREFIX: Final = "TURN#"
SUMMARY_PREFIX: Final = "SUMMARY#"
HANDOFF_PREFIX: Final = "HANDOFF#"
SKILL_PREFIX: Final = "SKILL#"
INBOX_PREFIX: Final = "INBOX#"
#: The inbox every agent's console reads: handoffs waiting for any agent. No agent can have this
#: id (agent ids are JWT subjects, ``^[A-Za-z0-9-]{1,64}$``, which never contain ``_``).
WAITING_INBOX: Final = "_waiting"
#: The inbox every manager's console reads: escalated handoffs that wait for a manager.
MANAGERS_INBOX: Final = "_managers"

CLEANUP_SHARD_PREFIX: Final = "CLEANUP#"

# Zero-padded so that lexical SK order is numeric order (a Query range is a turn range).
NUMBER_WIDTH: Final = 10
MAX_NUMBER: Final = 10**NUMBER_WIDTH - 1

# Child items of a session partition, other than META: what ``invalidate`` may delete.
SESSION_CHILD_PREFIXES: Final = (TURN_PREFIX, SUMMARY_PREFIX, HANDOFF_PREFIX)

Key = dict[str, str]
"""A primary key in plain Python form: ``{"PK": ..., "SK": ...}``."""

_TURN_SK_RE: Final = re.compile(rf"^{TURN_PREFIX}\d{{{NUMBER_WIDTH}}}$")

#: A uuid in its canonical lowercase text form.
UUID_PATTERN: Final = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
#: The one rule for a session id wherever one arrives (REST, WebSocket, the workflows): the
#: uuid4 text ``create_session`` mints. Anything else cannot name a session, so it is refused
#: before any read.
SESSION_ID_PATTERN: Final = UUID_PATTERN


def is_session_id(value: object) -> bool:
    """True when ``value`` is a well-formed session id (:data:`SESSION_ID_PATTERN`)."""
    return isinstance(value, str) and bool(SESSION_ID_PATTERN.fullmatch(value))


def _padded(number: int, what: str) -> str:
    if isinstance(number, bool) or not isinstance(number, int) or not 0 <= number <= MAX_NUMBER:
        raise ValueError(f"{what} must be an int in 0..{MAX_NUMBER} (given {number!r})")
    return f"{number:0{NUMBER_WIDTH}d}"


def key(pk: str, sk: str) -> Key:
    """The primary key ``{PK: pk, SK: sk}``."""
    return {PARTITION_KEY: pk, SORT_KEY: sk}


def session_pk(session_id: str) -> str:
    return f"{SESSION_PREFIX}{session_id}"


def session_key(session_id: str) -> Key:
    """Key of a session's META item."""
    return key(session_pk(session_id), META_SK)


def turn_sk(turn_number: int) -> str:
    return f"{TURN_PREFIX}{_padded(turn_number, 'turn_number')}"


def turn_key(session_id: str, turn_number: int) -> Key:
    return key(session_pk(session_id), turn_sk(turn_number))


def is_turn_sk(sk: str) -> bool:
    """True when ``sk`` is exactly a turn sort key as :func:`turn_sk` builds it."""
    return bool(_TURN_SK_RE.fullmatch(sk))


def summary_sk(summary_number: int) -> str:
    return f"{SUMMARY_PREFIX}{_padded(summary_number, 'summary_number')}"


def summary_key(session_id: str, summary_number: int) -> Key:
    return key(session_pk(session_id), summary_sk(summary_number))


def handoff_sk(handoff_id: str) -> str:
    return f"{HANDOFF_PREFIX}{handoff_id}"


def handoff_key(session_id: str, handoff_id: str) -> Key:
    return key(session_pk(session_id), handoff_sk(handoff_id))


def agent_pk(agent_id: str) -> str:
    return f"{AGENT_PREFIX}{agent_id}"


def agent_key(agent_id: str) -> Key:
    return key(agent_pk(agent_id), META_SK)


def agent_skill_key(agent_id: str, skill: str) -> Key:
    """Key of the per-skill row that feeds the sparse AvailableAgentsIndex."""
    return key(agent_pk(agent_id), f"{SKILL_PREFIX}{skill}")


#: The registry's directory: one row per registered agent in one partition, so that listing the
#: agents is one paginated Query (agent ids never contain ``#``).
AGENT_DIRECTORY_PK: Final = "DIRECTORY#AGENTS"


def agent_directory_key(agent_id: str) -> Key:
    """Key of an agent's row in the registry directory (written only by registry operations)."""
    return key(AGENT_DIRECTORY_PK, f"{AGENT_PREFIX}{agent_id}")


def agent_inbox_key(agent_id: str, handoff_id: str) -> Key:
    """Key of one handoff in an agent's inbox (written by the dashboard updater)."""
    return key(agent_pk(agent_id), f"{INBOX_PREFIX}{handoff_id}")


def connection_key(connection_id: str) -> Key:
    return key(f"{CONNECTION_PREFIX}{connection_id}", META_SK)


def rate_bucket_key(scope: str, subject: str) -> Key:
    """Key of one message-rate bucket: ``LIMIT#<scope>#<subject>`` / ``RATE`` (scope: conn or customer)."""
    return key(f"{LIMIT_PREFIX}{scope}#{subject}", RATE_SK)


def connection_slots_key(customer_id: str) -> Key:
    """Key of a customer's live-connection slots: ``LIMIT#customer#<id>`` / ``CONNECTIONS``."""
    return key(f"{LIMIT_PREFIX}customer#{customer_id}", SLOTS_SK)


def cleanup_shard(session_id: str, shards: int) -> str:
    """The CleanupIndex partition of a session: ``CLEANUP#<crc32(session_id) % shards>``.

    crc32, not ``hash()``: the shard must be the same in every process (``hash`` is salted).
    """
    if shards < 1:
        raise ValueError(f"shards must be >= 1 (given {shards})")
    return f"{CLEANUP_SHARD_PREFIX}{zlib.crc32(session_id.encode()) % shards}"


def cleanup_shards(shards: int) -> list[str]:
    """Every CleanupIndex partition, in order: what a full sweep queries."""
    return [f"{CLEANUP_SHARD_PREFIX}{n}" for n in range(shards)]
