"""The end of a handoff: the record completed, the agent released and the session moved, in ONE transaction.

A handoff ends when its agent (or an admin) closes it with a resolution, or when the customer
disconnects during it. Either way one TransactWriteItems:

* the ``HANDOFF#`` record ``assigned -> completed`` with the resolution, who closed it and when,
  conditioned on its status and on the agent it was assigned to (a second close changes nothing);
* the session META ``handoff -> active`` (the assistant answers again) or ``-> disconnected``
  (the session ends and waits for cleanup), conditioned on the session still being in this
  handoff (``current_handoff_id``);
* the agent's release (``busy -> available``, back into the AvailableAgentsIndex) when the agent
  still serves this session, conditioned on the revision just read;
* the handoff's items in the agent's inbox and in the shared waiting and managers inboxes
  deleted, so that every console's inbox shows only handoffs someone must still act on.

A customer who leaves while the handoff still waits (``queued`` for an agent, or ``escalated``
for a manager) ends it too, with :meth:`HandoffLife.abandon_handoff`: one transaction moves the
record to ``failed`` (resolution "customer left") and takes the waiting task's token off it,
disconnects the session, and deletes the handoff's waiting and managers inbox items. Whoever
holds the token then stops the workflow's wait (``SendTaskFailure``, see ``lambdas/ws/disconnect.py``);
an agent's accept finds nothing waiting (409).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Final

from botocore.exceptions import ClientError

from lambdas.shared import keys
from lambdas.shared.errors import Conflict, HandoffNotFound, InvalidInput
from lambdas.shared.records import AgentStatus, Handoff, HandoffStatus, SessionStatus
from lambdas.shared.schema import CLEANUP, PARTITION_KEY
from lambdas.shared.serialize import marshal_item
from lambdas.shared.store.agents import Agents
from lambdas.shared.store.handoffs import CURRENT_HANDOFF, Handoffs
from lambdas.shared.store.inbox import delete_actions, untrue_after
from lambdas.shared.store.table import STATUS_TIMESTAMP, TRANSACTION_CANCELED, Expr, Update, code_of, require_id

#: Where a closed handoff leaves the session.
CLOSE_OUTCOMES: Final = (SessionStatus.ACTIVE, SessionStatus.DISCONNECTED)
MAX_RESOLUTION: Final = 1000
#: How often a close re-reads an agent whose record changed between the read and the write.
MAX_CLOSE_READS: Final = 3
#: The statuses of a handoff that waits for someone to take it (an agent, or a manager).
WAITING_STATUSES: Final = (HandoffStatus.QUEUED, HandoffStatus.ESCALATED)


class HandoffClosed(Conflict):
    """The handoff is not (or no longer) open: closed, failed, re-queued or never assigned."""


@dataclass(frozen=True)
class Closed:
    """What a close wrote."""

    handoff: Handoff
    session_status: SessionStatus
    released_agent_id: str | None


@dataclass(frozen=True)
class Abandoned:
    """What :meth:`HandoffLife.abandon_handoff` wrote, and the waiting task's token it took (if any)."""

    handoff: Handoff
    task_token: str | None
    waiting_for: str | None


