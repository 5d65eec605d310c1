"""Handoffs: the ``HANDOFF#`` records of a session, the handoff transaction and callback tokens.

* :meth:`Handoffs.begin_handoff`: ONE TransactWriteItems: session META ``active -> handoff``, the
  ``HANDOFF#`` record (status assigned), a system TURN. The turn number comes from the atomic
  ``turn_count`` counter: the transaction sets ``turn_count = n + 1`` conditioned on it still
  being ``n`` (read just before), so the number is unique and the counter exact; when a
  concurrent ``add_turn`` moves the counter first, the transaction is cancelled and re-read
  (at most :data:`MAX_BEGIN_READS` times).
* Inbox items (:mod:`.inbox`): every transaction that moves a ``HANDOFF#`` record to another
  status or agent also deletes the inbox items the new state makes untrue (assignment: the
  waiting and managers items; re-queueing: the agent's item; any other status: see
  :meth:`Handoffs.update_handoff`).
* The current handoff: the session's META carries ``current_handoff_id``, written in the same
  transaction that creates or assigns a handoff, so "current" is a recorded fact and never depends
  on how a handoff id (an execution name, possibly the client's ``Idempotency-Key``) sorts.
* Callback tokens: a waiting Step Functions task's token is stored on the ``HANDOFF#`` record
  (``callback_token`` + ``waiting_for``) and taken by exactly one caller (conditional REMOVE), so
  two agents accepting the same handoff cannot both complete it.
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass
from typing import Any, Final

from botocore.exceptions import ClientError

from lambdas.shared import keys
from lambdas.shared.errors import Conflict, HandoffNotFound, InvalidInput, SessionNotFound
from lambdas.shared.records import Handoff, HandoffStatus, Role, SessionStatus, Turn
from lambdas.shared.schema import PARTITION_KEY, TTL_ATTRIBUTE
from lambdas.shared.serialize import marshal_item
from lambdas.shared.store.inbox import delete_actions, untrue_after
from lambdas.shared.store.sessions import Sessions
from lambdas.shared.store.table import (
    CONDITION_FAILED,
    TRANSACTION_CANCELED,
    Expr,
    Update,
    code_of,
    old_item,
    parse_enum,
    require_id,
)

WAITING_FOR_AGENT: Final = "agent"
WAITING_FOR_REPLY: Final = "reply"
_WAITING: Final = frozenset({WAITING_FOR_AGENT, WAITING_FOR_REPLY})
#: Statuses from which a handoff record may (again) become ``assigned``.
_ASSIGNABLE: Final = (HandoffStatus.REQUESTED, HandoffStatus.QUEUED, HandoffStatus.ESCALATED)
#: The session META attribute naming the session's current handoff.
CURRENT_HANDOFF: Final = "current_handoff_id"
#: The handoff attribute naming the agent a re-queued handoff was taken from.
PREVIOUS_AGENT: Final = "previous_agent_id"
#: How often begin_handoff re-reads a session whose turn counter moved under it (optimistic locking).
MAX_BEGIN_READS: Final = 5
#: How often a status change re-reads a handoff whose agent changed between the read and the write.
MAX_MOVE_READS: Final = 3


class SessionNotActive(Conflict):
    """The session is missing or not ``active``: no handoff can start."""

    def __init__(self, session_id: str, status: str) -> None:
        super().__init__(f"session {session_id!r} is {status}, not active")
        self.session_id = session_id
        self.status = status


class HandoffConflict(Conflict):
    """The handoff record is in a state that cannot become ``assigned`` (failed, completed, ...)."""


@dataclass(frozen=True)
class Begun:
    handoff: Handoff
    turn_number: int | None  # None when a retry found the transaction already applied


class Handoffs(Sessions):
    """Handoff operations (they read and move the session's META, hence on top of Sessions)."""

    def put_handoff(
        self,
        session_id: str,
        *,
        reason: str,
        priority: str = "normal",
        status: HandoffStatus | str = HandoffStatus.REQUESTED,
        agent_id: str | None = None,
        execution_arn: str | None = None,
        handoff_id: str | None = None,
    ) -> Handoff:
        """A new handoff record that becomes the session's current one (never overwrites).

        One transaction: the ``HANDOFF#`` record (Conflict if ``handoff_id`` is taken) and the
        session META's ``current_handoff_id`` (SessionNotFound without a session). ``handoff_id``
        defaults to ``<13-digit epoch ms>-<12 hex>``; give one (e.g. the execution name) to make
        retries idempotent-by-conflict.
        """
        require_id(session_id, "session_id")
        require_id(reason, "reason")
        now_seconds = self._clock()
        now = int(now_seconds)
        handoff = Handoff(
            session_id=session_id,
            handoff_id=require_id(
                handoff_id or f"{int(now_seconds * 1000):013d}-{uuid.uuid4().hex[:12]}",
                "handoff_id",
            ),
            reason=reason,
            priority=priority,
            status=parse_enum(HandoffStatus, status, "handoff status"),
            created_at=now,
            updated_at=now,
            ttl=now + self.ttl_seconds,
            agent_id=agent_id,
            execution_arn=execution_arn,
        )
        put_expr = Expr()
        actions = [
            {
                "Put": {
                    "TableName": self.table_name,
                    "Item": marshal_item(handoff.to_item()),
                    "ConditionExpression": f"attribute_not_exists({put_expr.n(PARTITION_KEY)})",
                    **put_expr.params(),
                }
            },
            self._make_current_action(session_id, handoff.handoff_id),
        ]
        try:
            self.client.transact_write_items(TransactItems=actions)
        except ClientError as err:
            if code_of(err) != TRANSACTION_CANCELED:
                raise
            reasons = err.response.get("CancellationReasons") or []
            if reasons and reasons[0].get("Code") == "ConditionalCheckFailed":
                raise Conflict(f"handoff {handoff.handoff_id!r} exists already") from None
            raise SessionNotFound(session_id) from None
        return handoff

    def _make_current_action(self, session_id: str, handoff_id: str) -> dict[str, Any]:
        """The transaction item that points the (existing) session META at ``handoff_id``."""
        expr = Expr()
        update = Update(expr)
        update.set(CURRENT_HANDOFF, handoff_id)
        return {
            "Update": {
                "TableName": self.table_name,
                "Key": marshal_item(keys.session_key(session_id)),
                "UpdateExpression": update.expression(),
                "ConditionExpression": f"attribute_exists({expr.n(PARTITION_KEY)})",
                **expr.params(),
            }
        }

    def get_handoff(self, session_id: str, handoff_id: str) -> Handoff | None:
        require_id(session_id, "session_id")
        require_id(handoff_id, "handoff_id")
        item = self._get(keys.handoff_key(session_id, handoff_id))
        return Handoff.from_item(item) if item else None

    def current_handoff(self, session_id: str) -> Handoff | None:
        """The session's current handoff (the one its META names), or None.

        The newest handoff created or assigned, whatever its id; it stays current after it ends,
        so its status tells whether anyone still serves the session.
        """
        require_id(session_id, "session_id")
        meta = self._get(keys.session_key(session_id))
        handoff_id = (meta or {}).get(CURRENT_HANDOFF)
        return self.get_handoff(session_id, str(handoff_id)) if handoff_id else None

    def served_before(self, session_id: str, agent_id: str) -> bool:
        """True when ``agent_id`` was the agent of the session's current handoff and no longer serves it.

        Lets the API tell an agent whose access ended (403) from a stranger (404).
        """
        meta = self._get(keys.session_key(session_id))
        handoff_id = (meta or {}).get(CURRENT_HANDOFF)
        item = self._get(keys.handoff_key(session_id, str(handoff_id))) if handoff_id else None
        if not item:
            return False
        if item.get("agent_id") == agent_id:
            return item.get("status") != str(HandoffStatus.ASSIGNED)
        return item.get(PREVIOUS_AGENT) == agent_id

    def update_handoff(
        self,
        session_id: str,
        handoff_id: str,
        *,
        status: HandoffStatus | str | None = None,
        agent_id: str | None = None,
        execution_arn: str | None = None,
        expected_status: HandoffStatus | str | None = None,
    ) -> Handoff:
        """Set the given fields of a handoff (None leaves a field alone).

        With ``expected_status`` the write only happens from that status (Conflict otherwise).
        A new status or agent is one transaction with the deletes of the inbox items it makes
        untrue (:func:`lambdas.shared.store.inbox.untrue_after`), conditioned on the status and
        agent just read (re-read up to :data:`MAX_MOVE_READS` times); ``execution_arn`` alone
        is one UpdateItem.
        """
        require_id(session_id, "session_id")
        require_id(handoff_id, "handoff_id")
        changes = {"status": status, "agent_id": agent_id, "execution_arn": execution_arn}
        if all(value is None for value in changes.values()):
            raise InvalidInput("update_handoff needs status, agent_id or execution_arn")
        if status is not None:
            changes["status"] = str(parse_enum(HandoffStatus, status, "handoff status"))
        want = None
        if expected_status is not None:
            want = str(parse_enum(HandoffStatus, expected_status, "expected_status"))
        if status is None and agent_id is None:
            return self._annotate_handoff(session_id, handoff_id, changes, want)
        for _ in range(MAX_MOVE_READS):
            stored = self._get(keys.handoff_key(session_id, handoff_id))
            if stored is None:
                raise HandoffNotFound(session_id, handoff_id)
            if want is not None and stored.get("status") != want:
                raise Conflict(f"handoff {handoff_id!r} is {stored.get('status')!r}, not {want!r}")
            now = self._now()
            expr = Expr()
            update = Update(expr)
            for name, value in changes.items():
                if value is not None:
                    update.set(name, value)
            update.set("updated_at", now)
            previous = stored.get("agent_id")
            new_status = str(changes["status"] or stored.get("status"))
            untrue = untrue_after(previous, new_status, agent_id or previous)
            actions = [
                self._moved_update(session_id, handoff_id, update, str(stored.get("status")), previous),
                *delete_actions(self.table_name, handoff_id, untrue),
            ]
            try:
                self.client.transact_write_items(TransactItems=actions)
            except ClientError as err:
                if code_of(err) != TRANSACTION_CANCELED:
                    raise
                continue  # the record moved between the read and the write: read again
            written = {name: value for name, value in changes.items() if value is not None}
            return Handoff.from_item({**stored, **written, "updated_at": now})
        raise Conflict(f"handoff {handoff_id!r} kept changing; retry")

    def _annotate_handoff(self, session_id: str, handoff_id: str, changes: dict[str, Any], want: str | None) -> Handoff:
        """One UpdateItem of fields that move the handoff between no inboxes (``execution_arn``)."""
        expr = Expr()
        update = Update(expr)
        for name, value in changes.items():
            if value is not None:
                update.set(name, value)
        update.set("updated_at", self._now())
        condition = f"attribute_exists({expr.n(PARTITION_KEY)})"
        if want is not None:
            condition += f" AND {expr.n('status')} = {expr.v(want)}"
        try:
            item = self._update(keys.handoff_key(session_id, handoff_id), update, condition)
        except ClientError as err:
            if code_of(err) != CONDITION_FAILED:
                raise
            old = old_item(err)
            if old is None:
                raise HandoffNotFound(session_id, handoff_id) from None
            raise Conflict(f"handoff {handoff_id!r} is {old.get('status')!r}, not {want!r}") from None
        return Handoff.from_item(item)

    def _moved_update(
        self, session_id: str, handoff_id: str, update: Update, status: str, agent_id: Any
    ) -> dict[str, Any]:
        """The transaction item of ``update``, conditioned on the status and agent just read."""
        expr = update.expr
        agent = (
            f"{expr.n('agent_id')} = {expr.v(str(agent_id))}"
            if agent_id
            else f"attribute_not_exists({expr.n('agent_id')})"
        )
        condition = f"attribute_exists({expr.n(PARTITION_KEY)}) AND {expr.n('status')} = {expr.v(status)} AND {agent}"
        return {
            "Update": {
                "TableName": self.table_name,
                "Key": marshal_item(keys.handoff_key(session_id, handoff_id)),
                "UpdateExpression": update.expression(),
                "ConditionExpression": condition,
                **expr.params(),
            }
        }

    def begin_handoff(
        self,
        session_id: str,
        *,
        handoff_id: str,
        agent_id: str,
        reason: str,
        priority: str,
        execution_arn: str | None,
        system_text: str,
    ) -> Begun:
        """Hand the session to ``agent_id`` in one transaction (see the module docstring).

        Raises SessionNotActive (missing or not active), HandoffConflict, or Conflict when the
        turn counter kept moving for MAX_BEGIN_READS reads. A retry after success returns the
        stored handoff (``turn_number`` None) without writing again.
        """
        for _ in range(MAX_BEGIN_READS):
            session = self.get_session(session_id)
            if session is None:
                raise SessionNotActive(session_id, "missing")
            stored = self._get(keys.handoff_key(session_id, handoff_id))
            existing = Handoff.from_item(stored) if stored else None
            if (
                existing is not None
                and existing.status == HandoffStatus.ASSIGNED
                and existing.agent_id == agent_id
                and session.status == SessionStatus.HANDOFF
            ):
                return Begun(existing, None)
            if session.status != SessionStatus.ACTIVE:
                raise SessionNotActive(session_id, str(session.status))
            if existing is not None and existing.status not in _ASSIGNABLE:
                raise HandoffConflict(f"handoff {handoff_id!r} is {existing.status}; it cannot be assigned")
            now = self._now()
            ttl = now + self.ttl_seconds
            number = session.turn_count + 1
            handoff = Handoff(
                session_id=session_id,
                handoff_id=handoff_id,
                reason=reason,
                priority=priority,
                status=HandoffStatus.ASSIGNED,
                created_at=existing.created_at if existing else now,
                updated_at=now,
                ttl=ttl,
                agent_id=agent_id,
                execution_arn=execution_arn,
            )
            turn = Turn(session_id, number, Role.SYSTEM, system_text, now, ttl)
            carried = {PREVIOUS_AGENT: stored[PREVIOUS_AGENT]} if stored and stored.get(PREVIOUS_AGENT) else {}
            actions = self._begin_actions(session.turn_count, handoff, turn, carried)
            try:
                self.client.transact_write_items(TransactItems=actions)
            except ClientError as err:
                if code_of(err) != TRANSACTION_CANCELED:
                    raise
                reasons = err.response.get("CancellationReasons") or []
                if len(reasons) > 1 and reasons[1].get("Code") == "ConditionalCheckFailed":
                    raise HandoffConflict(f"handoff {handoff_id!r} changed concurrently") from None
                continue  # the session moved or the counter moved: read again
            return Begun(handoff, number)
        raise Conflict(f"session {session_id!r} kept changing; handoff {handoff_id!r} not started, retry")

    def _begin_actions(
        self, turn_count: int, handoff: Handoff, turn: Turn, carried: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """META active -> handoff (counter n -> n+1), the assigned HANDOFF# (keeping ``carried``), the system TURN."""
        expr = Expr()
        update = Update(expr)
        update.set("status", str(SessionStatus.HANDOFF))
        update.set("updated_at", handoff.updated_at)
        update.set("turn_count", turn.turn_number)
        update.set(TTL_ATTRIBUTE, handoff.ttl)
        update.set(CURRENT_HANDOFF, handoff.handoff_id)
        meta_condition = (
            f"attribute_exists({expr.n(PARTITION_KEY)}) AND "
            f"{expr.n('status')} = {expr.v(str(SessionStatus.ACTIVE))} AND "
            f"{expr.n('turn_count')} = {expr.v(turn_count)}"
        )
        put_expr = Expr()
        allowed = ", ".join(put_expr.v(str(s)) for s in _ASSIGNABLE)
        put_condition = f"attribute_not_exists({put_expr.n(PARTITION_KEY)}) OR {put_expr.n('status')} IN ({allowed})"
        turn_expr = Expr()
        turn_condition = f"attribute_not_exists({turn_expr.n(PARTITION_KEY)})"
        return [
            {
                "Update": {
                    "TableName": self.table_name,
                    "Key": marshal_item(keys.session_key(handoff.session_id)),
                    "UpdateExpression": update.expression(),
                    "ConditionExpression": meta_condition,
                    **expr.params(),
                }
            },
            {
                "Put": {
                    "TableName": self.table_name,
                    "Item": marshal_item({**handoff.to_item(), **carried}),
                    "ConditionExpression": put_condition,
                    **put_expr.params(),
                }
            },
            {
                "Put": {
                    "TableName": self.table_name,
                    "Item": marshal_item(turn.to_item()),
                    "ConditionExpression": turn_condition,
                    **turn_expr.params(),
                }
            },
            # Assigned: no console offers it as waiting (or escalated) any more.
            *delete_actions(self.table_name, handoff.handoff_id, untrue_after(None, HandoffStatus.ASSIGNED)),
        ]

    def queue_handoff(
        self,
        session_id: str,
        *,
        handoff_id: str,
        reason: str,
        priority: str,
        execution_arn: str | None,
        task_token: str,
    ) -> Handoff | None:
        """Record that the handoff waits for an agent, with WaitForAgent's token (idempotent).

        None when the handoff has moved on (assigned, escalated or over): the message is a late
        or redriven copy whose token is spent, and storing it would let an accept resume a
        wait that no longer exists, so nothing is written.
        """
        with contextlib.suppress(Conflict):  # a redelivered message, or a re-queue after reassignment
            self.put_handoff(
                session_id,
                reason=reason,
                priority=priority,
                status=HandoffStatus.QUEUED,
                execution_arn=execution_arn,
                handoff_id=handoff_id,
            )
        if not self.await_callback(
            session_id, handoff_id, WAITING_FOR_AGENT, task_token, while_status=HandoffStatus.QUEUED
        ):
            return None
        handoff = self.get_handoff(session_id, handoff_id)
        if handoff is None:
            raise HandoffNotFound(session_id, handoff_id)
        return handoff

    def await_callback(
        self,
        session_id: str,
        handoff_id: str,
        waiting_for: str,
        task_token: str,
        *,
        while_status: HandoffStatus | None = None,
    ) -> bool:
        """Store the token of the task that waits for ``waiting_for`` (``agent`` or ``reply``).

        With ``while_status`` the token is stored only while the handoff has that status, in the
        same conditional write; False when it no longer has (nothing is written). HandoffNotFound
        when there is no such handoff.
        """
        if waiting_for not in _WAITING:
            raise ValueError(f"waiting_for must be one of {sorted(_WAITING)} (given {waiting_for!r})")
        if not task_token:
            raise ValueError("task_token must be the waiting task's token (given '')")
        expr = Expr()
        update = Update(expr)
        update.set("callback_token", task_token)
        update.set("waiting_for", waiting_for)
        update.set("updated_at", self._now())
        condition = f"attribute_exists({expr.n(PARTITION_KEY)})"
        if while_status is not None:
            condition += f" AND {expr.n('status')} = {expr.v(str(while_status))}"
        try:
            self._update(keys.handoff_key(session_id, handoff_id), update, condition, return_values="NONE")
        except ClientError as err:
            if code_of(err) != CONDITION_FAILED:
                raise
            if while_status is None or self.get_handoff(session_id, handoff_id) is None:
                raise HandoffNotFound(session_id, handoff_id) from None
            return False
        return True

    def claim_callback(self, session_id: str, handoff_id: str, waiting_for: str) -> str | None:
        """Take the stored token if the handoff waits for ``waiting_for``; exactly one caller gets it."""
        expr = Expr()
        update = Update(expr)
        update.remove("callback_token")
        update.remove("waiting_for")
        condition = f"{expr.n('waiting_for')} = {expr.v(waiting_for)} AND attribute_exists({expr.n('callback_token')})"
        try:
            old = self._update(keys.handoff_key(session_id, handoff_id), update, condition, return_values="UPDATED_OLD")
        except ClientError as err:
            if code_of(err) == CONDITION_FAILED:
                return None
            raise
        token = old.get("callback_token")
        return str(token) if token else None

    def waiting_for(self, session_id: str, handoff_id: str) -> str | None:
        """What the handoff currently waits for (``agent``, ``reply``) or None."""
        item = self._get(keys.handoff_key(session_id, handoff_id))
        value = (item or {}).get("waiting_for")
        return str(value) if value else None

    def requeue_handoff(self, session_id: str, handoff_id: str, *, previous_agent_id: str | None = None) -> None:
        """Put an assigned handoff back to ``queued`` without an agent (reassignment).

        Only from ``assigned``: a handoff closed meanwhile (by its agent, an admin or the
        customer's disconnect) raises HandoffConflict and stays closed. The agent's inbox item
        is deleted in the same transaction.
        """
        for _ in range(MAX_MOVE_READS):
            stored = self._get(keys.handoff_key(session_id, handoff_id))
            if stored is None:
                raise HandoffNotFound(session_id, handoff_id)
            if stored.get("status") != str(HandoffStatus.ASSIGNED):
                raise HandoffConflict(f"handoff {handoff_id!r} is {stored.get('status')}; it is not re-queued")
            expr = Expr()
            update = Update(expr)
            update.set("status", str(HandoffStatus.QUEUED))
            update.set("updated_at", self._now())
            for name in ("agent_id", "callback_token", "waiting_for"):
                update.remove(name)
            if previous_agent_id:
                update.set(PREVIOUS_AGENT, previous_agent_id)
            agent = stored.get("agent_id")
            actions = [
                self._moved_update(session_id, handoff_id, update, str(HandoffStatus.ASSIGNED), agent),
                # The agent's item goes; the next WaitForAgent puts the handoff into the waiting inbox.
                *delete_actions(self.table_name, handoff_id, untrue_after(agent, HandoffStatus.QUEUED)),
            ]
            try:
                self.client.transact_write_items(TransactItems=actions)
            except ClientError as err:
                if code_of(err) != TRANSACTION_CANCELED:
                    raise
                continue  # closed or changed between the read and the write: read again
            return
        raise Conflict(f"handoff {handoff_id!r} kept changing; not re-queued, retry")
