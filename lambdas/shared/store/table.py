"""The table core every aggregate module builds on: keys, expressions, conditional writes, batches, pages.

:class:`TableCore` holds what all aggregates share: the table name, the client, the clock, the
stage's TTL and cleanup sharding, and the plumbing (get, conditional put and update, paginated
queries, batch deletes under the shared retry policy). The aggregate modules add the operations
of one record type each; :class:`lambdas.shared.store.DynamoSessionStore` composes them.

Independent calls of one operation may run at once (:meth:`TableCore._together`): a caller then
waits one round trip instead of one per call, which is what a latency-bound path (the chat's
message path) is measured by. The calls run on one small thread pool per container; boto3's
clients are safe to share between threads.
"""

from __future__ import annotations

import contextvars
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar, overload

from botocore.exceptions import ClientError

from lambdas.shared import aws, keys
from lambdas.shared import cursor as cursors
from lambdas.shared.errors import BatchWriteIncomplete, InvalidInput
from lambdas.shared.records import SessionStatus
from lambdas.shared.retry import Backoff, Entry, send_with_retries
from lambdas.shared.schema import PARTITION_KEY, SORT_KEY
from lambdas.shared.serialize import AttributeValue, marshal, marshal_item, unmarshal_item

T = TypeVar("T")
A = TypeVar("A")
B = TypeVar("B")
C = TypeVar("C")

MAX_PAGE_SIZE: Final = 100
MAX_ITEMS_PAGE_SIZE: Final = 1000
BATCH_SIZE: Final = 25  # BatchWriteItem's hard limit
MAX_ID_LENGTH: Final = 256
#: Session lifetime when a store is built without the stage's setting (tests, tools).
DEFAULT_TTL_HOURS: Final = 24
DEFAULT_CLEANUP_SHARDS: Final = 8
#: Calls per BatchWriteItem chunk = retries + 1: the shared policy's bound of 4 calls.
DEFAULT_BATCH_RETRIES: Final = 3

STATUS_TIMESTAMP: Final[Mapping[SessionStatus, str]] = {
    SessionStatus.DISCONNECTED: "disconnected_at",
    SessionStatus.DELETED: "deleted_at",
    SessionStatus.ARCHIVED: "archived_at",
}

#: Calls one operation may have in flight besides the caller's own (the message path needs two).
MAX_CONCURRENT_CALLS: Final = 4

