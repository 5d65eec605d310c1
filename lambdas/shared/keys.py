"""Key builders of the single table, in one place; the prefixes they use are :mod:`contracts.keys`.

No other module formats a ``PK``/``SK`` value: records, the store and the stream router all call
these functions, so a prefix or a padding width cannot drift between writer and reader. The
prefixes are re-exported here, so the Lambda code reads every key name from this module.
"""

from __future__ import annotations

import hashlib
import re
import zlib
from typing import Final

from contracts.keys import AGENT_DIRECTORY_PK as AGENT_DIRECTORY_PK
from contracts.keys import AGENT_PREFIX as AGENT_PREFIX
from contracts.keys import CLEANUP_SHARD_PREFIX as CLEANUP_SHARD_PREFIX
from contracts.keys import CONNECTION_PREFIX as CONNECTION_PREFIX
from contracts.keys import ERASURE_PREFIX as ERASURE_PREFIX
from contracts.keys import HANDOFF_PREFIX as HANDOFF_PREFIX
from contracts.keys import INBOX_PREFIX as INBOX_PREFIX
from contracts.keys import LIMIT_PREFIX as LIMIT_PREFIX
from contracts.keys import MANAGERS_INBOX as MANAGERS_INBOX
from contracts.keys import META_SK as META_SK
from contracts.keys import NUMBER_WIDTH as NUMBER_WIDTH
from contracts.keys import QUEUE_PREFIX as QUEUE_PREFIX
from contracts.keys import RATE_SK as RATE_SK
from contracts.keys import REVIEW_PREFIX as REVIEW_PREFIX
from contracts.keys import SENT_PREFIX as SENT_PREFIX
from contracts.keys import SESSION_PREFIX as SESSION_PREFIX
from contracts.keys import SKILL_PREFIX as SKILL_PREFIX
from contracts.keys import SLOTS_SK as SLOTS_SK
from contracts.keys import STATUS_PREFIX as STATUS_PREFIX
from contracts.keys import SUMMARY_PREFIX as SUMMARY_PREFIX
from contracts.keys import TOKENS_PREFIX as TOKENS_PREFIX
from contracts.keys import TURN_PREFIX as TURN_PREFIX
from contracts.keys import WAITING_INBOX as WAITING_INBOX
from contracts.priorities import rank
from contracts.schema import PARTITION_KEY, SORT_KEY

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


def agent_directory_key(agent_id: str) -> Key:
    """Key of an agent's row in the registry directory (written only by registry operations)."""
    return key(AGENT_DIRECTORY_PK, f"{AGENT_PREFIX}{agent_id}")


def agent_inbox_key(agent_id: str, handoff_id: str) -> Key:
    """Key of one handoff in an agent's own inbox (written by the dashboard updater)."""
    return key(agent_pk(agent_id), f"{INBOX_PREFIX}{handoff_id}")


SHARED_INBOXES: Final = (WAITING_INBOX, MANAGERS_INBOX)


def queue_sk(priority: str, waiting_since: int, handoff_id: str) -> str:
    """A shared inbox item's sort key: ``QUEUE#<rank>#<waiting_since, zero-padded>#<handoff_id>``.

    Ascending order is service order: the most urgent priority (rank 0) first, then the customer
    waiting longest; the handoff id only breaks ties within one second.
    """
    return f"{QUEUE_PREFIX}{rank(priority)}#{_padded(waiting_since, 'waiting_since')}#{handoff_id}"


def inbox_item_key(inbox: str, handoff_id: str, *, priority: str, waiting_since: int) -> Key:
    """Key of a handoff's item in ``inbox``: queue-ordered in the shared inboxes, by id in an agent's own."""
    if inbox in SHARED_INBOXES:
        return key(agent_pk(inbox), queue_sk(priority, waiting_since, handoff_id))
    return agent_inbox_key(inbox, handoff_id)


def connection_key(connection_id: str) -> Key:
    return key(f"{CONNECTION_PREFIX}{connection_id}", META_SK)


def rate_bucket_key(scope: str, subject: str) -> Key:
    """Key of one message-rate bucket: ``LIMIT#<scope>#<subject>`` / ``RATE`` (scope: conn or customer)."""
    return key(f"{LIMIT_PREFIX}{scope}#{subject}", RATE_SK)


def connection_slots_key(customer_id: str) -> Key:
    """Key of a customer's live-connection slots: ``LIMIT#customer#<id>`` / ``CONNECTIONS``."""
    return key(f"{LIMIT_PREFIX}customer#{customer_id}", SLOTS_SK)


def token_budget_key(customer_id: str, day: str) -> Key:
    """Key of a customer's token budget of one UTC day: ``LIMIT#customer#<id>`` / ``TOKENS#<YYYY-MM-DD>``."""
    return key(f"{LIMIT_PREFIX}customer#{customer_id}", f"{TOKENS_PREFIX}{day}")


def sent_message_key(customer_id: str, client_message_id: str) -> Key:
    """Key of a message sent with a ``client_message_id``: ``LIMIT#customer#<id>`` / ``SENT#<client_message_id>``."""
    return key(f"{LIMIT_PREFIX}customer#{customer_id}", f"{SENT_PREFIX}{client_message_id}")


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


def status_pk(status: str) -> str:
    """The StatusIndex partition of a session in ``status``: ``STATUS#<status>``."""
    return f"{STATUS_PREFIX}{status}"


def status_sort(since: int, session_id: str) -> str:
    """The StatusIndex sort key: ``<since, zero-padded>#<session_id>``, so newest-in-status is greatest."""
    return f"{_padded(since, 'since')}#{session_id}"


def status_since(sort: str) -> int:
    """The epoch second a :func:`status_sort` value holds; ValueError for any other text."""
    since, sep, session_id = sort.partition("#")
    digits = len(since) == NUMBER_WIDTH and since.isascii() and since.isdigit()
    if not sep or not digits or not is_session_id(session_id):
        raise ValueError(f"not a status sort key: {sort!r}")
    return int(since)


def customer_pseudonym(customer_id: str) -> str:
    """The SHA-256 hex digest of a customer id: what records that must outlive the customer name them by.

    A customer id is a random uuid (the user pool's ``sub``), so its digest names the customer only
    to someone who already knows the id.
    """
    return hashlib.sha256(customer_id.encode()).hexdigest()


def erasure_key(customer_id: str) -> Key:
    """Key of a customer's erasure record: ``ERASURE#<pseudonym>`` / ``META`` (no customer id in clear)."""
    return key(f"{ERASURE_PREFIX}{customer_pseudonym(customer_id)}", META_SK)
