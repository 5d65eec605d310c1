"""Turns and summaries of a session: atomic turn numbers, compressed content, exact summary windows.

A turn is stored in two writes: :meth:`Turns.reserve_turn` takes its number from the session's
atomic counter (the conditional write that refuses a session which no longer accepts turns), and
:meth:`Turns.put_turn` stores it under that number. :meth:`Turns.add_turn` does both; a caller
that has other work for the round trip of the PutItem (the message path reads the model's context
meanwhile) calls them apart.
"""

from __future__ import annotations

from typing import Any, Final

from lambdas.shared import cursor as cursors
from lambdas.shared import keys
from lambdas.shared.errors import (
    Conflict,
    InvalidCursor,
    InvalidInput,
    SessionChanged,
    SessionClosed,
    SessionNotFound,
)
from lambdas.shared.records import TURN_ACCEPTING, Role, Session, Summary, TokenUsage, Turn, compress
from lambdas.shared.schema import PARTITION_KEY, SORT_KEY, TTL_ATTRIBUTE
from lambdas.shared.serialize import unmarshal_item
from lambdas.shared.store.expressions import Expr, Update
from lambdas.shared.store.table import (
    MAX_PAGE_SIZE,
    Aggregate,
    ConditionFailed,
    Page,
    Transaction,
    parse_enum,
    require_id,
    require_limit,
)

# DynamoDB's item limit is 400 KB; leave room for the other attributes of a turn.
MAX_COMPRESSED_CONTENT: Final = 350_000


def checked_turn(role: Role | str, content: str) -> Role:
    """The role of a turn whose content may be stored; InvalidInput before anything is written."""
    turn_role: Role = parse_enum(Role, role, "role")
    if not isinstance(content, str):
        raise InvalidInput("content must be a string")
    if len(compress(content)) > MAX_COMPRESSED_CONTENT:
        raise InvalidInput(f"content is too large (max {MAX_COMPRESSED_CONTENT} bytes zipped)")
    return turn_role