class HandoffLife(Handoffs, Agents):
    """Closing handoffs (it moves a session and releases an agent, hence on top of both)."""

    def close_handoff(
        self,
        session_id: str,
        handoff_id: str,
        *,
        closed_by: str,
        resolution: str,
        outcome: SessionStatus | str,
        if_connection: str | None = None,
    ) -> Closed:
        """Close an assigned handoff in one transaction (see the module docstring).

        ``if_connection`` adds "the session's connection is this one" (a customer's disconnect).
        Raises HandoffNotFound, HandoffClosed (409: nothing was changed) or Conflict when the
        session or agent kept changing.
        """
        require_id(closed_by, "closed_by")
        new_status = SessionStatus(outcome)
        if new_status not in CLOSE_OUTCOMES:
            raise InvalidInput(f"outcome must be one of {[str(s) for s in CLOSE_OUTCOMES]} (given {outcome!r})")
        if not resolution.strip() or len(resolution) > MAX_RESOLUTION:
            raise InvalidInput(f"resolution must be a non-empty text of at most {MAX_RESOLUTION} characters")
        for _ in range(MAX_CLOSE_READS):
            handoff = self.get_handoff(session_id, handoff_id)
            if handoff is None:
                raise HandoffNotFound(session_id, handoff_id)
            if handoff.status != HandoffStatus.ASSIGNED or not handoff.agent_id:
                raise HandoffClosed(f"handoff {handoff_id!r} is {handoff.status}; only an assigned handoff can close")
            now = self._now()
            actions = [
                self._complete_action(handoff, closed_by, resolution, new_status, now),
                self._end_session_action(handoff, new_status, now, if_connection),
            ]
            release, released_id = self._maybe_release(handoff)
            actions += release + self._inbox_deletes(handoff)
            try:
                self.client.transact_write_items(TransactItems=actions)
            except ClientError as err:
                if code_of(err) != TRANSACTION_CANCELED:
                    raise
                codes = [r.get("Code") for r in err.response.get("CancellationReasons") or []]
                if codes[:1] == ["ConditionalCheckFailed"]:
                    continue  # the handoff moved: read again (it is closed or re-queued now)
                if codes[1:2] == ["ConditionalCheckFailed"]:
                    raise HandoffClosed(f"session {session_id!r} is no longer in handoff {handoff_id!r}") from None
                continue  # the agent record changed between the read and the write
            completed = replace(handoff, status=HandoffStatus.COMPLETED, updated_at=now)
            return Closed(completed, new_status, released_id)
        raise Conflict(f"handoff {handoff_id!r} kept changing while it was closed; retry")

    def _maybe_release(self, handoff: Handoff) -> tuple[list[dict[str, Any]], str | None]:
        """The release of the handoff's agent, when it still serves this session (else nothing)."""
        agent = self.get_agent(str(handoff.agent_id))
        if agent is None or agent.status != AgentStatus.BUSY or agent.current_session_id != handoff.session_id:
            return [], None
        actions, _ = self.release_actions(agent, session_id=handoff.session_id)
        return actions, agent.agent_id

    def _inbox_deletes(self, handoff: Handoff) -> list[dict[str, Any]]:
        """Take the handoff out of its agent's inbox and the shared ones: it needs no one now."""
        return delete_actions(
            self.table_name, handoff.handoff_id, untrue_after(handoff.agent_id, HandoffStatus.COMPLETED)
        )

    def abandon_handoff(
        self,
        session_id: str,
        handoff_id: str,
        *,
        closed_by: str,
        resolution: str,
        if_connection: str | None = None,
    ) -> Abandoned:
        """End a handoff nobody took yet because the customer left (see the module docstring).

        One transaction: ``HANDOFF#`` ``queued|escalated -> failed`` with the resolution, the
        waiting task's token removed (conditioned on being the token just read, so exactly one of
        this and an agent's accept gets it); the session META ``active -> disconnected``
        (conditioned on its current handoff and, with ``if_connection``, on its connection);
        the waiting and managers inbox items deleted. Returns the token for the caller to fail
        the wait with. Raises HandoffNotFound, or HandoffClosed when the handoff is no longer
        waiting (taken, closed, failed) or the session moved (nothing was changed).
        """
        require_id(closed_by, "closed_by")
        if not resolution.strip() or len(resolution) > MAX_RESOLUTION:
            raise InvalidInput(f"resolution must be a non-empty text of at most {MAX_RESOLUTION} characters")
        for _ in range(MAX_CLOSE_READS):
            stored = self._get(keys.handoff_key(session_id, handoff_id))
            if stored is None:
                raise HandoffNotFound(session_id, handoff_id)
            handoff = Handoff.from_item(stored)
            if handoff.status not in WAITING_STATUSES:
                raise HandoffClosed(f"handoff {handoff_id!r} is {handoff.status}; nobody waits on it any more")
            token = str(stored["callback_token"]) if stored.get("callback_token") else None
            waiting_for = str(stored["waiting_for"]) if stored.get("waiting_for") else None
            now = self._now()
            actions = [
                self._abandon_action(handoff, token, closed_by, resolution, now),
                self._end_session_action(
                    handoff, SessionStatus.DISCONNECTED, now, if_connection, from_status=SessionStatus.ACTIVE
                ),
                *delete_actions(self.table_name, handoff_id, untrue_after(handoff.agent_id, HandoffStatus.FAILED)),
            ]
            try:
                self.client.transact_write_items(TransactItems=actions)
            except ClientError as err:
                if code_of(err) != TRANSACTION_CANCELED:
                    raise
                codes = [r.get("Code") for r in err.response.get("CancellationReasons") or []]
                if codes[1:2] == ["ConditionalCheckFailed"]:
                    raise HandoffClosed(f"session {session_id!r} moved on from handoff {handoff_id!r}") from None
                continue  # the handoff moved (accepted, escalated, its token taken): read again
            failed = replace(handoff, status=HandoffStatus.FAILED, updated_at=now)
            return Abandoned(failed, token, waiting_for)
        raise Conflict(f"handoff {handoff_id!r} kept changing while it was abandoned; retry")

    def _abandon_action(
        self, handoff: Handoff, token: str | None, closed_by: str, resolution: str, now: int
    ) -> dict[str, Any]:
        expr = Expr()
        update = Update(expr)
        update.set("status", str(HandoffStatus.FAILED))
        update.set("resolution", resolution)
        update.set("outcome", str(SessionStatus.DISCONNECTED))
        update.set("closed_by", closed_by)
        update.set("closed_at", now)
        update.set("updated_at", now)
        update.remove("callback_token")
        update.remove("waiting_for")
        token_condition = (
            f"{expr.n('callback_token')} = {expr.v(token)}"
            if token is not None
            else f"attribute_not_exists({expr.n('callback_token')})"
        )
        condition = f"{expr.n('status')} = {expr.v(str(handoff.status))} AND {token_condition}"
        return {
            "Update": {
                "TableName": self.table_name,
                "Key": marshal_item(keys.handoff_key(handoff.session_id, handoff.handoff_id)),
                "UpdateExpression": update.expression(),
                "ConditionExpression": condition,
                **expr.params(),
            }
        }

    def _complete_action(
        self, handoff: Handoff, closed_by: str, resolution: str, outcome: SessionStatus, now: int
    ) -> dict[str, Any]:
        expr = Expr()
        update = Update(expr)
        update.set("status", str(HandoffStatus.COMPLETED))
        update.set("resolution", resolution)
        update.set("outcome", str(outcome))
        update.set("closed_by", closed_by)
        update.set("closed_at", now)
        update.set("updated_at", now)
        condition = (
            f"{expr.n('status')} = {expr.v(str(HandoffStatus.ASSIGNED))} AND "
            f"{expr.n('agent_id')} = {expr.v(str(handoff.agent_id))}"
        )
        return {
            "Update": {
                "TableName": self.table_name,
                "Key": marshal_item(keys.handoff_key(handoff.session_id, handoff.handoff_id)),
                "UpdateExpression": update.expression(),
                "ConditionExpression": condition,
                **expr.params(),
            }
        }

    def _end_session_action(
        self,
        handoff: Handoff,
        new_status: SessionStatus,
        now: int,
        if_connection: str | None,
        *,
        from_status: SessionStatus = SessionStatus.HANDOFF,
    ) -> dict[str, Any]:
        """META ``from_status -> active|disconnected``, as :meth:`update_status` would write it."""
        expr = Expr()
        update = Update(expr)
        update.set("status", str(new_status))
        update.set("updated_at", now)
        if new_status == SessionStatus.DISCONNECTED:
            update.set(STATUS_TIMESTAMP[new_status], now)
            update.set(CLEANUP.partition_key, keys.cleanup_shard(handoff.session_id, self.cleanup_shards))
            update.set(CLEANUP.sort_key, now)
            if if_connection is not None:
                update.remove("connection_id")
        condition = (
            f"attribute_exists({expr.n(PARTITION_KEY)}) AND "
            f"{expr.n('status')} = {expr.v(str(from_status))} AND "
            f"{expr.n(CURRENT_HANDOFF)} = {expr.v(handoff.handoff_id)}"
        )
        if if_connection is not None:
            condition += f" AND {expr.n('connection_id')} = {expr.v(if_connection)}"
        return {
            "Update": {
                "TableName": self.table_name,
                "Key": marshal_item(keys.session_key(handoff.session_id)),
                "UpdateExpression": update.expression(),
                "ConditionExpression": condition,
                **expr.params(),
            }
        }
