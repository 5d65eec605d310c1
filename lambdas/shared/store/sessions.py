"""Sessions: the META record, its status machine, the cleanup index, customer listings, the partition.

A session partition (``SESSION#<id>``) holds META plus its turns, summaries and handoffs; the
whole-partition operations (archive listing, invalidation, deletion) live here with META.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Final

from lambdas.shared import cursor as cursors
from lambdas.shared import keys
from lambdas.shared.errors import (
    Conflict,
    ConnectionSuperseded,
    InvalidCursor,
    InvalidInput,
    InvalidTransition,
    SessionClosed,
    SessionNotFound,
    UnexpectedStatus,
)
from lambdas.shared.records import (
    ALLOWED_SOURCES,
    AWAITING_CLEANUP,
    SESSION_SETTABLE_ATTRIBUTES,
    TURN_ACCEPTING,
    CleanupCandidate,
    Handoff,
    Session,
    SessionRecord,
    SessionStatus,
    StatusListing,
    Summary,
    Turn,
    record_from_item,
)
from lambdas.shared.schema import (
    CLEANUP,
    CUSTOMER_SESSIONS,
    PARTITION_KEY,
    SESSIONS_BY_STATUS,
    SORT_KEY,
    TTL_ATTRIBUTE,
)
from lambdas.shared.serialize import marshal_item, unmarshal_item
from lambdas.shared.store.expressions import Expr, Update
from lambdas.shared.store.table import (
    MAX_ITEMS_PAGE_SIZE,
    MAX_PAGE_SIZE,
    STATUS_TIMESTAMP,
    Aggregate,
    ConditionFailed,
    Page,
    Transaction,
    parse_enum,
    require_id,
    require_limit,
)


def _check_settable(attrs: Mapping[str, Any]) -> None:
    """InvalidInput unless every attribute is settable by a status change and has its type (None removes)."""
    unknown = set(attrs) - SESSION_SETTABLE_ATTRIBUTES
    if unknown:
        raise InvalidInput(
            f"update_status cannot set {sorted(unknown)}; settable: {sorted(SESSION_SETTABLE_ATTRIBUTES)}"
        )
    for name, value in attrs.items():
        kind = int if name.endswith("_at") else str
        if value is not None and (isinstance(value, bool) or not isinstance(value, kind)):
            raise InvalidInput(f"{name} must be {'epoch seconds' if kind is int else 'a string'}")


#: The session META attribute naming the session's current handoff.
CURRENT_HANDOFF: Final = "current_handoff_id"
#: The session META attribute a cleanup sets (epoch s) when it takes the session: no resume after it.
CLEANUP_CLAIMED: Final = "cleanup_claimed_at"


def _enter_status_index(update: Update, session_id: str, status: SessionStatus, now: int) -> None:
    """Move the session's StatusIndex row to ``status`` in the same write that changes the status.

    Every write of a session's status goes through this, so the index never lists a session
    under a status it has left (beyond the index's eventual consistency).
    """
    update.set(SESSIONS_BY_STATUS.partition_key, keys.status_pk(str(status)))
    update.set(SESSIONS_BY_STATUS.sort_key, keys.status_sort(now, session_id))


class Sessions(Aggregate):
    """Session META operations and whole-partition operations."""

    def create_session(
        self, customer_id: str, *, metadata: Mapping[str, Any] | None = None, email: str | None = None
    ) -> Session:
        """A new active session with a uuid4 id; one conditional PutItem that never overwrites.

        ``email``: the customer's verified address (from their token), where notices go while they
        are away from the chat.
        """
        require_id(customer_id, "customer_id")
        if metadata is not None and not isinstance(metadata, Mapping):
            raise InvalidInput("metadata must be an object")
        now = self.table.now()
        session = Session(
            session_id=str(uuid.uuid4()),
            customer_id=customer_id,
            status=SessionStatus.ACTIVE,
            turn_count=0,
            created_at=now,
            updated_at=now,
            ttl=now + self.table.ttl_seconds,
            metadata=dict(metadata or {}),
            customer_email=email or None,
        )
        try:
            self.table.put_new(session.to_item())
        except ConditionFailed:
            raise Conflict(f"session {session.session_id!r} exists already") from None
        return session

    def get_session(self, session_id: str, *, consistent: bool = True) -> Session | None:
        """The session, or None. ``consistent=False`` halves the read cost, may lag a write."""
        require_id(session_id, "session_id")
        item = self.table.get(keys.session_key(session_id), consistent=consistent)
        return Session.from_item(item) if item else None

    def list_customer_sessions(self, customer_id: str, *, limit: int = 10, cursor: str | None = None) -> Page[Session]:
        """A customer's sessions (every status), most recently updated first, via GSI1.

        The index is eventually consistent and ordered by ``updated_at``, which every turn
        bumps: a session that gets a turn while the caller pages may move to the front.
        """
        require_id(customer_id, "customer_id")
        require_limit(limit, MAX_PAGE_SIZE)
        scope = f"customer:{customer_id}"
        index = CUSTOMER_SESSIONS
        key_attributes = (PARTITION_KEY, SORT_KEY, index.partition_key, index.sort_key)
        start = None
        if cursor is not None:
            start = cursors.decode(
                cursor,
                scope,
                {PARTITION_KEY: str, SORT_KEY: str, index.partition_key: str, index.sort_key: int},
            )
            if (
                start[index.partition_key] != customer_id
                or start[SORT_KEY] != keys.META_SK
                or not str(start[PARTITION_KEY]).startswith(keys.SESSION_PREFIX)
            ):
                raise InvalidCursor("it was issued for another customer")
        expr = Expr()
        items, next_cursor = self.table.query_page(
            {
                "IndexName": index.name,
                "KeyConditionExpression": f"{expr.n(index.partition_key)} = {expr.v(customer_id)}",
                "ScanIndexForward": False,
                **expr.params(),
            },
            limit=limit,
            scope=scope,
            key_attributes=key_attributes,
            start=start,
        )
        return Page([Session.from_item(item) for item in items], next_cursor)

    def list_by_status(
        self, status: SessionStatus | str, *, limit: int = 25, cursor: str | None = None
    ) -> Page[StatusListing]:
        """Sessions in ``status``, newest into it first, via the StatusIndex (one Query per page).

        The index is eventually consistent: a session that just changed status may still be
        listed under its old one for a moment. A page holds what the index projects, no more.
        """
        wanted = parse_enum(SessionStatus, status, "status")
        require_limit(limit, MAX_PAGE_SIZE)
        index = SESSIONS_BY_STATUS
        partition = keys.status_pk(str(wanted))
        scope = f"status:{wanted}"
        start = None
        if cursor is not None:
            start = cursors.decode(
                cursor,
                scope,
                {PARTITION_KEY: str, SORT_KEY: str, index.partition_key: str, index.sort_key: str},
            )
            sid = str(start[PARTITION_KEY]).removeprefix(keys.SESSION_PREFIX)
            if (
                start[index.partition_key] != partition
                or start[SORT_KEY] != keys.META_SK
                or start[PARTITION_KEY] != keys.session_pk(sid)
                or not keys.is_session_id(sid)
                or not str(start[index.sort_key]).endswith(f"#{sid}")
            ):
                raise InvalidCursor("it was issued for another status")
        expr = Expr()
        items, next_cursor = self.table.query_page(
            {
                "IndexName": index.name,
                "KeyConditionExpression": f"{expr.n(index.partition_key)} = {expr.v(partition)}",
                "ScanIndexForward": False,
                **expr.params(),
            },
            limit=limit,
            scope=scope,
            key_attributes=(PARTITION_KEY, SORT_KEY, index.partition_key, index.sort_key),
            start=start,
        )
        return Page([StatusListing.from_item(item) for item in items], next_cursor)

    def count_by_status(self, status: SessionStatus | str) -> int:
        """How many sessions are in ``status`` now: Select COUNT over its StatusIndex partition (no items read back)."""
        index, expr = SESSIONS_BY_STATUS, Expr()
        partition = keys.status_pk(str(parse_enum(SessionStatus, status, "status")))
        condition = f"{expr.n(index.partition_key)} = {expr.v(partition)}"
        return self.table.count({"IndexName": index.name, "KeyConditionExpression": condition, **expr.params()})

    def update_status(
        self,
        session_id: str,
        new_status: SessionStatus | str,
        *,
        expected: SessionStatus | str | None = None,
        if_connection: str | None = None,
        **attrs: Any,
    ) -> Session:
        """Move a session along the status machine in one conditional UpdateItem.

        The condition is "the current status is an allowed source of ``new_status``" (and is
        ``expected`` when given). ``attrs`` sets the session attributes in
        ``SESSION_SETTABLE_ATTRIBUTES`` (``None`` removes one). Entering disconnected, deleted or
        archived stamps ``<status>_at`` with now unless given. Entering disconnected or deleted
        puts the session into the CleanupIndex (``cleanup_at`` = that stamp); any other target
        removes it from the index.

        ``if_connection`` adds "the session's ``connection_id`` is this one" to the condition (a
        late ``$disconnect`` of a connection the customer has already replaced by resuming the
        session elsewhere must not close it).

        Raises SessionNotFound, InvalidTransition(current, new) or, when only ``expected`` did
        not hold, UnexpectedStatus (a subclass); ConnectionSuperseded when only ``if_connection``
        did not hold.
        """
        require_id(session_id, "session_id")
        new = parse_enum(SessionStatus, new_status, "status")
        want = None if expected is None else parse_enum(SessionStatus, expected, "expected")
        _check_settable(attrs)
        sources = ALLOWED_SOURCES[new]
        if want is not None and want not in sources:
            raise InvalidTransition(session_id, want, new)

        now = self.table.now()
        values = dict(attrs)
        stamp = STATUS_TIMESTAMP.get(new)
        if stamp is not None and values.get(stamp) is None:
            values[stamp] = now
        expr = Expr()
        update = Update(expr)
        update.set("status", str(new))
        update.set("updated_at", now)
        _enter_status_index(update, session_id, new, now)
        for name, value in sorted(values.items()):
            update.set(name, value)
        if new in AWAITING_CLEANUP:
            update.set(CLEANUP.partition_key, keys.cleanup_shard(session_id, self.table.cleanup_shards))
            update.set(CLEANUP.sort_key, values[STATUS_TIMESTAMP[new]])
        else:
            update.remove(CLEANUP.partition_key)
            update.remove(CLEANUP.sort_key)
        status = expr.n("status")
        allowed = ", ".join(expr.v(str(s)) for s in sorted(sources))
        condition = f"attribute_exists({expr.n(PARTITION_KEY)}) AND {status} IN ({allowed})"
        if want is not None:
            condition += f" AND {status} = {expr.v(str(want))}"
        if if_connection is not None:
            require_id(if_connection, "if_connection")
            condition += f" AND {expr.n('connection_id')} = {expr.v(if_connection)}"

        def refused(old: dict[str, Any]) -> Exception:
            current = str(old.get("status"))
            if current not in sources:
                return InvalidTransition(session_id, current, new)
            if want is not None and current != want:
                return UnexpectedStatus(session_id, current, new, want)
            if if_connection is not None and old.get("connection_id") != if_connection:
                return ConnectionSuperseded(session_id, if_connection)
            return Conflict(f"session {session_id!r} changed concurrently; retry")

        item = self.table.update(
            keys.session_key(session_id),
            update,
            condition,
            missing=lambda: SessionNotFound(session_id),
            changed=refused,
        )
        return Session.from_item(item)

    def set_connection(self, session_id: str, connection_id: str) -> Session:
        """Record the session's live WebSocket connection (replacing any previous one)."""
        require_id(session_id, "session_id")
        require_id(connection_id, "connection_id")
        expr = Expr()
        update = Update(expr)
        update.set("connection_id", connection_id)
        update.set("updated_at", self.table.now())
        accepted = ", ".join(expr.v(str(s)) for s in sorted(TURN_ACCEPTING))
        condition = f"attribute_exists({expr.n(PARTITION_KEY)}) AND {expr.n('status')} IN ({accepted})"
        item = self.table.update(
            keys.session_key(session_id),
            update,
            condition,
            missing=lambda: SessionNotFound(session_id),
            changed=lambda old: SessionClosed(session_id, str(old.get("status"))),
        )
        return Session.from_item(item)

    def resume_session(self, session_id: str, customer_id: str, connection_id: str, *, since: int) -> Session:
        """A disconnected session taken up again: ``disconnected -> active`` on ``connection_id``, one write.

        The condition: the session is the customer's, ``disconnected`` at or after ``since`` (epoch
        s: the grace period's start) and not claimed by a cleanup (:meth:`claim_for_cleanup`); the
        write leaves the CleanupIndex, so no sweep finds the session again. Raises
        SessionNotFound, or SessionClosed (with the current status) when any part did not hold.
        """
        for value, name in ((session_id, "session_id"), (customer_id, "customer_id"), (connection_id, "connection_id")):
            require_id(value, name)
        now, expr = self.table.now(), Expr()
        update = Update(expr)
        update.set("status", str(SessionStatus.ACTIVE))
        update.set("updated_at", now)
        update.set("connection_id", connection_id)
        _enter_status_index(update, session_id, SessionStatus.ACTIVE, now)
        update.remove("disconnected_at")
        update.remove(CLEANUP.partition_key)
        update.remove(CLEANUP.sort_key)
        condition = (
            f"attribute_exists({expr.n(PARTITION_KEY)}) AND "
            f"{expr.n('customer_id')} = {expr.v(customer_id)} AND "
            f"{expr.n('status')} = {expr.v(str(SessionStatus.DISCONNECTED))} AND "
            f"{expr.n('disconnected_at')} >= {expr.v(since)} AND "
            f"attribute_not_exists({expr.n(CLEANUP_CLAIMED)})"
        )

        def refused(old: dict[str, Any]) -> Exception:
            status = str(old.get("status"))
            return SessionClosed(
                session_id, "past its grace period" if status == SessionStatus.DISCONNECTED else status
            )

        key = keys.session_key(session_id)
        item = self.table.update(key, update, condition, missing=lambda: SessionNotFound(session_id), changed=refused)
        return Session.from_item(item)

    def claim_for_cleanup(self, session_id: str, *, eligible_before: int) -> bool:
        """Mark the session as taken by a cleanup, if it still waits for one; False when it does not.

        One conditional write: the session is ``deleted``, or ``disconnected`` before
        ``eligible_before`` (epoch s, exclusive). A session the customer resumed meanwhile is
        ``active`` again and is refused; a claimed one can no longer be resumed
        (:meth:`resume_session`), so the cleanup never deletes the turns of a live session.
        """
        require_id(session_id, "session_id")
        expr = Expr()
        update = Update(expr)
        update.set(CLEANUP_CLAIMED, self.table.now())
        status = expr.n("status")
        condition = (
            f"attribute_exists({expr.n(PARTITION_KEY)}) AND ({status} = {expr.v(str(SessionStatus.DELETED))} OR "
            f"({status} = {expr.v(str(SessionStatus.DISCONNECTED))} AND "
            f"{expr.n('disconnected_at')} < {expr.v(eligible_before)}))"
        )
        return self.table.updated_if(keys.session_key(session_id), update, condition)

    def clear_connection(self, session_id: str, connection_id: str) -> bool:
        """Forget the session's connection if it is still ``connection_id``; True if it was.

        A reconnect may already have replaced it, in which case nothing changes.
        """
        require_id(session_id, "session_id")
        require_id(connection_id, "connection_id")
        expr = Expr()
        update = Update(expr)
        update.remove("connection_id")
        condition = f"{expr.n('connection_id')} = {expr.v(connection_id)}"
        return self.table.updated_if(keys.session_key(session_id), update, condition)

    def enter_handoff(
        self, tx: Transaction, session_id: str, *, handoff_id: str, turn_count: int, now: int, ttl: int
    ) -> None:
        """Add META ``active -> handoff`` to ``tx`` (action ``session``), the counter ``turn_count -> +1``.

        Conditioned on the session being active with the counter just read, so a turn stored
        meanwhile cancels the transaction; ``handoff_id`` becomes the current handoff.
        """
        expr = Expr()
        update = Update(expr)
        update.set("status", str(SessionStatus.HANDOFF))
        update.set("updated_at", now)
        _enter_status_index(update, session_id, SessionStatus.HANDOFF, now)
        update.set("turn_count", turn_count + 1)
        update.set(TTL_ATTRIBUTE, ttl)
        update.set(CURRENT_HANDOFF, handoff_id)
        condition = (
            f"attribute_exists({expr.n(PARTITION_KEY)}) AND "
            f"{expr.n('status')} = {expr.v(str(SessionStatus.ACTIVE))} AND "
            f"{expr.n('turn_count')} = {expr.v(turn_count)}"
        )
        tx.update("session", keys.session_key(session_id), update, condition=condition)

    def leave_handoff(
        self,
        tx: Transaction,
        session_id: str,
        handoff_id: str,
        new_status: SessionStatus,
        *,
        now: int,
        if_connection: str | None,
        from_status: SessionStatus = SessionStatus.HANDOFF,
    ) -> None:
        """Add META ``from_status -> active|disconnected|deleted`` to ``tx`` (action ``session``), like update_status.

        Conditioned on the session still being in ``from_status`` with ``handoff_id`` current
        (and, with ``if_connection``, on its connection, which the write then forgets).
        """
        expr = Expr()
        update = Update(expr)
        update.set("status", str(new_status))
        update.set("updated_at", now)
        _enter_status_index(update, session_id, new_status, now)
        if new_status in AWAITING_CLEANUP:
            update.set(STATUS_TIMESTAMP[new_status], now)
            update.set(CLEANUP.partition_key, keys.cleanup_shard(session_id, self.table.cleanup_shards))
            update.set(CLEANUP.sort_key, now)
            if if_connection is not None:
                update.remove("connection_id")
        condition = (
            f"attribute_exists({expr.n(PARTITION_KEY)}) AND "
            f"{expr.n('status')} = {expr.v(str(from_status))} AND "
            f"{expr.n(CURRENT_HANDOFF)} = {expr.v(handoff_id)}"
        )
        if if_connection is not None:
            condition += f" AND {expr.n('connection_id')} = {expr.v(if_connection)}"
        tx.update("session", keys.session_key(session_id), update, condition=condition)

    def sessions_awaiting_cleanup(
        self, older_than: int, *, limit: int = 100, cursor: str | None = None
    ) -> Page[CleanupCandidate]:
        """Sessions disconnected or deleted before ``older_than`` (epoch s, exclusive).

        One Query per CleanupIndex shard, oldest first within a shard, shards in order; never a
        Scan. The index is sparse, so it holds nothing but sessions waiting for cleanup.
        """
        if isinstance(older_than, bool) or not isinstance(older_than, int) or older_than < 0:
            raise InvalidInput(f"older_than must be epoch seconds (given {older_than!r})")
        require_limit(limit, MAX_ITEMS_PAGE_SIZE)
        index = CLEANUP
        scope = f"cleanup:{older_than}:{self.table.cleanup_shards}"
        key_shape = {
            PARTITION_KEY: str,
            SORT_KEY: str,
            index.partition_key: str,
            index.sort_key: int,
        }
        shard, start = 0, None
        if cursor is not None:
            position = cursors.decode(cursor, scope, {"shard": int}, {"shard": int, **key_shape})
            shard = int(position.pop("shard"))
            if shard >= self.table.cleanup_shards:
                raise InvalidCursor()
            if position:
                if (
                    position[index.partition_key] != keys.cleanup_shards(self.table.cleanup_shards)[shard]
                    or int(position[index.sort_key]) >= older_than
                    or position[SORT_KEY] != keys.META_SK
                    or not str(position[PARTITION_KEY]).startswith(keys.SESSION_PREFIX)
                ):
                    raise InvalidCursor()
                start = position

        found: list[CleanupCandidate] = []
        shard_names = keys.cleanup_shards(self.table.cleanup_shards)
        while shard < self.table.cleanup_shards and len(found) < limit:
            expr = Expr()
            request: dict[str, Any] = {
                "TableName": self.table.table_name,
                "IndexName": index.name,
                "KeyConditionExpression": (
                    f"{expr.n(index.partition_key)} = {expr.v(shard_names[shard])} AND "
                    f"{expr.n(index.sort_key)} < {expr.v(older_than)}"
                ),
                "Limit": limit - len(found),
                **expr.params(),
            }
            if start is not None:
                request["ExclusiveStartKey"] = marshal_item(start)
            resp = self.table.client.query(**request)
            found.extend(CleanupCandidate.from_item(unmarshal_item(item)) for item in resp.get("Items", []))
            last = resp.get("LastEvaluatedKey")
            if last:
                start = unmarshal_item(last)
            else:
                shard, start = shard + 1, None
        if shard >= self.table.cleanup_shards:
            return Page(found, None)
        resume: dict[str, Any] = {"shard": shard, **(start or {})}
        return Page(found, cursors.encode(scope, resume))

    def list_session_items(
        self, session_id: str, *, limit: int = 500, cursor: str | None = None
    ) -> Page[SessionRecord]:
        """Every record of a session partition (META, turns, summaries, handoffs), by SK.

        For the archive: page through until ``next_cursor`` is None.
        """
        require_id(session_id, "session_id")
        require_limit(limit, MAX_ITEMS_PAGE_SIZE)
        pk = keys.session_pk(session_id)
        scope = f"items:{session_id}"
        start = None
        if cursor is not None:
            start = cursors.decode(cursor, scope, {PARTITION_KEY: str, SORT_KEY: str})
            if start[PARTITION_KEY] != pk:
                raise InvalidCursor("it was issued for another session")
        expr = Expr()
        items, next_cursor = self.table.query_page(
            {
                "KeyConditionExpression": f"{expr.n(PARTITION_KEY)} = {expr.v(pk)}",
                "ScanIndexForward": True,
                **expr.params(),
            },
            limit=limit,
            scope=scope,
            key_attributes=(PARTITION_KEY, SORT_KEY),
            start=start,
        )
        records: list[SessionRecord] = []
        for item in items:
            record = record_from_item(item)
            if isinstance(record, (Session, Turn, Summary, Handoff)):
                records.append(record)
        return Page(records, next_cursor)

    def invalidate(self, session_id: str, sk_prefixes: Sequence[str]) -> int:
        """Delete a session's items under the given SK prefixes; returns how many.

        Each prefix must start with TURN#, SUMMARY# or HANDOFF# (META is never touched).
        Query by prefix (keys only) + BatchWriteItem in chunks of 25 with bounded retries.
        """
        require_id(session_id, "session_id")
        if isinstance(sk_prefixes, str) or not sk_prefixes:
            raise InvalidInput("sk_prefixes must be a non-empty list of prefixes")
        for prefix in sk_prefixes:
            if not isinstance(prefix, str) or not prefix.startswith(keys.SESSION_CHILD_PREFIXES):
                raise InvalidInput(f"sk prefix {prefix!r} must start with one of {keys.SESSION_CHILD_PREFIXES}")
        pk = keys.session_pk(session_id)
        targets: dict[str, keys.Key] = {}
        for prefix in sk_prefixes:
            for k in self.table.partition_keys(pk, prefix):
                targets[k[SORT_KEY]] = k
        return self.table.batch_delete(list(targets.values()))

    def delete_session_children(self, session_id: str, sort_keys: Sequence[str]) -> int:
        """Delete exactly these child items of a session (never META); returns how many.

        For the cleanup, which deletes only what an archive it read back holds.
        """
        require_id(session_id, "session_id")
        for sk in sort_keys:
            if not isinstance(sk, str) or not sk.startswith(keys.SESSION_CHILD_PREFIXES):
                raise InvalidInput(f"sort key {sk!r} must start with one of {keys.SESSION_CHILD_PREFIXES}")
        pk = keys.session_pk(session_id)
        return self.table.batch_delete([keys.key(pk, sk) for sk in dict.fromkeys(sort_keys)])

    def delete_session_items(self, session_id: str, *, keep_meta: bool = True) -> int:
        """Delete every item of a session partition (META too unless ``keep_meta``).

        Keys-only Query pages + ceil(N/25) BatchWriteItem calls; META goes last. Safe to run
        again after BatchWriteIncomplete. Returns how many items were deleted.
        """
        require_id(session_id, "session_id")
        all_keys = self.table.partition_keys(keys.session_pk(session_id))
        children = [k for k in all_keys if k[SORT_KEY] != keys.META_SK]
        meta = [k for k in all_keys if k[SORT_KEY] == keys.META_SK]
        return self.table.batch_delete(children if keep_meta else children + meta)
