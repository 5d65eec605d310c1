"""The chat's per-caller limits: message-rate buckets and live-connection slots, kept in the table.

Rate: a token bucket of ``burst`` messages refilled at ``per_minute``, stored as one number, the
theoretical arrival time ``tat`` in epoch milliseconds (the generic cell rate algorithm, which is
a token bucket written as a time): a message is admitted while ``tat <= now + (burst - 1) *
interval`` and moves ``tat`` to ``max(tat, now) + interval``. Each decision is a conditional
UpdateItem whose condition is the decision itself, so two Lambdas taking the last token at once
cannot both win (no read-modify-write). An update expression has no ``max``, so the two cases are
two writes with disjoint conditions, tried in the order of how often they happen: first "the
bucket is new or idle" (``tat`` in the past: a person typing, whose messages come further apart
than the interval, always lands here, in one call), then, from the ``tat`` the failed condition
handed back, "the bucket is in a burst" (``tat`` within the tolerance: one more call). A full
bucket refuses after the first call, with the wait computed from that same ``tat``.

Slots: a map of a customer's live connection ids to the time each one must have ended (API
Gateway closes a WebSocket connection after two hours at the latest), grown by a conditional
update on the map's size; ``$disconnect`` frees a slot, and expired slots are pruned when the
cap is reached, so a lost ``$disconnect`` never locks a customer out for longer than two hours.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final

from botocore.exceptions import ClientError

from lambdas.shared import keys
from lambdas.shared.schema import PARTITION_KEY
from lambdas.shared.serialize import marshal_item
from lambdas.shared.store.table import CONDITION_FAILED, Expr, TableCore, code_of, old_item, require_id

#: API Gateway's maximum WebSocket connection duration: a slot older than this is certainly free.
MAX_CONNECTION_SECONDS: Final = 2 * 3600
#: Conditional writes one decision may try before it refuses (only concurrent writers lose one).
ATTEMPTS: Final = 4
CONNECTION_SCOPE: Final = "conn"
CUSTOMER_SCOPE: Final = "customer"


@dataclass(frozen=True)
class Admission:
    """A limit's decision: admitted, or refused with the whole seconds to wait before retrying."""

    admitted: bool
    retry_after_seconds: int = 0


ADMITTED: Final = Admission(True)


def _seconds_until(moment_ms: int, now_ms: int) -> int:
    """Whole seconds from ``now_ms`` to ``moment_ms``, at least 1 (a client cannot wait less)."""
    return max(1, math.ceil((moment_ms - now_ms) / 1000))


