"""The key shapes of the single table: partition key prefixes and fixed sort keys of every record.

The Lambda side builds every key from these (``lambdas.shared.keys``); the stacks read the same
names where a template names a key (the stream router's filter, the handoff workflow's direct
read of a session, the approval gate's review records), so a prefix cannot drift between them.
"""

from __future__ import annotations

from typing import Final

SESSION_PREFIX: Final = "SESSION#"
#: Partition key prefix of the approval gate's review records in this table (the gate is given it).
REVIEW_PREFIX: Final = "REVIEW#"
AGENT_PREFIX: Final = "AGENT#"
CONNECTION_PREFIX: Final = "CONN#"
#: Partition key prefix of the chat's rate buckets and connection slots (never in a session partition).
LIMIT_PREFIX: Final = "LIMIT#"
RATE_SK: Final = "RATE"
SLOTS_SK: Final = "CONNECTIONS"
#: A customer's token budget of one UTC day: ``LIMIT#customer#<id>`` / ``TOKENS#<YYYY-MM-DD>``.
TOKENS_PREFIX: Final = "TOKENS#"
#: A message the customer sent with a ``client_message_id``: ``LIMIT#customer#<id>`` / ``SENT#<client_message_id>``.
SENT_PREFIX: Final = "SENT#"

META_SK: Final = "META"
TURN_PREFIX: Final = "TURN#"
SUMMARY_PREFIX: Final = "SUMMARY#"
HANDOFF_PREFIX: Final = "HANDOFF#"
SKILL_PREFIX: Final = "SKILL#"
#: An agent's own inbox item: ``INBOX#<handoff_id>`` (an agent serves one handoff at a time).
INBOX_PREFIX: Final = "INBOX#"
#: A shared inbox's item (waiting, managers): ``QUEUE#<rank>#<waiting since, zero-padded>#<handoff_id>``,
#: so that a Query answers the most urgent first, then the customer waiting longest.
QUEUE_PREFIX: Final = "QUEUE#"
#: The inbox every agent's console reads: handoffs waiting for any agent. No agent can have this
#: id (agent ids are JWT subjects, ``^[A-Za-z0-9-]{1,64}$``, which never contain ``_``).
WAITING_INBOX: Final = "_waiting"
#: The inbox every manager's console reads: escalated handoffs that wait for a manager.
MANAGERS_INBOX: Final = "_managers"
#: The registry's directory: one row per registered agent in one partition, so that listing the
#: agents is one paginated Query (agent ids never contain ``#``).
AGENT_DIRECTORY_PK: Final = "DIRECTORY#AGENTS"

CLEANUP_SHARD_PREFIX: Final = "CLEANUP#"
#: Partition key prefix of a customer's erasure record: ``ERASURE#<pseudonym of the customer id>`` / ``META``.
ERASURE_PREFIX: Final = "ERASURE#"
#: Partition key prefix of the StatusIndex: ``STATUS#<session status>`` (one partition per status).
STATUS_PREFIX: Final = "STATUS#"

# Zero-padded so that lexical SK order is numeric order (a Query range is a turn range).
NUMBER_WIDTH: Final = 10
