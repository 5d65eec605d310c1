"""Agent inbox items: one per (inbox, handoff), true while the handoff is in the state the inbox means.

Inboxes (partition ``AGENT#<inbox>``):

* an agent's own inbox (``AGENT#<agent_id>``, items ``INBOX#<handoff_id>``): handoffs ``assigned``
  to that agent;
* the waiting inbox (:data:`keys.WAITING_INBOX`): handoffs ``queued`` for any agent;
* the managers inbox (:data:`keys.MANAGERS_INBOX`): handoffs ``escalated`` to a manager.

The shared inboxes are queues in service order: an item's sort key is
``QUEUE#<priority rank>#<waiting since>#<handoff_id>`` (:func:`keys.queue_sk`), so one Query
answers the most urgent handoff first and, within a priority, the customer waiting longest
(since the handoff record's ``created_at``, which a re-queue keeps). The key is built from the
``HANDOFF#`` record (:class:`Placement`), so every transition can delete the item it ends.

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
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from contracts.priorities import DEFAULT_PRIORITY, is_priority
from lambdas.shared import cursor as cursors
from lambdas.shared import keys
from lambdas.shared.errors import InvalidCursor, StoreError
from lambdas.shared.records import Handoff, HandoffStatus
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


#: How many pages of a shared inbox :meth:`Inbox.first_in` reads at most looking for a match.
MAX_FIRST_PAGES: Final = 8
_FIRST_PAGE_SIZE: Final = 25


@dataclass(frozen=True)
class Placement:
    """What a handoff's inbox keys are made of: its id, its priority and since when its customer waits."""

    handoff_id: str
    priority: str
    waiting_since: int

    @classmethod
    def of(cls, handoff: Handoff | Mapping[str, Any]) -> Placement:
        """The placement of a handoff record (a :class:`Handoff` or a stored item)."""
        item: Mapping[str, Any] = handoff.to_item() if isinstance(handoff, Handoff) else handoff
        handoff_id, priority, created_at = item["handoff_id"], item.get("priority"), item["created_at"]
        # put_handoff admits only known priorities; a record from before that check ranks as the default.
        return cls(str(handoff_id), str(priority) if is_priority(priority) else DEFAULT_PRIORITY, int(created_at))

    def key(self, inbox: str) -> keys.Key:
        """The key of this handoff's item in ``inbox``."""
        return keys.inbox_item_key(inbox, self.handoff_id, priority=self.priority, waiting_since=self.waiting_since)


