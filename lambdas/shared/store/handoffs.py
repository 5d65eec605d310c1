"""Handoffs: the ``HANDOFF#`` records of a session, their moves, their inbox items and callback tokens.

* The writes that move a handoff together with other records (assigning it to an agent, closing
  it, a customer who leaves it) are use cases (:mod:`lambdas.usecases`); this aggregate adds its
  ``HANDOFF#`` action to their transaction (:meth:`Handoffs.assign`, :meth:`Handoffs.complete`,
  :meth:`Handoffs.abandon`).
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
from typing import Any, Final

from contracts.priorities import DEFAULT_PRIORITY, PRIORITIES, is_priority
from lambdas.shared import keys
from lambdas.shared.errors import Conflict, HandoffNotFound, InvalidInput, SessionNotFound
from lambdas.shared.records import WAITING_STATUSES, Handoff, HandoffStatus, Session, SessionStatus
from lambdas.shared.schema import PARTITION_KEY
from lambdas.shared.store.expressions import Expr, Update
from lambdas.shared.store.inbox import delete_items, untrue_after
from lambdas.shared.store.sessions import CURRENT_HANDOFF
from lambdas.shared.store.table import (
    Aggregate,
    Cancelled,
    ConditionFailed,
    Transaction,
    parse_enum,
    read_modify_write,
    require_id,
)

WAITING_FOR_AGENT: Final = "agent"
WAITING_FOR_REPLY: Final = "reply"
_WAITING: Final = frozenset({WAITING_FOR_AGENT, WAITING_FOR_REPLY})
#: Statuses from which a handoff record may (again) become ``assigned``.
ASSIGNABLE: Final = (HandoffStatus.QUEUED, HandoffStatus.ESCALATED)
#: The handoff attribute naming the agent a re-queued handoff was taken from.
PREVIOUS_AGENT: Final = "previous_agent_id"
#: How often a status change re-reads a handoff whose agent changed between the read and the write.
MAX_MOVE_READS: Final = 3
#: The handoff attribute counting its agent's messages: a reply and an idle reassignment are both
#: conditioned on it, so exactly one of them wins when they meet.
ACTIVITY_VERSION: Final = "activity_version"


class SessionNotActive(Conflict):
    """The session is missing or not ``active``: no handoff can start."""

    def __init__(self, session_id: str, status: str) -> None:
        super().__init__(f"session {session_id!r} is {status}, not active")
        self.session_id = session_id
        self.status = status


class HandoffConflict(Conflict):
    """The handoff record is in a state that cannot become ``assigned`` (failed, completed, ...)."""


class HandoffClosed(Conflict):
    """The handoff is not (or no longer) open: closed, failed, re-queued or never assigned."""


class AgentActive(Conflict):
    """The agent wrote since the activity version the caller read: the handoff is not re-queued."""

    def __init__(self, message: str, version: int) -> None:
        super().__init__(message)
        self.version = version


def _at_version(expr: Expr, version: int) -> str:
    """The condition that the agent's activity version is ``version`` (0: the agent wrote nothing)."""
    activity = expr.n(ACTIVITY_VERSION)
    return f"{activity} = {expr.v(version)}" if version else f"attribute_not_exists({activity})"


