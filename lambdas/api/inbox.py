"""``GET /agents/me/inbox``: what the calling agent's console must act on, one page at a time.

The caller's own inbox (handoffs assigned to it), then the waiting inbox every agent reads
(handoffs queued for any agent), then, for an agent with the stage's manager skill (settings
``manager_skill``) or the manager flag, the managers inbox (escalated handoffs). Each item:
``{inbox: own|waiting|managers, session_id, handoff_id, reason, priority, since}``. Only items
whose handoff is still in the state their inbox means are answered (the store checks each page
against the ``HANDOFF#`` records; see ``lambdas/shared/store/inbox.py``), so a page may hold fewer
than ``limit`` items while ``next_cursor`` is set.

Query: ``limit`` 1..100 (default 20), ``cursor`` (the previous page's ``next_cursor``; a cursor
is bound to the caller and cannot open another agent's inbox). The agent role only: the inbox
is the caller's own (``me``), and an admin is no agent with an inbox.
"""

from __future__ import annotations

from typing import Any, Final

from lambdas.shared import cursor as cursors
from lambdas.shared import keys
from lambdas.shared.records import Agent, AgentStatus
from lambdas.shared.settings import settings
from lambdas.shared.settings import store as store
from lambdas.shared.store.inbox import InboxItem

MAX_LIMIT: Final = 100
DEFAULT_LIMIT: Final = 20

#: The query string of ``GET /agents/me/inbox`` (validated at the gateway: the parameter names;
#: here: the values).
INBOX_QUERY: Final[dict[str, Any]] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT},
        "cursor": {"type": "string", "minLength": 1, "maxLength": cursors.MAX_LENGTH},
    },
}


def reads_managers_inbox(agent: Agent) -> bool:
    """True for a manager: the stage's manager skill, or the registry's manager flag."""
    return agent.is_manager or settings().manager_skill in agent.skills


def offered(agent: Agent) -> InboxItem | None:
    """The customer ``agent`` is offered now: the most urgent, longest-waiting one it can take (see ``next``)."""
    if agent.status != AgentStatus.AVAILABLE:
        return None
    inbox = store().inbox
    first = inbox.first_in(keys.MANAGERS_INBOX) if reads_managers_inbox(agent) else None
    return first or inbox.first_in(keys.WAITING_INBOX, reasons=agent.skills)


def _shown(item: InboxItem, now: int) -> dict[str, Any]:
    return {**item.to_dict(), "waiting_seconds": max(0, now - item.waiting_since)}


def read_inbox(agent: Agent, *, limit: int, cursor: str | None) -> dict[str, Any]:
    """One page of ``agent``'s inbox as the route answers it."""
    managers = reads_managers_inbox(agent)
    page = store().inbox.list_inbox(agent.agent_id, managers=managers, limit=limit, cursor=cursor)
    first = offered(agent)
    now = store().table.now()
    return {
        "agent_id": agent.agent_id,
        "inboxes": ["own", "waiting", *(["managers"] if managers else [])],
        "items": [_shown(item, now) for item in page.items],
        "next": _shown(first, now) if first is not None else None,
        "next_cursor": page.next_cursor,
    }