class Turns(Aggregate):
    """Turn and summary operations."""

    def add_turn(
        self,
        session_id: str,
        role: Role | str,
        content: str,
        *,
        rewinds: int | None = None,
        stopped: str | None = None,
        usage: TokenUsage | None = None,
    ) -> Turn:
        """Append a turn: :meth:`reserve_turn` then :meth:`put_turn`, two writes, no transaction.

        The number comes from the session's atomic counter, so numbers are unique under any
        concurrency; if the process dies between the two writes, the number is burnt: a gap,
        never a duplicate. Raises InvalidInput before any write, SessionNotFound or
        SessionClosed (status not active/handoff) with nothing written. ``rewinds``: see
        :meth:`reserve_turn`. ``stopped``: see :class:`~lambdas.shared.records.Turn`. ``usage``: the
        model's tokens, on a reply it wrote.
        """
        require_id(session_id, "session_id")
        checked_turn(role, content)
        session = self.reserve_turn(session_id, rewinds=rewinds)
        return self.put_turn(session_id, session.turn_count, role, content, stopped=stopped, usage=usage)

    def reserve_turn(self, session_id: str, *, customer_id: str | None = None, rewinds: int | None = None) -> Session:
        """Take the next turn number of a session that accepts turns; returns the session after the write.

        One UpdateItem on META: ``ADD turn_count 1``, ``SET updated_at, ttl`` (the session's TTL
        slides), conditioned on the session existing in a status that accepts turns and, when
        ``customer_id`` is given, belonging to that customer. The session comes back as the write
        left it (``ReturnValues=ALL_NEW``): ``turn_count`` is the reserved number and ``status``
        says whether the assistant answers, so the caller needs no read of the session.
        With ``rewinds`` (the session's rewind count when the caller read it: a reply computed
        from that transcript), the session must not have been rewound since: SessionChanged
        otherwise, so a reply to turns a rewind removed is never stored after it.

        A refused reservation writes nothing (the counter does not move). Raises SessionNotFound
        (also for another customer's session, which is not told apart from a missing one) or
        SessionClosed.
        """
        require_id(session_id, "session_id")
        if customer_id is not None:
            require_id(customer_id, "customer_id")
        now = self.table.now()
        expr = Expr()
        update = Update(expr)
        update.set("updated_at", now)
        update.set(TTL_ATTRIBUTE, now + self.table.ttl_seconds)
        update.add("turn_count", 1)
        accepted = ", ".join(expr.v(str(s)) for s in sorted(TURN_ACCEPTING))
        condition = f"attribute_exists({expr.n(PARTITION_KEY)}) AND {expr.n('status')} IN ({accepted})"
        if customer_id is not None:
            condition += f" AND {expr.n('customer_id')} = {expr.v(customer_id)}"
        if rewinds is not None:
            same = f"{expr.n('rewinds')} = {expr.v(rewinds)}"
            condition += (
                f" AND (attribute_not_exists({expr.n('rewinds')}) OR {same})" if rewinds == 0 else f" AND {same}"
            )

        def refused(old: dict[str, Any]) -> Exception:
            if customer_id is not None and old.get("customer_id") != customer_id:
                return SessionNotFound(session_id)  # another customer's session is not told apart
            if rewinds is not None and int(old.get("rewinds", 0)) != rewinds:
                return SessionChanged(session_id)
            return SessionClosed(session_id, str(old.get("status")))

        item = self.table.update(
            keys.session_key(session_id),
            update,
            condition,
            missing=lambda: SessionNotFound(session_id),
            changed=refused,
        )
        return Session.from_item(item)

    def put_turn(
        self,
        session_id: str,
        turn_number: int,
        role: Role | str,
        content: str,
        *,
        stopped: str | None = None,
        usage: TokenUsage | None = None,
    ) -> Turn:
        """Store turn ``turn_number`` (a number :meth:`reserve_turn` handed out), content zlib-compressed.

        One conditional PutItem that never overwrites: Conflict when the number is taken by
        another turn. Finding this very turn there (same role and content) is success: only this
        writer holds the number, so it is its own write, applied before its answer was lost (a
        read timeout) and met again by the SDK's retry; telling the caller it failed would have
        the customer send a stored message twice.
        """
        require_id(session_id, "session_id")
        turn_role = checked_turn(role, content)
        now = self.table.now()
        turn = Turn(
            session_id=session_id,
            turn_number=turn_number,
            role=turn_role,
            content=content,
            created_at=now,
            ttl=now + self.table.ttl_seconds,
            stopped=stopped,
            input_tokens=None if usage is None else usage.input_tokens,
            output_tokens=None if usage is None else usage.output_tokens,
        )
        try:
            self.table.put_new(turn.to_item())
        except ConditionFailed as failed:
            if failed.old is not None and _is_same_turn(failed.old, turn):
                return Turn.from_item(failed.old)
            raise Conflict(f"turn {turn.turn_number} of session {session_id!r} exists already") from None
        return turn

    def put_in(self, tx: Transaction, turn: Turn) -> None:
        """Add the PutItem of ``turn`` to ``tx`` (action ``turn``): it fails when the number is taken."""
        tx.put_new("turn", turn.to_item())

    def turns_before(self, session_id: str, before: int, *, limit: int) -> list[Turn]:
        """The newest ``limit`` (1..100) turns numbered below ``before``, chronological: one Query (none below 2).

        Bounded by the number and not by "the newest", so a turn stored meanwhile (the one
        numbered ``before`` itself, written at the same time) never shows up twice.
        """
        require_id(session_id, "session_id")
        require_limit(limit, MAX_PAGE_SIZE)
        if isinstance(before, bool) or not isinstance(before, int) or before < 1:
            raise InvalidInput(f"before must be a turn number >= 1 (given {before!r})")
        if before == 1:
            return []
        expr = Expr()
        resp = self.table.client.query(
            TableName=self.table.table_name,
            KeyConditionExpression=(
                f"{expr.n(PARTITION_KEY)} = {expr.v(keys.session_pk(session_id))} AND "
                f"{expr.n(SORT_KEY)} BETWEEN {expr.v(keys.turn_sk(0))} AND {expr.v(keys.turn_sk(before - 1))}"
            ),
            ScanIndexForward=False,
            Limit=limit,
            **expr.params(),
        )
        return [Turn.from_item(unmarshal_item(item)) for item in reversed(resp.get("Items", []))]

    def claim_continuation(self, session_id: str, turn_number: int, *, lease_seconds: int) -> bool:
        """Mark reply ``turn_number`` as being continued, unless a continuation already holds it.

        One conditional UpdateItem (``SET continuing_at``): the turn must have stopped early, and no
        other continuation may have claimed it in the last ``lease_seconds`` (the longest a
        continuation can take), so two ``continue`` frames sent at once write one continuation, and
        one that failed frees the turn when its lease ends. False when the claim is held or the
        turn is gone; nothing is written then.
        """
        require_id(session_id, "session_id")
        now = self.table.now()
        expr = Expr()
        update = Update(expr)
        update.set("continuing_at", now)
        claimed = expr.n("continuing_at")
        condition = (
            f"attribute_exists({expr.n('stopped')}) AND "
            f"(attribute_not_exists({claimed}) OR {claimed} < {expr.v(now - lease_seconds)})"
        )
        return self.table.updated_if(keys.turn_key(session_id, turn_number), update, condition)

    def list_turns(self, session_id: str, *, limit: int = 20, cursor: str | None = None) -> Page[Turn]:
        """The newest ``limit`` (1..100) turns before the cursor, in chronological order.

        ``next_cursor`` leads to the next older page; it is None on the oldest page.
        """
        require_id(session_id, "session_id")
        require_limit(limit, MAX_PAGE_SIZE)
        pk = keys.session_pk(session_id)
        scope = f"turns:{session_id}"
        start = None
        if cursor is not None:
            start = cursors.decode(cursor, scope, {PARTITION_KEY: str, SORT_KEY: str})
            if start[PARTITION_KEY] != pk or not keys.is_turn_sk(str(start[SORT_KEY])):
                raise InvalidCursor("it was issued for another session")
        expr = Expr()
        items, next_cursor = self.table.query_page(
            {
                "KeyConditionExpression": (
                    f"{expr.n(PARTITION_KEY)} = {expr.v(pk)} AND "
                    f"begins_with({expr.n(SORT_KEY)}, {expr.v(keys.TURN_PREFIX)})"
                ),
                "ScanIndexForward": False,
                **expr.params(),
            },
            limit=limit,
            scope=scope,
            key_attributes=(PARTITION_KEY, SORT_KEY),
            start=start,
        )
        return Page([Turn.from_item(item) for item in reversed(items)], next_cursor)

    def turns_between(self, session_id: str, first: int, last: int) -> list[Turn]:
        """Turns ``first..last`` (inclusive), ascending: one exact SK-range Query (paginated)."""
        require_id(session_id, "session_id")
        for name, value in (("first", first), ("last", last)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInput(f"{name} must be a turn number >= 1 (given {value!r})")
        if first > last:
            raise InvalidInput(f"first must be <= last (given {first}, {last})")
        expr = Expr()
        return [
            Turn.from_item(item)
            for item in self.table.query(
                KeyConditionExpression=(
                    f"{expr.n(PARTITION_KEY)} = {expr.v(keys.session_pk(session_id))} AND "
                    f"{expr.n(SORT_KEY)} BETWEEN {expr.v(keys.turn_sk(first))} "
                    f"AND {expr.v(keys.turn_sk(last))}"
                ),
                ScanIndexForward=True,
                **expr.params(),
            )
        ]

    def put_summary(
        self,
        session_id: str,
        summary_number: int,
        *,
        summary_text: str,
        window_start: int,
        window_end: int,
        turn_count_at_summary: int,
    ) -> Summary:
        """Store summary ``summary_number`` once; returns what is stored.

        Idempotent: if that number exists already (a retried stream batch), nothing is written
        and the stored summary comes back (from the failed condition, without another read).
        """
        require_id(session_id, "session_id")
        if not isinstance(summary_number, int) or summary_number < 1:
            raise InvalidInput(f"summary_number must be >= 1 (given {summary_number!r})")
        if not 1 <= window_start <= window_end:
            raise InvalidInput(f"window must satisfy 1 <= start <= end (given {window_start}, {window_end})")
        now = self.table.now()
        summary = Summary(
            session_id=session_id,
            summary_number=summary_number,
            summary_text=summary_text,
            window_start=window_start,
            window_end=window_end,
            turn_count_at_summary=turn_count_at_summary,
            created_at=now,
            ttl=now + self.table.ttl_seconds,
        )
        try:
            self.table.put_new(summary.to_item())
        except ConditionFailed as failed:
            if failed.old is None:
                raise
            return Summary.from_item(failed.old)
        return summary

    def latest_summary(self, session_id: str) -> Summary | None:
        """The highest-numbered summary of the session, or None."""
        require_id(session_id, "session_id")
        item = self.table.latest(session_id, keys.SUMMARY_PREFIX)
        return Summary.from_item(item) if item else None


def _is_same_turn(item: dict[str, Any], turn: Turn) -> bool:
    """Whether a stored turn item is ``turn`` (its role and content), as a retried write finds it."""
    try:
        stored = Turn.from_item(item)
    except (KeyError, ValueError, TypeError):
        return False
    return stored.role == turn.role and stored.content == turn.content