CONDITION_FAILED: Final = "ConditionalCheckFailedException"
TRANSACTION_CANCELED: Final = "TransactionCanceledException"


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a listing; pass ``next_cursor`` back to get the next one (None: last page)."""

    items: list[T]
    next_cursor: str | None = None


class Expr:
    """Collects ``ExpressionAttributeNames``/``Values`` while an expression is written.

    Every attribute goes through a ``#name`` placeholder, so reserved words (status, ttl, name)
    never matter.
    """

    def __init__(self) -> None:
        self._names: dict[str, str] = {}
        self._values: dict[str, AttributeValue] = {}

    def n(self, attribute: str) -> str:
        placeholder = f"#{attribute}"
        self._names[placeholder] = attribute
        return placeholder

    def key(self, name: str) -> str:
        """A placeholder for any name, such as a map key that is a connection id (``#k0``, ``#k1``, ...)."""
        placeholder = f"#k{sum(1 for p in self._names if p.startswith('#k'))}"
        self._names[placeholder] = name
        return placeholder

    def v(self, value: Any) -> str:
        placeholder = f":v{len(self._values)}"
        self._values[placeholder] = marshal(value)
        return placeholder

    def params(self) -> dict[str, Any]:
        params: dict[str, Any] = {}
        if self._names:
            params["ExpressionAttributeNames"] = dict(self._names)
        if self._values:
            params["ExpressionAttributeValues"] = dict(self._values)
        return params


class Update:
    """An UpdateExpression under construction: SET / REMOVE / ADD clauses sharing one Expr."""

    def __init__(self, expr: Expr) -> None:
        self.expr = expr
        self._set: list[str] = []
        self._remove: list[str] = []
        self._add: list[str] = []

    def set(self, attribute: str, value: Any) -> None:
        if value is None:
            self._remove.append(self.expr.n(attribute))
        else:
            self._set.append(f"{self.expr.n(attribute)} = {self.expr.v(value)}")

    def remove(self, attribute: str) -> None:
        self._remove.append(self.expr.n(attribute))

    def add(self, attribute: str, value: int) -> None:
        self._add.append(f"{self.expr.n(attribute)} {self.expr.v(value)}")

    def expression(self) -> str:
        parts = []
        if self._set:
            parts.append("SET " + ", ".join(self._set))
        if self._remove:
            parts.append("REMOVE " + ", ".join(self._remove))
        if self._add:
            parts.append("ADD " + ", ".join(self._add))
        return " ".join(parts)


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    """The container's pool for concurrent calls, created on first use."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=MAX_CONCURRENT_CALLS, thread_name_prefix="store")
        return _POOL


def _outcome(call: Callable[[], T]) -> tuple[T | None, BaseException | None]:
    try:
        return call(), None
    except BaseException as err:  # raised to the caller once every call has ended
        return None, err


def code_of(err: ClientError) -> str:
    return str(err.response.get("Error", {}).get("Code", ""))


def old_item(err: ClientError) -> dict[str, Any] | None:
    """The item as it was when a condition failed (ReturnValuesOnConditionCheckFailure)."""
    item = err.response.get("Item")
    return unmarshal_item(item) if item else None


def require_id(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_ID_LENGTH:
        raise InvalidInput(f"{what} must be a non-empty string of at most {MAX_ID_LENGTH} chars")
    return value


def require_limit(limit: Any, maximum: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= maximum:
        raise InvalidInput(f"limit must be an int in 1..{maximum} (given {limit!r})")
    return limit


def parse_enum(kind: type[Any], value: Any, what: str) -> Any:
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(str(member) for member in kind)
        raise InvalidInput(f"{what} must be one of {allowed} (given {value!r})") from None


def key_of(item: Mapping[str, Any], attributes: Sequence[str]) -> dict[str, Any]:
    return {name: item[name] for name in attributes}


class TableCore:
    """The shared state and plumbing of the store on one DynamoDB table (see the package docstring).

    Keyword arguments (all optional):

    * ``client``: a boto3 DynamoDB client. Defaults to the container's client from
      :func:`lambdas.shared.aws.client` (standard retry mode), created on first use; batch writes
      then use its single-attempt twin, so the shared retry policy alone bounds them.
    * ``clock``: returns the time in epoch seconds; defaults to ``time.time``. Every timestamp,
      TTL and expiry check uses it.
    * ``sleep``: waits between BatchWriteItem retries; defaults to ``time.sleep``.
    * ``rand``: returns a float in [0, 1) for backoff jitter; defaults to ``random.random``.
    * ``ttl_hours``: defaults to 24 (functions pass the stage's setting, see
      :mod:`lambdas.shared.settings`). Every record gets ``ttl = now + ttl_hours``;
      a session's TTL slides forward with every turn, and an agent's with every write.
    * ``cleanup_shards``: defaults to 8. Number of CleanupIndex partitions a session is hashed
      onto (crc32 of its id). Changing it strands sessions already in a shard >= the new count
      until they leave the index, so only ever increase it.
    * ``max_batch_retries``: defaults to 3. How often one BatchWriteItem chunk is retried while
      DynamoDB returns UnprocessedItems (or throttles the call), before BatchWriteIncomplete.
    * ``backoff_base_seconds`` / ``backoff_cap_seconds``: default to 0.05 and 5.0. Retry ``n``
      (from 0) sleeps ``rand() * min(cap, base * 2**n)``: exponential backoff, full jitter.
    """

    def __init__(
        self,
        table_name: str,
        *,
        client: Any | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        rand: Callable[[], float] = random.random,
        ttl_hours: int = DEFAULT_TTL_HOURS,
        cleanup_shards: int = DEFAULT_CLEANUP_SHARDS,
        max_batch_retries: int = DEFAULT_BATCH_RETRIES,
        backoff_base_seconds: float = 0.05,
        backoff_cap_seconds: float = 5.0,
    ) -> None:
        if not table_name:
            raise ValueError("table_name must be the name of the sessions table (given '')")
        for name, value, low, high in (
            ("ttl_hours", ttl_hours, 1, None),
            ("cleanup_shards", cleanup_shards, 1, None),
            ("max_batch_retries", max_batch_retries, 0, 9),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low or (high and value > high):
                bounds = f"in {low}..{high}" if high else f">= {low}"
                raise ValueError(f"{name} must be an int {bounds} (given {value!r})")
        if backoff_base_seconds < 0 or backoff_cap_seconds < backoff_base_seconds:
            raise ValueError(
                "backoff must satisfy 0 <= backoff_base_seconds <= backoff_cap_seconds "
                f"(given {backoff_base_seconds}, {backoff_cap_seconds})"
            )
        self.table_name = table_name
        self._client = client
        self._given_client = client
        self._client_lock = threading.Lock()
        self._clock = clock
        self._sleep = sleep
        self._rand = rand
        self.ttl_seconds = ttl_hours * 3600
        self.cleanup_shards = cleanup_shards
        self.max_batch_retries = max_batch_retries
        self._backoff_base = backoff_base_seconds
        self._backoff_cap = backoff_cap_seconds

    @property
    def client(self) -> Any:
        """The DynamoDB client, created on first use (standard retry mode)."""
        if self._client is None:
            with self._client_lock:
                if self._client is None:
                    self._client = aws.client("dynamodb")
        return self._client

    @property
    def batch_client(self) -> Any:
        """The client of BatchWriteItem: single-attempt, since the shared retry policy retries it.

        A store given a ``client`` uses that one for everything.
        """
        if self._given_client is not None:
            return self._given_client
        return aws.client("dynamodb", single_attempt=True)

    def _now(self) -> int:
        return int(self._clock())

    @overload
    def _together(self, first: Callable[[], A], second: Callable[[], B], /) -> tuple[A, B]: ...

    @overload
    def _together(
        self, first: Callable[[], A], second: Callable[[], B], third: Callable[[], C], /
    ) -> tuple[A, B, C]: ...

    def _together(self, *calls: Callable[[], Any]) -> tuple[Any, ...]:
        """Run independent calls at once and return their results in order: one round trip of wall time.

        The first runs in the caller's thread, the others on the container's pool with the
        caller's context (trace and log keys). Every call ends before this returns, so none is
        left running behind an error; then the first error in argument order is raised.
        """
        started: list[Future[tuple[Any, BaseException | None]]] = [
            _pool().submit(contextvars.copy_context().run, _outcome, call) for call in calls[1:]
        ]
        outcomes = [_outcome(calls[0]), *(future.result() for future in started)]
        for _, error in outcomes:
            if error is not None:
                raise error
        return tuple(value for value, _ in outcomes)

    def _get(self, key: keys.Key, *, consistent: bool = True) -> dict[str, Any] | None:
        resp = self.client.get_item(TableName=self.table_name, Key=marshal_item(key), ConsistentRead=consistent)
        item = resp.get("Item")
        return unmarshal_item(item) if item else None

    def _put_new(self, item: Mapping[str, Any], *, return_old: bool = False) -> None:
        """PutItem that never overwrites; raises the ClientError when the key exists."""
        expr = Expr()
        params: dict[str, Any] = {
            "TableName": self.table_name,
            "Item": marshal_item(item),
            "ConditionExpression": f"attribute_not_exists({expr.n(PARTITION_KEY)})",
            **expr.params(),
        }
        if return_old:
            params["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
        self.client.put_item(**params)

    def _update(
        self,
        key: keys.Key,
        update: Update,
        condition: str,
        *,
        return_values: str = "ALL_NEW",
    ) -> dict[str, Any]:
        """Conditional UpdateItem; on failure the ClientError carries the old item."""
        resp = self.client.update_item(
            TableName=self.table_name,
            Key=marshal_item(key),
            UpdateExpression=update.expression(),
            ConditionExpression=condition,
            ReturnValues=return_values,
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
            **update.expr.params(),
        )
        return unmarshal_item(resp.get("Attributes", {}))

    def _query(self, **params: Any) -> Iterator[dict[str, Any]]:
        """Every item a Query returns, following LastEvaluatedKey."""
        params = {"TableName": self.table_name, **params}
        while True:
            resp = self.client.query(**params)
            for item in resp.get("Items", []):
                yield unmarshal_item(item)
            last = resp.get("LastEvaluatedKey")
            if not last:
                return
            params["ExclusiveStartKey"] = last

    def _query_page(
        self,
        params: dict[str, Any],
        *,
        limit: int,
        scope: str,
        key_attributes: Sequence[str],
        start: Mapping[str, Any] | None,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One page of at most ``limit`` items and the cursor after it.

        Asks for ``limit + 1`` items so that a full last page gets no cursor (no empty page);
        the cursor is the key of the last item returned.
        """
        request = {"TableName": self.table_name, **params, "Limit": limit + 1}
        if start is not None:
            request["ExclusiveStartKey"] = marshal_item(start)
        resp = self.client.query(**request)
        items = [unmarshal_item(item) for item in resp.get("Items", [])]
        if len(items) > limit:
            items = items[:limit]
            return items, cursors.encode(scope, key_of(items[-1], key_attributes))
        last = resp.get("LastEvaluatedKey")
        if last:  # the 1 MB page limit cut the page short
            return items, cursors.encode(scope, unmarshal_item(last))
        return items, None

    def _backoff(self, attempt: int) -> float:
        return self._batch_policy().delay(attempt)

    def _batch_policy(self) -> Backoff:
        return Backoff(
            attempts=self.max_batch_retries + 1,
            base_seconds=self._backoff_base,
            cap_seconds=self._backoff_cap,
            sleep=self._sleep,
            rand=self._rand,
        )

    def _batch_delete(self, item_keys: Sequence[keys.Key]) -> int:
        """Delete ``item_keys`` in BatchWriteItem chunks of 25; returns how many were deleted.

        UnprocessedItems (and a throttled call) are retried by the shared policy, at most
        ``max_batch_retries`` times per chunk; then BatchWriteIncomplete says how many are left.
        """
        policy = self._batch_policy()
        deleted = 0
        for start in range(0, len(item_keys), BATCH_SIZE):
            chunk = item_keys[start : start + BATCH_SIZE]
            requests = [Entry(str(n), {"DeleteRequest": {"Key": marshal_item(k)}}, 0) for n, k in enumerate(chunk)]
            left = send_with_retries(requests, self._write_batch, policy)
            deleted += len(chunk) - len(left)
            if left:
                never_sent = len(item_keys) - (start + len(chunk))
                raise BatchWriteIncomplete(len(left) + never_sent, deleted)
        return deleted

    def _write_batch(self, requests: list[dict[str, Any]]) -> list[bool]:
        """One BatchWriteItem; an ok-flag per request (False: handed back as unprocessed)."""
        resp = self.batch_client.batch_write_item(RequestItems={self.table_name: requests})
        unprocessed = resp.get("UnprocessedItems", {}).get(self.table_name, [])
        return [request not in unprocessed for request in requests]

    def _partition_keys(self, pk: str, sk_prefix: str | None = None) -> list[keys.Key]:
        """Keys (only) of the items of partition ``pk``, optionally under one SK prefix."""
        expr = Expr()
        condition = f"{expr.n(PARTITION_KEY)} = {expr.v(pk)}"
        if sk_prefix is not None:
            condition += f" AND begins_with({expr.n(SORT_KEY)}, {expr.v(sk_prefix)})"
        projection = f"{expr.n(PARTITION_KEY)}, {expr.n(SORT_KEY)}"
        return [
            keys.key(str(item[PARTITION_KEY]), str(item[SORT_KEY]))
            for item in self._query(
                KeyConditionExpression=condition,
                ProjectionExpression=projection,
                **expr.params(),
            )
        ]

    def _latest(self, session_id: str, prefix: str) -> dict[str, Any] | None:
        expr = Expr()
        resp = self.client.query(
            TableName=self.table_name,
            KeyConditionExpression=(
                f"{expr.n(PARTITION_KEY)} = {expr.v(keys.session_pk(session_id))} AND "
                f"begins_with({expr.n(SORT_KEY)}, {expr.v(prefix)})"
            ),
            ScanIndexForward=False,
            Limit=1,
            **expr.params(),
        )
        items = resp.get("Items", [])
        return unmarshal_item(items[0]) if items else None
