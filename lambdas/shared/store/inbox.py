"""Agent inbox items: one per (inbox, handoff), true while the handoff is in the state the inbox means.

Inboxes (partition ``AGENT#<inbox>``, items ``INBOX#<handoff_id>``):

* an agent's own inbox (``AGENT#<agent_id>``): handoffs ``assigned`` to that agent;
* the waiting inbox (:data:`keys.WAITING_INBOX`): handoffs ``queued`` for any agent;
* the managers inbox (:data:`keys.MANAGERS_INBOX`): handoffs ``escalated`` to a manager.

The rule (:func:`holds`) is kept from both ends:

* a write happens only while it holds: :meth:`Inbox.put_inbox_item` is one TransactWriteItems,
  a ConditionCheck on the ``HANDOFF#`` record's status (and agent) plus the Put. A message that
  arrives after the handoff moved on writes nothing (:attr:`InboxWrite.STALE`), so a late write
  can never resurrect an item a transition removed;
* every transition of the ``HANDOFF#`` record deletes, in its own transaction, the items the
  new state makes untrue (:func:`untrue_after`, :func:`delete_items`): assignment, escalation,
  re-queueing, close, failure, a customer who leaves.

A read (:meth:`Inbox.list_inbox`) checks each item against its record again and leaves out any
that no longer holds, so even an item a transition outside the store left behind never shows.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from lambdas.shared import cursor as cursors
from lambdas.shared import keys
from lambdas.shared.errors import InvalidCursor, StoreError
from lambdas.shared.records import HandoffStatus
from lambdas.shared.schema import PARTITION_KEY, SORT_KEY, TTL_ATTRIBUTE
from lambdas.shared.serialize import marshal_item, unmarshal_item
from lambdas.shared.store.expressions import Expr
from lambdas.shared.store.table import (
    MAX_PAGE_SIZE,
    Aggregate,
    Cancelled,
    Page,
    Transaction,
    require_id,
    require_limit,
)

#: What a listing calls each inbox.
OWN: Final = "own"
WAITING: Final = "waiting"
MANAGERS: Final = "managers"
#: The handoff status each shared inbox stands for (an agent's own inbox: assigned to it).
SHARED_STATUS: Final[Mapping[str, HandoffStatus]] = {
    keys.WAITING_INBOX: HandoffStatus.QUEUED,
    keys.MANAGERS_INBOX: HandoffStatus.ESCALATED,
}
_KIND: Final[Mapping[str, str]] = {keys.WAITING_INBOX: WAITING, keys.MANAGERS_INBOX: MANAGERS}


class InboxWrite(enum.Enum):
    """What :meth:`Inbox.put_inbox_item` did; truthy only when it wrote the item."""

    WRITTEN = "written"
    PRESENT = "present"  # the item was there already (a redelivered message)
    STALE = "stale"  # the handoff is no longer in the inbox's state (or does not exist)

    def __bool__(self) -> bool:
        return self is InboxWrite.WRITTEN


class InboxUnverified(StoreError):
    """DynamoDB kept some handoff records of an inbox page unprocessed; the page is not answered."""


@dataclass(frozen=True)
class InboxItem:
    """One handoff in one inbox, as a console lists it."""

    inbox: str  # own | waiting | managers
    session_id: str
    handoff_id: str
    reason: str
    priority: str
    since: int  # when it entered this inbox (epoch seconds)

    def to_dict(self) -> dict[str, Any]:
        return {
            "inbox": self.inbox,
            "session_id": self.session_id,
            "handoff_id": self.handoff_id,
            "reason": self.reason,
            "priority": self.priority,
            "since": self.since,
        }


def inbox_kind(inbox: str) -> str:
    """``waiting``, ``managers`` or ``own`` (an agent id)."""
    return _KIND.get(inbox, OWN)


def holds(inbox: str, status: HandoffStatus | str | None, agent_id: str | None) -> bool:
    """True when a handoff in ``status`` (assigned to ``agent_id``) belongs in ``inbox``."""
    if inbox in SHARED_STATUS:
        return status == SHARED_STATUS[inbox]
    return status == HandoffStatus.ASSIGNED and agent_id == inbox


def untrue_after(previous_agent: str | None, status: HandoffStatus | str, agent_id: str | None = None) -> list[str]:
    """The inboxes whose item of a handoff stops being true when it becomes ``status`` (``agent_id``).

    The shared inboxes, and the agent it was assigned to before (``previous_agent``).
    """
    candidates = [*SHARED_STATUS, *([previous_agent] if previous_agent else [])]
    return [inbox for inbox in candidates if not holds(inbox, status, agent_id)]


def delete_items(tx: Transaction, handoff_id: str, inboxes: Iterable[str]) -> None:
    """Add the deletes of the handoff's items in ``inboxes`` to ``tx`` (actions ``inbox:<inbox>``; absent is fine)."""
    for inbox in dict.fromkeys(inboxes):
        tx.delete(f"inbox:{inbox}", keys.agent_inbox_key(inbox, handoff_id))