class Handoffs(Aggregate):
    """Handoff operations; the records live in the session's partition, whose META names the current one."""

    def put_handoff(
        self,
        session_id: str,
        *,
        reason: str,
        priority: str = DEFAULT_PRIORITY,
        status: HandoffStatus | str = HandoffStatus.QUEUED,
        agent_id: str | None = None,
        execution_arn: str | None = None,
        handoff_id: str | None = None,
    ) -> Handoff:
        """A new handoff record that becomes the session's current one (never overwrites).

        One transaction: the ``HANDOFF#`` record (Conflict if ``handoff_id`` is taken) and the
        session META's ``current_handoff_id`` (SessionNotFound without a session). ``handoff_id``
        defaults to ``<13-digit epoch ms>-<12 hex>``; give one (e.g. the execution name) to make
        retries idempotent-by-conflict. ``priority`` must be one of
        :data:`contracts.priorities.PRIORITIES` (InvalidInput otherwise).
        """
        require_id(session_id, "session_id")
        require_id(reason, "reason")
        if not is_priority(priority):
            raise InvalidInput(f"priority must be one of {', '.join(PRIORITIES)} (given {priority!r})")
        now_seconds = self.table.clock()
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
            ttl=now + self.table.ttl_seconds,
            agent_id=agent_id,
            execution_arn=execution_arn,
        )
        tx = Transaction(self.table.table_name)
        tx.put_new("handoff", handoff.to_item())
        self._make_current(tx, session_id, handoff.handoff_id)
        try:
            self.table.commit(tx)
        except Cancelled as cancelled:
            if "handoff" in cancelled.failed:
                raise Conflict(f"handoff {handoff.handoff_id!r} exists already") from None
            raise SessionNotFound(session_id) from None
        return handoff

    def _make_current(self, tx: Transaction, session_id: str, handoff_id: str) -> None:
        """Add to ``tx`` the update that points the (existing) session META at ``handoff_id`` (action ``session``)."""
        update = Update(Expr())
        update.set(CURRENT_HANDOFF, handoff_id)
        condition = f"attribute_exists({update.expr.n(PARTITION_KEY)})"
        tx.update("session", keys.session_key(session_id), update, condition=condition)

    def shown_status(self, session: Session) -> SessionStatus:
        """The session's status as a client is shown it: ``handoff`` also while its handoff waits for an agent.

        The stored status stays ``active`` until an agent is assigned (the workflow's checks rely
        on it); a waiting customer is nonetheless no longer the model's to answer. One read, and
        only for an active session that has had a handoff.
        """
        if session.status != SessionStatus.ACTIVE or not session.current_handoff_id:
            return session.status
        handoff = self.get_handoff(session.session_id, session.current_handoff_id)
        waiting = handoff is not None and handoff.status in WAITING_STATUSES
        return SessionStatus.HANDOFF if waiting else session.status

    def get_handoff(self, session_id: str, handoff_id: str) -> Handoff | None:
        require_id(session_id, "session_id")
        require_id(handoff_id, "handoff_id")
        item = self.table.get(keys.handoff_key(session_id, handoff_id))
        return Handoff.from_item(item) if item else None

    def current_handoff(self, session_id: str) -> Handoff | None:
        """The session's current handoff (the one its META names), or None.

        The newest handoff created or assigned, whatever its id; it stays current after it ends,
        so its status tells whether anyone still serves the session.
        """
        require_id(session_id, "session_id")
        meta = self.table.get(keys.session_key(session_id))
        handoff_id = (meta or {}).get(CURRENT_HANDOFF)
        return self.get_handoff(session_id, str(handoff_id)) if handoff_id else None

    def served_before(self, session_id: str, agent_id: str) -> bool:
        """True when ``agent_id`` was the agent of the session's current handoff and no longer serves it.

        Lets the API tell an agent whose access ended (403) from a stranger (404).
        """
        meta = self.table.get(keys.session_key(session_id))
        handoff_id = (meta or {}).get(CURRENT_HANDOFF)
        item = self.table.get(keys.handoff_key(session_id, str(handoff_id))) if handoff_id else None
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

        def attempt() -> Handoff:
            stored = self.table.get(keys.handoff_key(session_id, handoff_id))
            if stored is None:
                raise HandoffNotFound(session_id, handoff_id)
            if want is not None and stored.get("status") != want:
                raise Conflict(f"handoff {handoff_id!r} is {stored.get('status')!r}, not {want!r}")
            now = self.table.now()
            update = Update(Expr())
            for name, value in changes.items():
                if value is not None:
                    update.set(name, value)
            update.set("updated_at", now)
            previous = stored.get("agent_id")
            new_status = str(changes["status"] or stored.get("status"))
            tx = Transaction(self.table.table_name)
            self._move(tx, session_id, handoff_id, update, str(stored.get("status")), previous)
            delete_items(tx, stored, untrue_after(previous, new_status, agent_id or previous))
            self.table.commit(tx)  # refused: the record moved between the read and the write, read again
            written = {name: value for name, value in changes.items() if value is not None}
            return Handoff.from_item({**stored, **written, "updated_at": now})

        return read_modify_write(
            MAX_MOVE_READS, attempt, exhausted=lambda: Conflict(f"handoff {handoff_id!r} kept changing; retry")
        )

    def _annotate_handoff(self, session_id: str, handoff_id: str, changes: dict[str, Any], want: str | None) -> Handoff:
        """One UpdateItem of fields that move the handoff between no inboxes (``execution_arn``)."""
        expr = Expr()
        update = Update(expr)
        for name, value in changes.items():
            if value is not None:
                update.set(name, value)
        update.set("updated_at", self.table.now())
        condition = f"attribute_exists({expr.n(PARTITION_KEY)})"
        if want is not None:
            condition += f" AND {expr.n('status')} = {expr.v(want)}"
        item = self.table.update(
            keys.handoff_key(session_id, handoff_id),
            update,
            condition,
            missing=lambda: HandoffNotFound(session_id, handoff_id),
            changed=lambda old: Conflict(f"handoff {handoff_id!r} is {old.get('status')!r}, not {want!r}"),
        )
        return Handoff.from_item(item)

    def _move(
        self,
        tx: Transaction,
        session_id: str,
        handoff_id: str,
        update: Update,
        status: str,
        agent_id: Any,
        version: int | None = None,
    ) -> None:
        """Add ``update`` to ``tx`` (action ``handoff``), conditioned on the status and agent just read
        (and, given ``version``, on the agent's activity version just read)."""
        expr = update.expr
        agent = (
            f"{expr.n('agent_id')} = {expr.v(str(agent_id))}"
            if agent_id
            else f"attribute_not_exists({expr.n('agent_id')})"
        )
        condition = f"attribute_exists({expr.n(PARTITION_KEY)}) AND {expr.n('status')} = {expr.v(status)} AND {agent}"
        if version is not None:
            condition += f" AND {_at_version(expr, version)}"
        tx.update("handoff", keys.handoff_key(session_id, handoff_id), update, condition=condition)

    def assign(self, tx: Transaction, handoff: Handoff, carried: dict[str, Any]) -> None:
        """Add the assigned ``HANDOFF#`` record (keeping ``carried``) to ``tx`` (action ``handoff``).

        It may replace only a record that is still assignable (requested, queued, escalated), and
        every inbox but the agent's own stops holding it.
        """
        expr = Expr()
        allowed = ", ".join(expr.v(str(s)) for s in ASSIGNABLE)
        condition = f"attribute_not_exists({expr.n(PARTITION_KEY)}) OR {expr.n('status')} IN ({allowed})"
        tx.put("handoff", {**handoff.to_item(), **carried}, condition=condition, expr=expr)
        # Assigned: no console offers it as waiting (or escalated) any more.
        delete_items(tx, handoff, untrue_after(None, HandoffStatus.ASSIGNED))

    def complete(
        self, tx: Transaction, handoff: Handoff, *, closed_by: str, resolution: str, outcome: SessionStatus, now: int
    ) -> None:
        """Add ``assigned -> completed`` to ``tx`` (action ``handoff``) and the deletes of its inbox items.

        Conditioned on the record still being assigned to the agent just read, so a close racing a
        failure or a re-queue changes nothing.
        """
        update = Update(Expr())
        self._closing(update, HandoffStatus.COMPLETED, closed_by, resolution, outcome, now)
        expr = update.expr
        condition = (
            f"{expr.n('status')} = {expr.v(str(HandoffStatus.ASSIGNED))} AND "
            f"{expr.n('agent_id')} = {expr.v(str(handoff.agent_id))}"
        )
        tx.update("handoff", keys.handoff_key(handoff.session_id, handoff.handoff_id), update, condition=condition)
        # It needs no one now: out of its agent's inbox and the shared ones.
        delete_items(tx, handoff, untrue_after(handoff.agent_id, HandoffStatus.COMPLETED))

    def abandon(
        self,
        tx: Transaction,
        handoff: Handoff,
        token: str | None,
        *,
        closed_by: str,
        resolution: str,
        outcome: SessionStatus,
        now: int,
    ) -> None:
        """Add ``queued|escalated -> failed`` to ``tx`` (action ``handoff``), the waiting task's token removed.

        Conditioned on the status and on the token just read (exactly one of this and an agent's
        accept gets the token); the handoff's waiting and managers inbox items are deleted.
        ``outcome`` is where the session goes (disconnected, or deleted), as a close records it.
        """
        update = Update(Expr())
        self._closing(update, HandoffStatus.FAILED, closed_by, resolution, outcome, now)
        update.remove("callback_token")
        update.remove("waiting_for")
        expr = update.expr
        token_condition = (
            f"{expr.n('callback_token')} = {expr.v(token)}"
            if token is not None
            else f"attribute_not_exists({expr.n('callback_token')})"
        )
        condition = f"{expr.n('status')} = {expr.v(str(handoff.status))} AND {token_condition}"
        tx.update("handoff", keys.handoff_key(handoff.session_id, handoff.handoff_id), update, condition=condition)
        delete_items(tx, handoff, untrue_after(handoff.agent_id, HandoffStatus.FAILED))

    @staticmethod
    def _closing(
        update: Update, status: HandoffStatus, closed_by: str, resolution: str, outcome: SessionStatus, now: int
    ) -> None:
        update.set("status", str(status))
        update.set("resolution", resolution)
        update.set("outcome", str(outcome))
        update.set("closed_by", closed_by)
        update.set("closed_at", now)
        update.set("updated_at", now)

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
        while_version: int | None = None,
    ) -> bool:
        """Store the token of the task that waits for ``waiting_for`` (``agent`` or ``reply``).

        With ``while_status`` the token is stored only while the handoff has that status, in the
        same conditional write; False when it no longer has (nothing is written). With
        ``while_version`` also only while the agent's activity version is still that one (0: the
        agent has written nothing since the assignment); AgentActive with the version when the
        agent wrote since (nothing is written), so a message counted before the wait began is not
        lost on a wait nobody will end. HandoffNotFound when there is no such handoff.
        """
        if waiting_for not in _WAITING:
            raise ValueError(f"waiting_for must be one of {sorted(_WAITING)} (given {waiting_for!r})")
        if not task_token:
            raise ValueError("task_token must be the waiting task's token (given '')")
        if while_version is not None and (isinstance(while_version, bool) or while_version < 0):
            raise ValueError(f"while_version must be an activity version, 0 or more (given {while_version!r})")
        expr = Expr()
        update = Update(expr)
        update.set("callback_token", task_token)
        update.set("waiting_for", waiting_for)
        update.set("updated_at", self.table.now())
        condition = f"attribute_exists({expr.n(PARTITION_KEY)})"
        if while_status is not None:
            condition += f" AND {expr.n('status')} = {expr.v(str(while_status))}"
        if while_version is not None:
            condition += f" AND {_at_version(expr, while_version)}"
        try:
            self.table.update_if(keys.handoff_key(session_id, handoff_id), update, condition, returns="NONE")
        except ConditionFailed as failed:
            if failed.old is None:
                raise HandoffNotFound(session_id, handoff_id) from None
            if while_status is not None and failed.old.get("status") != str(while_status):
                return False  # the handoff is no longer in ``while_status``
            version = int(failed.old.get(ACTIVITY_VERSION, 0))
            raise AgentActive(
                f"the agent of handoff {handoff_id!r} wrote since activity {while_version}", version
            ) from None
        return True

    def claim_callback(self, session_id: str, handoff_id: str, waiting_for: str) -> str | None:
        """Take the stored token if the handoff waits for ``waiting_for``; exactly one caller gets it."""
        expr = Expr()
        update = Update(expr)
        update.remove("callback_token")
        update.remove("waiting_for")
        condition = f"{expr.n('waiting_for')} = {expr.v(waiting_for)} AND attribute_exists({expr.n('callback_token')})"
        try:
            old = self.table.update_if(
                keys.handoff_key(session_id, handoff_id), update, condition, returns="UPDATED_OLD"
            )
        except ConditionFailed:
            return None
        token = old.get("callback_token")
        return str(token) if token else None

    def mark_first_reply(self, session_id: str, handoff_id: str, agent_id: str) -> bool:
        """Record when the assigned agent first replied; True when this call recorded it.

        One conditional UpdateItem: only while the handoff is assigned to ``agent_id`` and has no
        ``first_reply_at`` yet, so later replies, another agent or a closed handoff change nothing.
        A reassignment writes the record anew, so the next agent's first reply is recorded again.
        """
        expr = Expr()
        update = Update(expr)
        update.set("first_reply_at", self.table.now())
        condition = (
            f"{expr.n('status')} = {expr.v(str(HandoffStatus.ASSIGNED))} AND "
            f"{expr.n('agent_id')} = {expr.v(agent_id)} AND attribute_not_exists({expr.n('first_reply_at')})"
        )
        return self.table.updated_if(keys.handoff_key(session_id, handoff_id), update, condition)

    def waiting_for(self, session_id: str, handoff_id: str) -> str | None:
        """What the handoff currently waits for (``agent``, ``reply``) or None."""
        item = self.table.get(keys.handoff_key(session_id, handoff_id))
        value = (item or {}).get("waiting_for")
        return str(value) if value else None

    def record_activity(self, session_id: str, handoff_id: str, agent_id: str) -> int:
        """Count a message of ``agent_id`` on its assigned handoff; the new activity version.

        One conditional write (still assigned, to this agent): a handoff re-queued or closed
        meanwhile raises HandoffClosed and nothing is counted, so the agent's message is refused.
        """
        expr = Expr()
        update = Update(expr)
        update.add(ACTIVITY_VERSION, 1)
        condition = (
            f"{expr.n('status')} = {expr.v(str(HandoffStatus.ASSIGNED))} AND {expr.n('agent_id')} = {expr.v(agent_id)}"
        )
        try:
            item = self.table.update_if(keys.handoff_key(session_id, handoff_id), update, condition)
        except ConditionFailed:
            raise HandoffClosed(f"handoff {handoff_id!r} is no longer assigned to {agent_id!r}") from None
        return int(item[ACTIVITY_VERSION])

    def requeue_handoff(
        self,
        session_id: str,
        handoff_id: str,
        *,
        previous_agent_id: str | None = None,
        expected_version: int | None = None,
    ) -> None:
        """Put an assigned handoff back to ``queued`` without an agent (reassignment).

        Only from ``assigned``: a handoff closed meanwhile (by its agent, an admin or the
        customer's disconnect) raises HandoffConflict and stays closed. With ``expected_version``
        only while the agent has written nothing since that activity version (AgentActive
        otherwise, in the same conditional write). The agent's inbox item is deleted in the same
        transaction.
        """

        def attempt() -> None:
            stored = self.table.get(keys.handoff_key(session_id, handoff_id))
            if stored is None:
                raise HandoffNotFound(session_id, handoff_id)
            if stored.get("status") != str(HandoffStatus.ASSIGNED):
                raise HandoffConflict(f"handoff {handoff_id!r} is {stored.get('status')}; it is not re-queued")
            version = int(stored.get(ACTIVITY_VERSION, 0))
            if expected_version is not None and version != expected_version:
                raise AgentActive(
                    f"the agent of handoff {handoff_id!r} wrote since activity {expected_version}", version
                )
            update = Update(Expr())
            update.set("status", str(HandoffStatus.QUEUED))
            update.set("updated_at", self.table.now())
            for name in ("agent_id", "callback_token", "waiting_for"):
                update.remove(name)
            if previous_agent_id:
                update.set(PREVIOUS_AGENT, previous_agent_id)
            agent = stored.get("agent_id")
            tx = Transaction(self.table.table_name)
            self._move(tx, session_id, handoff_id, update, str(HandoffStatus.ASSIGNED), agent, version)
            # The agent's item goes; the next WaitForAgent puts the handoff into the waiting inbox.
            delete_items(tx, stored, untrue_after(agent, HandoffStatus.QUEUED))
            self.table.commit(tx)  # refused: closed or changed between the read and the write, read again

        read_modify_write(
            MAX_MOVE_READS,
            attempt,
            exhausted=lambda: Conflict(f"handoff {handoff_id!r} kept changing; not re-queued, retry"),
        )
