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

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from lambdas.shared import keys
from lambdas.shared.store.expressions import Expr, Update
from lambdas.shared.store.table import (
    Aggregate,
    ConditionFailed,
    Refused,
    read_modify_write,
    require_id,
)

#: API Gateway's maximum WebSocket connection duration: a slot older than this is certainly free.
MAX_CONNECTION_SECONDS: Final = 2 * 3600
#: Conditional writes one decision may try before it refuses (only concurrent writers lose one).
ATTEMPTS: Final = 4
CONNECTION_SCOPE: Final = "conn"
CUSTOMER_SCOPE: Final = "customer"
#: The stage's model-call buckets: ``LIMIT#model#<n>``/``RATE``.
MODEL_SCOPE: Final = "model"


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


class _Busy(Exception):
    """Concurrent writers kept moving the item for :data:`ATTEMPTS` rounds."""


def _or_busy(attempt: Callable[[], Admission]) -> Admission:
    """``attempt`` under :func:`read_modify_write`; refused, retry after a second, when it keeps losing races."""
    try:
        return read_modify_write(ATTEMPTS, attempt, exhausted=_Busy)
    except _Busy:
        return Admission(False, 1)


class Limits(Aggregate):
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
        return self._take(keys.rate_bucket_key(scope, subject), interval, tolerance)

    def take_model_call(self, *, per_second: int, buckets: int, pick: Callable[[int], int]) -> Admission:
        """Take one model call from the stage-wide cap of ``per_second``, split over ``buckets`` items.

        Each bucket admits ``per_second / buckets`` calls a second with a burst of one second's
        worth; ``pick(n)`` chooses a bucket in ``0..n-1`` (random in production). A refusing
        bucket is followed by one other, so a cap split over buckets refuses only when two are
        empty; the wait is the shorter of the two.
        """
        _require_positive(per_second, "per_second")
        if _require_positive(buckets, "buckets") > per_second:
            raise ValueError(f"buckets must be <= per_second (given {buckets} > {per_second})")
        share = per_second / buckets
        interval = math.ceil(1000 / share)
        tolerance = (max(1, math.floor(share)) - 1) * interval
        first = pick(buckets) % buckets
        order = [first] if buckets == 1 else [first, (first + 1 + pick(buckets - 1) % (buckets - 1)) % buckets]
        waits = []
        for bucket in order:
            admission = self._take(keys.rate_bucket_key(MODEL_SCOPE, str(bucket)), interval, tolerance)
            if admission.admitted:
                return admission
            waits.append(admission.retry_after_seconds)
        return Admission(False, min(waits))

    def _take(self, key: keys.Key, interval: int, tolerance: int) -> Admission:
        """One token from the bucket at ``key`` (see the module docstring)."""

        def attempt() -> Admission:
            now = self.table.now_ms()
            writes: tuple[Callable[[], int | None], ...] = (
                lambda: self._start_bucket(key, now, interval),
                lambda: self._advance_bucket(key, now, tolerance, interval),
            )
            for write in writes:
                old_tat = write()
                if old_tat is None:
                    return ADMITTED
                if old_tat > now + tolerance:
                    return Admission(False, _seconds_until(old_tat - tolerance, now))
            raise Refused("a concurrent take moved the bucket between the two writes")

        return _or_busy(attempt)

    def give_back_message_token(self, scope: str, subject: str, *, per_minute: int) -> None:
        """Return a token taken for a message that was refused for another reason, as if never taken.

        Moving ``tat`` back one interval undoes a take whichever of the two writes made it, and
        commutes with every other take, so concurrent messages lose nothing. Nothing happens when
        the bucket is gone (it expired: full anyway).
        """
        require_id(subject, f"{scope} id")
        interval = self._interval(per_minute)
        update = Update(Expr())
        tat = update.expr.n("tat")
        update.set_clause(f"{tat} = {tat} - {update.expr.v(interval)}")
        with contextlib.suppress(ConditionFailed):
            self._write(keys.rate_bucket_key(scope, subject), update, f"attribute_exists({tat})")

    def _interval(self, per_minute: int) -> int:
        """Milliseconds between two messages at ``per_minute``."""
        return math.ceil(60_000 / _require_positive(per_minute, "per_minute"))

    def _start_bucket(self, key: keys.Key, now: int, interval: int) -> int | None:
        """A new or idle bucket takes a token from full; None when it did, else the ``tat`` it holds."""
        update = Update(Expr())
        expr = update.expr
        tat = expr.n("tat")
        update.set_clause(f"{tat} = {expr.v(now + interval)}")
        update.set("ttl", self._bucket_ttl(now + interval))
        condition = f"attribute_not_exists({tat}) OR {tat} < {expr.v(now)}"
        return self._bucket_write(key, update, condition)

    def _advance_bucket(self, key: keys.Key, now: int, tolerance: int, interval: int) -> int | None:
        """A bucket in a burst takes a token; None when it did, else the ``tat`` it holds (-1: none)."""
        update = Update(Expr())
        expr = update.expr
        tat = expr.n("tat")
        update.set_clause(f"{tat} = {tat} + {expr.v(interval)}")
        update.set("ttl", self._bucket_ttl(now + tolerance + interval))
        condition = f"{tat} BETWEEN {expr.v(now)} AND {expr.v(now + tolerance)}"
        return self._bucket_write(key, update, condition)

    def _bucket_write(self, key: keys.Key, update: Update, condition: str) -> int | None:
        """One conditional bucket write: None when it held, else the ``tat`` seen (-1 when there is none)."""
        try:
            self._write(key, update, condition)
        except ConditionFailed as failed:
            return int(failed.old["tat"]) if failed.old and "tat" in failed.old else -1
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

        def attempt() -> Admission:
            now = self.table.now()
            update = Update(Expr())
            expr = update.expr
            live, slot = expr.n("live"), expr.key(connection_id)
            expires = now + MAX_CONNECTION_SECONDS
            update.set_clause(f"{live}.{slot} = {expr.v(expires)}")
            update.set("ttl", expires + 60)
            condition = (
                f"attribute_exists({live}) AND (attribute_exists({live}.{slot}) OR size({live}) < {expr.v(cap)})"
            )
            try:
                self._write(key, update, condition)
                return ADMITTED
            except ConditionFailed as failed:
                if not failed.old or "live" not in failed.old:
                    self._create_slots(key, connection_id, expires)
                    raise  # the first slot was created (by this call or another): take one again
                slots = {str(k): int(v) for k, v in failed.old["live"].items()}
            expired = {k: v for k, v in slots.items() if v <= now}
            if not expired:
                return Admission(False, max(1, min(slots.values()) - now))
            self._prune_slots(key, expired)
            raise Refused("expired slots were freed: take one again")

        return _or_busy(attempt)

    def close_connection_slot(self, customer_id: str, connection_id: str) -> None:
        """Free the slot of a connection that ended (nothing happens when it holds none)."""
        require_id(customer_id, "customer_id")
        require_id(connection_id, "connection_id")
        update = Update(Expr())
        live, slot = update.expr.n("live"), update.expr.key(connection_id)
        update.remove_path(f"{live}.{slot}")
        with contextlib.suppress(ConditionFailed):
            self._write(keys.connection_slots_key(customer_id), update, f"attribute_exists({live}.{slot})")

    def _create_slots(self, key: keys.Key, connection_id: str, expires: int) -> None:
        """The first slot of a customer creates the item (a concurrent creator wins and we retry)."""
        item: dict[str, Any] = {**key, "live": {connection_id: expires}, "ttl": expires + 60}
        with contextlib.suppress(ConditionFailed):
            self.table.put_new(item)

    def _prune_slots(self, key: keys.Key, expired: dict[str, int]) -> None:
        """Remove slots past their end, each only if it still holds the end that was seen."""
        update = Update(Expr())
        expr = update.expr
        live = expr.n("live")
        checks = []
        for connection_id, expires in sorted(expired.items()):
            name = expr.key(connection_id)
            update.remove_path(f"{live}.{name}")
            checks.append(f"{live}.{name} = {expr.v(expires)}")
        with contextlib.suppress(ConditionFailed):
            self._write(key, update, " AND ".join(checks))

    def _write(self, key: keys.Key, update: Update, condition: str) -> None:
        """One conditional UpdateItem that returns nothing; ConditionFailed holds the item as it was."""
        self.table.update_if(key, update, condition, returns="NONE")