def _state_condition(inbox: str, expr: Expr) -> str:
    """The condition on a ``HANDOFF#`` record under which ``inbox`` may hold it."""
    if inbox in SHARED_STATUS:
        return f"{expr.n('status')} = {expr.v(str(SHARED_STATUS[inbox]))}"
    return f"{expr.n('status')} = {expr.v(str(HandoffStatus.ASSIGNED))} AND {expr.n('agent_id')} = {expr.v(inbox)}"


class Inbox(Aggregate):
    """Inbox operations."""

    def put_inbox_item(
        self,
        agent_id: str,
        *,
        session_id: str,
        handoff_id: str,
        reason: str,
        priority: str = "normal",
    ) -> InboxWrite:
        """Put a handoff into an inbox (``AGENT#<agent_id>`` / ``INBOX#<handoff_id>``) while it belongs there.

        ``agent_id`` is an agent's id or :data:`keys.WAITING_INBOX` / :data:`keys.MANAGERS_INBOX`.
        One transaction: the ``HANDOFF#`` record is in the inbox's state (:func:`holds`), and the
        item does not exist yet. WRITTEN, PRESENT (a redelivered message) or STALE (the handoff
        moved on, or never existed: nothing is written). The item expires with the session TTL.
        """
        for name, value in (
            ("agent_id", agent_id),
            ("session_id", session_id),
            ("handoff_id", handoff_id),
            ("reason", reason),
        ):
            require_id(value, name)
        now = self.table.now()
        item = {
            **keys.agent_inbox_key(agent_id, handoff_id),
            "agent_id": agent_id,
            "session_id": session_id,
            "handoff_id": handoff_id,
            "reason": reason,
            "priority": priority,
            "created_at": now,
            TTL_ATTRIBUTE: now + self.table.ttl_seconds,
        }
        tx = Transaction(self.table.table_name)
        check = Expr()
        tx.check("handoff", keys.handoff_key(session_id, handoff_id), _state_condition(agent_id, check), check)
        tx.put_new("item", item)
        try:
            self.table.commit(tx)
        except Cancelled as cancelled:
            if "handoff" in cancelled.failed:
                return InboxWrite.STALE
            if "item" in cancelled.failed:
                return InboxWrite.PRESENT
            raise cancelled.error from None
        return InboxWrite.WRITTEN

    def remove_inbox_item(self, agent_id: str, handoff_id: str) -> None:
        """Take a handoff out of an inbox (``keys.WAITING_INBOX`` for the shared one); absent is fine."""
        require_id(agent_id, "agent_id")
        require_id(handoff_id, "handoff_id")
        self.table.client.delete_item(
            TableName=self.table.table_name, Key=marshal_item(keys.agent_inbox_key(agent_id, handoff_id))
        )

    def list_inbox(
        self, agent_id: str, *, managers: bool = False, limit: int = 20, cursor: str | None = None
    ) -> Page[InboxItem]:
        """What ``agent_id``'s console shows: its own inbox, then the waiting one, then (``managers``) the managers'.

        Within an inbox the items come in handoff-id order. At most ``limit`` (1..100) items per
        page; ``next_cursor`` continues where the page ended (None on the last page). Each item is
        checked against its ``HANDOFF#`` record (one consistent BatchGetItem per page) and left
        out unless it still holds, so a page may hold fewer than ``limit`` items.
        """
        require_id(agent_id, "agent_id")
        require_limit(limit, MAX_PAGE_SIZE)
        inboxes = [agent_id, keys.WAITING_INBOX, *([keys.MANAGERS_INBOX] if managers else [])]
        pks = [keys.agent_pk(inbox) for inbox in inboxes]
        scope = f"inbox:{agent_id}"
        first, start = 0, None
        if cursor is not None:
            position = cursors.decode(cursor, scope, {PARTITION_KEY: str, SORT_KEY: str}, {PARTITION_KEY: str})
            if position[PARTITION_KEY] not in pks:
                raise InvalidCursor("it was issued for another inbox")
            first = pks.index(str(position[PARTITION_KEY]))
            if SORT_KEY in position:
                if not str(position[SORT_KEY]).startswith(keys.INBOX_PREFIX):
                    raise InvalidCursor("it points outside the inbox")
                start = dict(position)
        rows, position_after = self._inbox_rows(pks, first, start, limit)
        items = self._still_true(rows)
        return Page(items, cursors.encode(scope, position_after) if position_after else None)

    def _inbox_rows(
        self, pks: Sequence[str], first: int, start: dict[str, Any] | None, limit: int
    ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """Up to ``limit`` item rows from ``pks[first:]`` after ``start``, and the position after them."""
        rows: list[dict[str, Any]] = []
        for index in range(first, len(pks)):
            remaining = limit - len(rows)
            expr = Expr()
            request: dict[str, Any] = {
                "TableName": self.table.table_name,
                "KeyConditionExpression": (
                    f"{expr.n(PARTITION_KEY)} = {expr.v(pks[index])} AND "
                    f"begins_with({expr.n(SORT_KEY)}, {expr.v(keys.INBOX_PREFIX)})"
                ),
                # A full page still looks one item ahead, so that it gets no cursor to an empty page.
                "Limit": remaining + 1,
                "ConsistentRead": True,
                **expr.params(),
            }
            if index == first and start is not None:
                request["ExclusiveStartKey"] = marshal_item(start)
            resp = self.table.client.query(**request)
            found = [unmarshal_item(item) for item in resp.get("Items", [])]
            if remaining == 0:
                if found:  # the page filled exactly at the end of the previous inbox
                    return rows, {PARTITION_KEY: pks[index]}
                continue
            if len(found) > remaining:
                rows += found[:remaining]
                return rows, {PARTITION_KEY: pks[index], SORT_KEY: rows[-1][SORT_KEY]}
            rows += found
            last = resp.get("LastEvaluatedKey")
            if last:  # the 1 MB limit cut the query short
                return rows, unmarshal_item(last)
        return rows, None

    def _still_true(self, rows: list[dict[str, Any]]) -> list[InboxItem]:
        """The rows whose ``HANDOFF#`` record still puts them in their inbox, as items."""
        handoff_keys = {
            (str(row["session_id"]), str(row["handoff_id"])): keys.handoff_key(
                str(row["session_id"]), str(row["handoff_id"])
            )
            for row in rows
        }
        records = self._handoff_states(list(handoff_keys.values()))
        items = []
        for row in rows:
            inbox = str(row[PARTITION_KEY]).removeprefix(keys.AGENT_PREFIX)
            record = records.get((str(row["session_id"]), str(row["handoff_id"])))
            if record is None or not holds(inbox, record.get("status"), record.get("agent_id")):
                continue
            items.append(
                InboxItem(
                    inbox=inbox_kind(inbox),
                    session_id=str(row["session_id"]),
                    handoff_id=str(row["handoff_id"]),
                    reason=str(row["reason"]),
                    priority=str(row.get("priority") or "normal"),
                    since=int(row["created_at"]),
                )
            )
        return items

    def _handoff_states(self, handoff_keys: list[keys.Key]) -> dict[tuple[str, str], dict[str, Any]]:
        """``(session_id, handoff_id) -> {status, agent_id}`` of the given records (consistent reads)."""
        found: dict[tuple[str, str], dict[str, Any]] = {}
        if not handoff_keys:
            return found
        expr = Expr()
        projection = ", ".join(expr.n(name) for name in ("session_id", "handoff_id", "status", "agent_id"))
        pending: dict[str, Any] = {
            self.table.table_name: {
                "Keys": [marshal_item(k) for k in handoff_keys],
                "ConsistentRead": True,
                "ProjectionExpression": projection,
                "ExpressionAttributeNames": expr.params()["ExpressionAttributeNames"],
            }
        }
        for attempt in range(self.table.max_batch_retries + 1):
            resp = self.table.client.batch_get_item(RequestItems=pending)
            for raw in resp.get("Responses", {}).get(self.table.table_name, []):
                item = unmarshal_item(raw)
                found[(str(item["session_id"]), str(item["handoff_id"]))] = item
            pending = resp.get("UnprocessedKeys") or {}
            if not pending:
                return found
            self.table.sleep(self.table.backoff(attempt))
        raise InboxUnverified(
            f"{len(pending[self.table.table_name]['Keys'])} handoff records of the inbox page stayed unprocessed; retry"
        )