@dataclass(frozen=True)
class InboxItem:
    """One handoff in one inbox, as a console lists it."""

    inbox: str  # own | waiting | managers
    session_id: str
    handoff_id: str
    reason: str
    priority: str
    since: int  # when it entered this inbox (epoch seconds)
    waiting_since: int  # when its customer started waiting: the handoff's creation (epoch seconds)

    def to_dict(self) -> dict[str, Any]:
        return {
            "inbox": self.inbox,
            "session_id": self.session_id,
            "handoff_id": self.handoff_id,
            "reason": self.reason,
            "priority": self.priority,
            "since": self.since,
            "waiting_since": self.waiting_since,
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


def delete_items(tx: Transaction, handoff: Handoff | Mapping[str, Any], inboxes: Iterable[str]) -> None:
    """Add the deletes of the handoff's items in ``inboxes`` to ``tx`` (actions ``inbox:<inbox>``; absent is fine)."""
    placement = Placement.of(handoff)
    for inbox in dict.fromkeys(inboxes):
        tx.delete(f"inbox:{inbox}", placement.key(inbox))


def _prefix(inbox: str) -> str:
    """The sort key prefix of ``inbox``'s items."""
    return keys.QUEUE_PREFIX if inbox in keys.SHARED_INBOXES else keys.INBOX_PREFIX


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
    ) -> InboxWrite:
        """Put a handoff into an inbox (``AGENT#<agent_id>``, key :meth:`Placement.key`) while it belongs there.

        ``agent_id`` is an agent's id or :data:`keys.WAITING_INBOX` / :data:`keys.MANAGERS_INBOX`.
        The ``HANDOFF#`` record is read first: its priority and creation place the item in a
        shared inbox's order. Then one transaction: the record is in the inbox's state
        (:func:`holds`), and the item does not exist yet. WRITTEN, PRESENT (a redelivered message)
        or STALE (the handoff moved on, or never existed: nothing is written). The item expires
        with the session TTL.
        """
        for name, value in (
            ("agent_id", agent_id),
            ("session_id", session_id),
            ("handoff_id", handoff_id),
            ("reason", reason),
        ):
            require_id(value, name)
        record = self.table.get(keys.handoff_key(session_id, handoff_id))
        if record is None:
            return InboxWrite.STALE
        placement = Placement.of(record)
        now = self.table.now()
        item = {
            **placement.key(agent_id),
            "agent_id": agent_id,
            "session_id": session_id,
            "handoff_id": handoff_id,
            "reason": reason,
            "priority": placement.priority,
            "waiting_since": placement.waiting_since,
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

    def remove_inbox_item(self, agent_id: str, handoff: Handoff) -> None:
        """Take a handoff out of an inbox (``keys.WAITING_INBOX`` for the shared one); absent is fine."""
        require_id(agent_id, "agent_id")
        self.table.client.delete_item(
            TableName=self.table.table_name, Key=marshal_item(Placement.of(handoff).key(agent_id))
        )

    def list_inbox(
        self, agent_id: str, *, managers: bool = False, limit: int = 20, cursor: str | None = None
    ) -> Page[InboxItem]:
        """What ``agent_id``'s console shows: its own inbox, then the waiting one, then (``managers``) the managers'.

        Within a shared inbox the items come in service order (the most urgent first, then the
        customer waiting longest); an agent's own in handoff-id order. At most ``limit`` (1..100) items per
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
                if not str(position[SORT_KEY]).startswith(_prefix(inboxes[first])):
                    raise InvalidCursor("it points outside the inbox")
                start = dict(position)
        rows, position_after = self._inbox_rows(inboxes, first, start, limit)
        items = self._still_true(rows)
        return Page(items, cursors.encode(scope, position_after) if position_after else None)

    def _inbox_rows(
        self, inboxes: Sequence[str], first: int, start: dict[str, Any] | None, limit: int
    ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """Up to ``limit`` item rows from ``inboxes[first:]`` after ``start``, and the position after them."""
        rows: list[dict[str, Any]] = []
        pks = [keys.agent_pk(inbox) for inbox in inboxes]
        for index in range(first, len(pks)):
            remaining = limit - len(rows)
            expr = Expr()
            request: dict[str, Any] = {
                "TableName": self.table.table_name,
                "KeyConditionExpression": (
                    f"{expr.n(PARTITION_KEY)} = {expr.v(pks[index])} AND "
                    f"begins_with({expr.n(SORT_KEY)}, {expr.v(_prefix(inboxes[index]))})"
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

    def first_in(
        self, inbox: str, *, reasons: Collection[str] | None = None, before: str | None = None
    ) -> InboxItem | None:
        """The first handoff of a shared inbox that still waits there: the one to serve next, or None.

        ``reasons``: only handoffs asking for one of these skills (an empty collection matches
        none). ``before``: only items whose sort key is below this :func:`keys.queue_sk` (those a
        handoff at that place would wait behind). Reads the queue in order, at most
        :data:`MAX_FIRST_PAGES` pages, each checked against the ``HANDOFF#`` records.
        """
        if inbox not in keys.SHARED_INBOXES:
            raise ValueError(f"inbox must be one of {keys.SHARED_INBOXES} (given {inbox!r})")
        if reasons is not None and not reasons:
            return None
        expr = Expr()
        low = expr.v(keys.QUEUE_PREFIX)
        sort_condition = (
            f"{expr.n(SORT_KEY)} BETWEEN {low} AND {expr.v(before)}"
            if before is not None
            else f"begins_with({expr.n(SORT_KEY)}, {low})"
        )
        request: dict[str, Any] = {
            "TableName": self.table.table_name,
            "KeyConditionExpression": f"{expr.n(PARTITION_KEY)} = {expr.v(keys.agent_pk(inbox))} AND {sort_condition}",
            "Limit": _FIRST_PAGE_SIZE,
            "ConsistentRead": True,
        }
        if reasons is not None:
            request["FilterExpression"] = f"{expr.n('reason')} IN ({', '.join(expr.v(r) for r in sorted(reasons))})"
        request.update(expr.params())
        for _ in range(MAX_FIRST_PAGES):
            resp = self.table.client.query(**request)
            rows = [unmarshal_item(item) for item in resp.get("Items", [])]
            rows = [row for row in rows if before is None or str(row[SORT_KEY]) < before]
            found = self._still_true(rows)
            if found:
                return found[0]
            if not resp.get("LastEvaluatedKey"):
                return None
            request["ExclusiveStartKey"] = resp["LastEvaluatedKey"]
        return None

    def ahead_of(self, handoff: Handoff, *, limit: int = MAX_PAGE_SIZE) -> int:
        """How many customers asking the same skill wait in the waiting inbox ahead of ``handoff``.

        What the customer is told when they are queued: the items sorted before the handoff's own
        place (more urgent, or as urgent and waiting longer), counted on the server (``Select
        COUNT``, so no item is read into the function) and capped at ``limit``: a queue longer than
        that is "at least ``limit``". Items a transition has not yet removed may be counted: an
        estimate, never a promise.
        """
        require_limit(limit, MAX_PAGE_SIZE)
        expr = Expr()
        own = Placement.of(handoff).key(keys.WAITING_INBOX)[SORT_KEY]
        request: dict[str, Any] = {
            "TableName": self.table.table_name,
            "KeyConditionExpression": (
                f"{expr.n(PARTITION_KEY)} = {expr.v(keys.agent_pk(keys.WAITING_INBOX))}"
                f" AND {expr.n(SORT_KEY)} BETWEEN {expr.v(keys.QUEUE_PREFIX)} AND {expr.v(own)}"
            ),
            "FilterExpression": f"{expr.n('reason')} = {expr.v(handoff.reason)}"
            f" AND {expr.n('handoff_id')} <> {expr.v(handoff.handoff_id)}",
            "Select": "COUNT",
            "ConsistentRead": True,
        }
        request.update(expr.params())
        ahead = 0
        while ahead < limit:
            resp = self.table.client.query(**request)
            ahead += int(resp.get("Count", 0))
            if not resp.get("LastEvaluatedKey"):
                break
            request["ExclusiveStartKey"] = resp["LastEvaluatedKey"]
        return min(ahead, limit)

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
                    priority=str(row.get("priority") or DEFAULT_PRIORITY),
                    since=int(row["created_at"]),
                    waiting_since=int(row.get("waiting_since") or row["created_at"]),
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
