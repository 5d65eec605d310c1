"""The data-access layer over the single DynamoDB table: one repository per aggregate over a shared core.

Every Lambda that touches the table goes through :class:`DynamoSessionStore`; no handler builds a
key or an expression itself. Functions get their store from :func:`lambdas.shared.settings.store`
(one per container, with the stage's TTL and cleanup sharding).

Usage::

    store = settings.store()
    session = store.sessions.create_session("customer-1")
    turn = store.turns.add_turn(session.session_id, "user", "Is volume 3 out yet?")
    page = store.turns.list_turns(session.session_id, limit=20)

The store composes one repository per aggregate over one :class:`~.table.TableCore` (the
client, the clock, the stage's TTL and sharding, and the helpers every conditional write goes
through): ``store.sessions`` (:mod:`.sessions`: META, the status machine, the cleanup index, the
session partition), ``store.turns`` (:mod:`.turns`: turns and summaries), ``store.handoffs``
(:mod:`.handoffs`: handoff records, the current handoff, callback tokens), ``store.agents``
(:mod:`.agents`), ``store.inbox`` (:mod:`.inbox`), ``store.connections`` (:mod:`.connections`),
``store.limits`` (:mod:`.limits`: the chat's rate buckets and connection slots), ``store.budgets``
(:mod:`.budgets`: a customer's daily token budgets and sent messages) and ``store.chat``
(:mod:`.chat`: a customer's message before the model is called, over turns, connections and
limits). Writes that span aggregates are use cases (:mod:`lambdas.usecases`). Review records
belong to the approval gate, which keeps them itself.
"""

from __future__ import annotations

import importlib
from functools import cached_property
from typing import TYPE_CHECKING, Any, Final

from lambdas.shared.store.budgets import BudgetCheck, Budgets, SentMessage
from lambdas.shared.store.chat import AcceptedMessage, Chat, ChatContext, MessageAdmission, Rate, Rewound, SentBefore
from lambdas.shared.store.connections import Connections
from lambdas.shared.store.limits import ADMITTED, Admission, Limits
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
from lambdas.shared.store.turns import MAX_COMPRESSED_CONTENT, Turns

if TYPE_CHECKING:
    from lambdas.shared.store.agents import MAX_AGENT_SKILLS, Agents
    from lambdas.shared.store.handoffs import (
        WAITING_FOR_AGENT,
        WAITING_FOR_REPLY,
        AgentActive,
        HandoffClosed,
        HandoffConflict,
        Handoffs,
        SessionNotActive,
    )
    from lambdas.shared.store.inbox import Inbox, InboxItem, InboxWrite
    from lambdas.shared.store.sessions import Sessions

#: The names of the repositories a chat message does not need, by the module that defines them: that
#: module is imported when one of its names is first read (a cold start compiles every module it loads).
_LATER: Final = {
    "MAX_AGENT_SKILLS": "agents",
    "Agents": "agents",
    "WAITING_FOR_AGENT": "handoffs",
    "WAITING_FOR_REPLY": "handoffs",
    "AgentActive": "handoffs",
    "HandoffClosed": "handoffs",
    "HandoffConflict": "handoffs",
    "Handoffs": "handoffs",
    "SessionNotActive": "handoffs",
    "Inbox": "inbox",
    "InboxItem": "inbox",
    "InboxWrite": "inbox",
    "Sessions": "sessions",
}


def preload(*repositories: str) -> None:
    """Import the modules of repositories the store builds on first use (``"sessions"``, ``"agents"``, ...).

    A handler whose invocations use one calls this at import: Lambda runs the init phase on a full
    vCPU, an invocation of a small function on a fraction of one, so code every invocation needs
    loads fastest there.
    """
    for name in repositories:
        if name not in _REPOSITORIES:
            raise ValueError(f"no repository {name!r} is built on first use (known: {sorted(_REPOSITORIES)})")
        importlib.import_module(f"{__name__}.{name}")


_REPOSITORIES: Final = frozenset(_LATER.values())


def __getattr__(name: str) -> Any:
    """The names of :data:`_LATER`, from their module, imported on first use."""
    module = _LATER.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "ADMITTED",
    "BATCH_SIZE",
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
    "AcceptedMessage",
    "Admission",
    "AgentActive",
    "BudgetCheck",
    "Budgets",
    "ChatContext",
    "DynamoSessionStore",
    "HandoffClosed",
    "HandoffConflict",
    "InboxItem",
    "InboxWrite",
    "MessageAdmission",
    "Page",
    "Rate",
    "Rewound",
    "SentBefore",
    "SentMessage",
    "SessionNotActive",
    "TableCore",
    "preload",
]


class DynamoSessionStore:
    """The store on one DynamoDB table: one repository per aggregate, all over one :class:`TableCore`.

    Construction and options: see :class:`TableCore` (``table_name`` and its keyword arguments).
    The repositories a chat message needs (turns, connections, limits, chat) are built with the
    store; sessions, handoffs, agents and the inbox on first use, their modules with them: the
    Message Lambda's cold start loads none of them, ``$connect`` loads sessions only.
    """

    def __init__(self, table_name: str, **options: Any) -> None:
        self.table = TableCore(table_name, **options)
        self.turns = Turns(self.table)
        self.connections = Connections(self.table)
        self.limits = Limits(self.table)
        self.budgets = Budgets(self.table)
        self.chat = Chat(
            self.table, turns=self.turns, connections=self.connections, limits=self.limits, budgets=self.budgets
        )

    @cached_property
    def sessions(self) -> Sessions:
        from lambdas.shared.store.sessions import Sessions

        return Sessions(self.table)

    @cached_property
    def handoffs(self) -> Handoffs:
        from lambdas.shared.store.handoffs import Handoffs

        return Handoffs(self.table)

    @cached_property
    def agents(self) -> Agents:
        from lambdas.shared.store.agents import Agents

        return Agents(self.table)

    @cached_property
    def inbox(self) -> Inbox:
        from lambdas.shared.store.inbox import Inbox

        return Inbox(self.table)