def _require_positive(value: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{what} must be an int >= 1 (given {value!r})")
    return value


class Limits(TableCore):
    """Rate buckets (``LIMIT#<scope>#<id>``/``RATE``) and connection slots (``.../CONNECTIONS``)."""

    def take_message_token(self, scope: str, subject: str, *, per_minute: int, burst: int) -> Admission:
        """Take one message from the bucket of ``subject``; refused when it is empty, with when to retry.

        One UpdateItem when the bucket is new or idle, or full; two during a burst (see the module
        docstring). Only a writer racing on the same bucket makes it try again, :data:`ATTEMPTS`
        rounds at most, and then it refuses (retry after a second) rather than wait.
        """
        require_id(subject, f"{scope} id")
        interval = self._interval(per_minute)
        tolerance = (_require_positive(burst, "burst") - 1) * interval
        key = keys.rate_bucket_key(scope, subject)
        for _ in range(ATTEMPTS):
            now = int(self._clock() * 1000)
            old_tat = self._start_bucket(key, now, interval)
            if old_tat is None:
                return ADMITTED
            if old_tat > now + tolerance:
                return Admission(False, _seconds_until(old_tat - tolerance, now))
            old_tat = self._advance_bucket(key, now, tolerance, interval)
            if old_tat is None:
                return ADMITTED
            if old_tat > now + tolerance:
                return Admission(False, _seconds_until(old_tat - tolerance, now))
        return Admission(False, 1)

    def give_back_message_token(self, scope: str, subject: str, *, per_minute: int) -> None:
        """Return a token taken for a message that was refused for another reason, as if never taken.

        Moving ``tat`` back one interval undoes a take whichever of the two writes made it, and
        commutes with every other take, so concurrent messages lose nothing. Nothing happens when
        the bucket is gone (it expired: full anyway).
        """
        require_id(subject, f"{scope} id")
        interval = self._interval(per_minute)
        expr = Expr()
        tat = expr.n("tat")
        try:
            self._raw_update(
                keys.rate_bucket_key(scope, subject),
                f"SET {tat} = {tat} - {expr.v(interval)}",
                f"attribute_exists({tat})",
                expr,
            )
        except ClientError as err:
            if code_of(err) != CONDITION_FAILED:
                raise

    def _interval(self, per_minute: int) -> int:
        """Milliseconds between two messages at ``per_minute``."""
        return math.ceil(60_000 / _require_positive(per_minute, "per_minute"))

    def _start_bucket(self, key: keys.Key, now: int, interval: int) -> int | None:
        """A new or idle bucket takes a token from full; None when it did, else the ``tat`` it holds."""
        expr = Expr()
        tat = expr.n("tat")
        values = f"{tat} = {expr.v(now + interval)}, {expr.n('ttl')} = {expr.v(self._bucket_ttl(now + interval))}"
        condition = f"attribute_not_exists({tat}) OR {tat} < {expr.v(now)}"
        return self._bucket_write(key, f"SET {values}", condition, expr)

    def _advance_bucket(self, key: keys.Key, now: int, tolerance: int, interval: int) -> int | None:
        """A bucket in a burst takes a token; None when it did, else the ``tat`` it holds (-1: none)."""
        expr = Expr()
        tat = expr.n("tat")
        ttl = self._bucket_ttl(now + tolerance + interval)
        update_expression = f"SET {tat} = {tat} + {expr.v(interval)}, {expr.n('ttl')} = {expr.v(ttl)}"
        condition = f"{tat} BETWEEN {expr.v(now)} AND {expr.v(now + tolerance)}"
        return self._bucket_write(key, update_expression, condition, expr)

    def _bucket_write(self, key: keys.Key, update_expression: str, condition: str, expr: Expr) -> int | None:
        """One conditional bucket write: None when it held, else the ``tat`` seen (-1 when there is none)."""
        try:
            self._raw_update(key, update_expression, condition, expr)
        except ClientError as err:
            if code_of(err) != CONDITION_FAILED:
                raise
            old = old_item(err)
            return int(old["tat"]) if old and "tat" in old else -1
        return None

    def _bucket_ttl(self, full_at_ms: int) -> int:
        """A bucket is full again at ``tat``; a minute later the item may go."""
        return math.ceil(full_at_ms / 1000) + 60

    def open_connection_slot(self, customer_id: str, connection_id: str, *, cap: int) -> Admission:
        """Hold a live-connection slot of ``customer_id`` for ``connection_id``; refused at ``cap``.

        Idempotent: a connection that holds a slot gets it again (a retried ``$connect``).
        """
        require_id(customer_id, "customer_id")
        require_id(connection_id, "connection_id")
        _require_positive(cap, "cap")
        key = keys.connection_slots_key(customer_id)
        for _ in range(ATTEMPTS):
            now = self._now()
            expr = Expr()
            live, slot = expr.n("live"), expr.key(connection_id)
            expires = now + MAX_CONNECTION_SECONDS
            update_expression = f"SET {live}.{slot} = {expr.v(expires)}, {expr.n('ttl')} = {expr.v(expires + 60)}"
            condition = (
                f"attribute_exists({live}) AND (attribute_exists({live}.{slot}) OR size({live}) < {expr.v(cap)})"
            )
            try:
                self._raw_update(key, update_expression, condition, expr)
                return ADMITTED
            except ClientError as err:
                if code_of(err) != CONDITION_FAILED:
                    raise
                old = old_item(err)
            if not old or "live" not in old:
                self._create_slots(key, connection_id, expires)
                continue
            slots = {str(k): int(v) for k, v in old["live"].items()}
            expired = {k: v for k, v in slots.items() if v <= now}
            if not expired:
                return Admission(False, max(1, min(slots.values()) - now))
            self._prune_slots(key, expired)
        return Admission(False, 1)

    def close_connection_slot(self, customer_id: str, connection_id: str) -> None:
        """Free the slot of a connection that ended (nothing happens when it holds none)."""
        require_id(customer_id, "customer_id")
        require_id(connection_id, "connection_id")
        expr = Expr()
        live, slot = expr.n("live"), expr.key(connection_id)
        try:
            self._raw_update(
                keys.connection_slots_key(customer_id),
                f"REMOVE {live}.{slot}",
                f"attribute_exists({live}.{slot})",
                expr,
            )
        except ClientError as err:
            if code_of(err) != CONDITION_FAILED:
                raise

    def _create_slots(self, key: keys.Key, connection_id: str, expires: int) -> None:
        """The first slot of a customer creates the item (a concurrent creator wins and we retry)."""
        item: dict[str, Any] = {**key, "live": {connection_id: expires}, "ttl": expires + 60}
        expr = Expr()
        try:
            self.client.put_item(
                TableName=self.table_name,
                Item=marshal_item(item),
                ConditionExpression=f"attribute_not_exists({expr.n(PARTITION_KEY)})",
                **expr.params(),
            )
        except ClientError as err:
            if code_of(err) != CONDITION_FAILED:
                raise

    def _prune_slots(self, key: keys.Key, expired: dict[str, int]) -> None:
        """Remove slots past their end, each only if it still holds the end that was seen."""
        expr = Expr()
        live = expr.n("live")
        removes, checks = [], []
        for connection_id, expires in sorted(expired.items()):
            name = expr.key(connection_id)
            removes.append(f"{live}.{name}")
            checks.append(f"{live}.{name} = {expr.v(expires)}")
        try:
            self._raw_update(key, "REMOVE " + ", ".join(removes), " AND ".join(checks), expr)
        except ClientError as err:
            if code_of(err) != CONDITION_FAILED:
                raise

    def _raw_update(self, key: keys.Key, update_expression: str, condition: str, expr: Expr) -> None:
        """One conditional UpdateItem; a failed condition hands back the item as it was."""
        self.client.update_item(
            TableName=self.table_name,
            Key=marshal_item(key),
            UpdateExpression=update_expression,
            ConditionExpression=condition,
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
            **expr.params(),
        )
