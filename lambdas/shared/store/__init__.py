"""The data-access layer over the single DynamoDB table: one module per aggregate over a shared core.

Every Lambda that touches the table goes through :class:`DynamoSessionStore`; no handler builds a
key or an expression itself. Functions get their store from :func:`lambdas.shared.settings.store`
(one per container, with the stage's TTL and cleanup sharding).

Usage::

    store = settings.store()
    session = store.create_session("customer-1")
    turn = store.add_turn(session.session_id, "user", "Is volume 3 out yet?")
    page = store.list_turns(session.session_id, limit=20)

Modules: :mod:`.table` (keys, expressions, conditional writes, batch writes, pages),
:mod:`.sessions` (META, status machine, cleanup index, the session partition), :mod:`.turns`
(turns and summaries), :mod:`.chat` (a customer's message before the model is called, admitted
and accepted in three round trips), :mod:`.handoffs` (handoff records, the current handoff, the
handoff transaction, callback tokens), :mod:`.handoff_life` (closing a handoff), :mod:`.agents`,
:mod:`.inbox`, :mod:`.connections`, :mod:`.limits` (the chat's rate buckets and connection
slots). Review records belong to the approval gate, which keeps them itself.
"""

from __future__ import annotations

from lambdas.shared.store.agents import MAX_AGENT_SKILLS, Agents
from lambdas.shared.store.chat import AcceptedMessage, Chat, ChatContext, MessageAdmission, Rate
from lambdas.shared.store.handoff_life import CLOSE_OUTCOMES, Abandoned, Closed, HandoffClosed, HandoffLife
from lambdas.shared.store.handoffs import (
    WAITING_FOR_AGENT,
    WAITING_FOR_REPLY,
    Begun,
    HandoffConflict,
    SessionNotActive,
)
from lambdas.shared.store.inbox import Inbox, InboxItem, InboxWrite
from lambdas.shared.store.limits import ADMITTED, Admission
from lambdas.shared.store.table import (
    BATCH_SIZE,
    DEFAULT_BATCH_RETRIES,
    DEFAULT_CLEANUP_SHARDS,
    DEFAULT_TTL_HOURS,
    MAX_ID_LENGTH,
    MAX_ITEMS_PAGE_SIZE,
    MAX_PAGE_SIZE,
    Page,
    TableCore,
)
from lambdas.shared.store.turns import MAX_COMPRESSED_CONTENT

__all__ = [
    "ADMITTED",
    "BATCH_SIZE",
    "CLOSE_OUTCOMES",
    "DEFAULT_BATCH_RETRIES",
    "DEFAULT_CLEANUP_SHARDS",
    "DEFAULT_TTL_HOURS",
    "MAX_AGENT_SKILLS",
    "MAX_COMPRESSED_CONTENT",
    "MAX_ID_LENGTH",
    "MAX_ITEMS_PAGE_SIZE",
    "MAX_PAGE_SIZE",
    "WAITING_FOR_AGENT",
    "WAITING_FOR_REPLY",
    "Abandoned",
    "AcceptedMessage",
    "Admission",
    "Begun",
    "ChatContext",
    "Closed",
    "DynamoSessionStore",
    "HandoffClosed",
    "HandoffConflict",
    "InboxItem",
    "InboxWrite",
    "MessageAdmission",
    "Page",
    "Rate",
    "SessionNotActive",
    "TableCore",
]


class DynamoSessionStore(HandoffLife, Chat, Agents, Inbox):
    """The store on one DynamoDB table: every aggregate's operations over one :class:`TableCore`.

    Construction and options: see :class:`TableCore`.
    """
