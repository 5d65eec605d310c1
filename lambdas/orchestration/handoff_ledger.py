"""Handoff-specific writes the SessionStore does not have yet: the handoff transaction and callback tokens.

Kept next to the store (same client, table, clock and key builders; no handler builds a key) until
they move into ``lambdas/shared/store.py``, which its owner was still editing.

* :meth:`HandoffLedger.begin`: ONE TransactWriteItems: session META ``active -> handoff``, the
  ``HANDOFF#`` record (status assigned), a system TURN. The turn number comes from the atomic
  ``turn_count`` counter: the transaction sets ``turn_count = n + 1`` conditioned on it still being
  ``n`` (read just before), so the number is unique and the counter exact; when a concurrent
  ``add_turn`` moves the counter first, the transaction is cancelled and re-read (bounded).
* Callback tokens: a waiting Step Functions task's token is stored on the ``HANDOFF#`` record
  (``callback_token`` + ``waiting_for``) and taken by exactly one caller (conditional REMOVE), so
  two agents accepting the same handoff cannot both complete it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from botocore.exceptions import ClientError

from lambdas.shared import keys
from lambdas.shared.errors import Conflict, HandoffNotFound
from lambdas.shared.records import (
    Handoff,
    HandoffStatus,
    Role,
    SessionStatus,
    Turn,
)
from lambdas.shared.schema import PARTITION_KEY
from lambdas.shared.serialize import marshal, marshal_item
from lambdas.shared.store import DynamoSessionStore

WAITING_FOR_AGENT: Final = "agent"
WAITING_FOR_REPLY: Final = "reply"
_WAITING: Final = frozenset({WAITING_FOR_AGENT, WAITING_FOR_REPLY})
#: Statuses from which a handoff record may (again) become ``assigned``.
_ASSIGNABLE: Final = (HandoffStatus.REQUESTED, HandoffStatus.QUEUED, HandoffStatus.ESCALATED)


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


class HandoffLedger:
    """Handoff writes on the store's table, client and TTL. ``clock`` defaults to ``time.time``."""

    def __init__(
        self,
        store: DynamoSessionStore,
        *,
        clock: Callable[[], float] = time.time,
        max_attempts: int = 5,
    ) -> None:
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1 (given {max_attempts})")
        self.store = store
        self._clock = clock
        self.max_attempts = max_attempts

    @property
    def _client(self) -> Any:
        return self.store.client

    def begin(
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
        turn counter kept moving for ``max_attempts`` reads. A retry after success returns the
        stored handoff (``turn_number`` None) without writing again.
        """
        for _ in range(self.max_attempts):
            session = self.store.get_session(session_id)
            if session is None:
                raise SessionNotActive(session_id, "missing")
            existing = self.store.get_handoff(session_id, handoff_id)
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
            now = int(self._clock())
            ttl = now + self.store.ttl_seconds
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
            meta_update = {
                "TableName": self.store.table_name,
                "Key": marshal_item(keys.session_key(session_id)),
                "UpdateExpression": "SET #status = :handoff, #updated_at = :now, #turn_count = :next, #ttl = :ttl",
                "ConditionExpression": ("attribute_exists(#pk) AND #status = :active AND #turn_count = :count"),
                "ExpressionAttributeNames": {
                    "#pk": PARTITION_KEY,
                    "#status": "status",
                    "#updated_at": "updated_at",
                    "#turn_count": "turn_count",
                    "#ttl": "ttl",
                },
                "ExpressionAttributeValues": {
                    ":handoff": marshal(str(SessionStatus.HANDOFF)),
                    ":active": marshal(str(SessionStatus.ACTIVE)),
                    ":now": marshal(now),
                    ":next": marshal(number),
                    ":count": marshal(session.turn_count),
                    ":ttl": marshal(ttl),
                },
            }
            handoff_put = {
                "TableName": self.store.table_name,
                "Item": marshal_item(handoff.to_item()),
                "ConditionExpression": "attribute_not_exists(#pk) OR #status IN (:s0, :s1, :s2)",
                "ExpressionAttributeNames": {"#pk": PARTITION_KEY, "#status": "status"},
                "ExpressionAttributeValues": {f":s{i}": marshal(str(s)) for i, s in enumerate(_ASSIGNABLE)},
            }
            turn_put = {
                "TableName": self.store.table_name,
                "Item": marshal_item(turn.to_item()),
                "ConditionExpression": "attribute_not_exists(#pk)",
                "ExpressionAttributeNames": {"#pk": PARTITION_KEY},
            }
            try:
                self._client.transact_write_items(
                    TransactItems=[{"Update": meta_update}, {"Put": handoff_put}, {"Put": turn_put}]
                )
            except ClientError as err:
                if err.response.get("Error", {}).get("Code") != "TransactionCanceledException":
                    raise
                reasons = err.response.get("CancellationReasons") or []
                if len(reasons) > 1 and reasons[1].get("Code") == "ConditionalCheckFailed":
                    raise HandoffConflict(f"handoff {handoff_id!r} changed concurrently") from None
                continue  # the session moved or the counter moved: read again
            return Begun(handoff, number)
        raise Conflict(f"session {session_id!r} kept changing; handoff {handoff_id!r} not started, retry")

    def queue(
        self,
        session_id: str,
        *,
        handoff_id: str,
        reason: str,
        priority: str,
        execution_arn: str | None,
        task_token: str,
    ) -> Handoff:
        """Record that the handoff waits for an agent, with WaitForAgent's token (idempotent)."""
        with contextlib.suppress(Conflict):  # a redelivered message, or a re-queue after reassignment
            self.store.put_handoff(
                session_id,
                reason=reason,
                priority=priority,
                status=HandoffStatus.QUEUED,
                execution_arn=execution_arn,
                handoff_id=handoff_id,
            )
        self.await_callback(session_id, handoff_id, WAITING_FOR_AGENT, task_token)
        handoff = self.store.get_handoff(session_id, handoff_id)
        if handoff is None:
            raise HandoffNotFound(session_id, handoff_id)
        return handoff

    def await_callback(self, session_id: str, handoff_id: str, waiting_for: str, task_token: str) -> None:
        """Store the token of the task that waits for ``waiting_for`` (``agent`` or ``reply``)."""
        if waiting_for not in _WAITING:
            raise ValueError(f"waiting_for must be one of {sorted(_WAITING)} (given {waiting_for!r})")
        if not task_token:
            raise ValueError("task_token must be the waiting task's token (given '')")
        try:
            self._client.update_item(
                TableName=self.store.table_name,
                Key=marshal_item(keys.handoff_key(session_id, handoff_id)),
                UpdateExpression="SET #token = :token, #waiting = :waiting, #updated_at = :now",
                ConditionExpression="attribute_exists(#pk)",
                ExpressionAttributeNames={
                    "#pk": PARTITION_KEY,
                    "#token": "callback_token",
                    "#waiting": "waiting_for",
                    "#updated_at": "updated_at",
                },
                ExpressionAttributeValues={
                    ":token": marshal(task_token),
                    ":waiting": marshal(waiting_for),
                    ":now": marshal(int(self._clock())),
                },
            )
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
                raise HandoffNotFound(session_id, handoff_id) from None
            raise

    def claim_callback(self, session_id: str, handoff_id: str, waiting_for: str) -> str | None:
        """Take the stored token if the handoff waits for ``waiting_for``; exactly one caller gets it."""
        try:
            resp = self._client.update_item(
                TableName=self.store.table_name,
                Key=marshal_item(keys.handoff_key(session_id, handoff_id)),
                UpdateExpression="REMOVE #token, #waiting",
                ConditionExpression="#waiting = :waiting AND attribute_exists(#token)",
                ExpressionAttributeNames={"#token": "callback_token", "#waiting": "waiting_for"},
                ExpressionAttributeValues={":waiting": marshal(waiting_for)},
                ReturnValues="UPDATED_OLD",
            )
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
                return None
            raise
        token = resp.get("Attributes", {}).get("callback_token", {}).get("S")
        return str(token) if token else None

    def waiting_for(self, session_id: str, handoff_id: str) -> str | None:
        """What the handoff currently waits for (``agent``, ``reply``) or None."""
        resp = self._client.get_item(
            TableName=self.store.table_name,
            Key=marshal_item(keys.handoff_key(session_id, handoff_id)),
            ConsistentRead=True,
            ProjectionExpression="#waiting",
            ExpressionAttributeNames={"#waiting": "waiting_for"},
        )
        value = resp.get("Item", {}).get("waiting_for", {}).get("S")
        return str(value) if value else None

    def requeue(self, session_id: str, handoff_id: str) -> None:
        """Put an assigned handoff back to ``queued`` without an agent (reassignment)."""
        try:
            self._client.update_item(
                TableName=self.store.table_name,
                Key=marshal_item(keys.handoff_key(session_id, handoff_id)),
                UpdateExpression="SET #status = :queued, #updated_at = :now REMOVE #agent, #token, #waiting",
                ConditionExpression="attribute_exists(#pk)",
                ExpressionAttributeNames={
                    "#pk": PARTITION_KEY,
                    "#status": "status",
                    "#updated_at": "updated_at",
                    "#agent": "agent_id",
                    "#token": "callback_token",
                    "#waiting": "waiting_for",
                },
                ExpressionAttributeValues={
                    ":queued": marshal(str(HandoffStatus.QUEUED)),
                    ":now": marshal(int(self._clock())),
                },
            )
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
                raise HandoffNotFound(session_id, handoff_id) from None
            raise
