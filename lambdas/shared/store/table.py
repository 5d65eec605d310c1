"""The table core every aggregate builds on: expressions, conditional writes, transactions, batches, pages.

:class:`TableCore` holds what all aggregates share: the table name, the client, the clock, the
stage's TTL and cleanup sharding, and the plumbing. Each aggregate (:class:`Aggregate`) holds the
core and adds the operations of one record type; :class:`lambdas.shared.store.DynamoSessionStore`
composes them. Three helpers carry every conditional write, so no aggregate reads DynamoDB's
error shapes itself:

* :meth:`TableCore.update_if` / :meth:`TableCore.put_new`: a conditional write whose refusal is
  :class:`ConditionFailed` holding the item as it was (``ReturnValuesOnConditionCheckFailure``),
  None when there was none; :meth:`TableCore.update` turns that into the caller's "missing" or
  "changed" error.
* :class:`Transaction` and :meth:`TableCore.commit`: TransactWriteItems whose actions have names;
  a cancellation is :class:`Cancelled`, which names the actions whose condition failed.
* :func:`read_modify_write`: read, decide, write conditioned on what was read; a refused write
  (either of the two above) reads again, a bounded number of times.

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
from lambdas.shared.serialize import marshal_item, unmarshal_item
from lambdas.shared.store.expressions import Expr, Update

T = TypeVar("T")
A = TypeVar("A")
B = TypeVar("B")
C = TypeVar("C")
D = TypeVar("D")
E = TypeVar("E")

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

#: Calls one operation may have in flight besides the caller's own (the message admission needs four).
MAX_CONCURRENT_CALLS: Final = 4

CONDITION_FAILED: Final = "ConditionalCheckFailedException"
TRANSACTION_CANCELED: Final = "TransactionCanceledException"
#: A cancellation reason's code for an action whose condition did not hold.
CONDITION_CHECK_FAILED: Final = "ConditionalCheckFailed"


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a listing; pass ``next_cursor`` back to get the next one (None: last page)."""

    items: list[T]
    next_cursor: str | None = None


class Refused(Exception):
    """A conditional write or a transaction that did not happen because a condition did not hold."""


class ConditionFailed(Refused):
    """A conditional write's condition did not hold; ``old`` is the item as it was (None: there was none)."""

    def __init__(self, old: dict[str, Any] | None) -> None:
        super().__init__("the write's condition did not hold")
        self.old = old

    @property
    def missing(self) -> bool:
        return self.old is None


class Cancelled(Refused):
    """A transaction was cancelled; ``failed`` names its actions whose condition did not hold.

    None failed: it was cancelled for another reason (a concurrent transaction on one of its items).
    """

    def __init__(self, failed: frozenset[str], error: ClientError) -> None:
        super().__init__(f"transaction cancelled (failed: {sorted(failed) or 'none'})")
        self.failed = failed
        self.error = error


class Transaction:
    """The actions of one TransactWriteItems, each under a name unique in it.

    Names are how :class:`Cancelled` reports which condition failed, so no caller reads the
    cancellation reasons by position.
    """

    def __init__(self, table_name: str) -> None:
        self.table_name = table_name
        self._actions: dict[str, dict[str, Any]] = {}

    def _add(self, name: str, kind: str, body: dict[str, Any], condition: str | None, expr: Expr | None) -> None:
        if name in self._actions:
            raise ValueError(f"transaction action {name!r} is there already")
        action: dict[str, Any] = {"TableName": self.table_name, **body}
        if condition is not None:
            action["ConditionExpression"] = condition
        if expr is not None:
            action.update(expr.params())
        self._actions[name] = {kind: action}

    def put(
        self, name: str, item: Mapping[str, Any], *, condition: str | None = None, expr: Expr | None = None
    ) -> None:
        self._add(name, "Put", {"Item": marshal_item(item)}, condition, expr)

    def put_new(self, name: str, item: Mapping[str, Any]) -> None:
        """A Put that fails its condition when the key exists."""
        expr = Expr()
        self.put(name, item, condition=f"attribute_not_exists({expr.n(PARTITION_KEY)})", expr=expr)

    def update(self, name: str, key: keys.Key, update: Update, *, condition: str | None = None) -> None:
        body = {"Key": marshal_item(key), "UpdateExpression": update.expression()}
        self._add(name, "Update", body, condition, update.expr)

    def delete(self, name: str, key: keys.Key) -> None:
        self._add(name, "Delete", {"Key": marshal_item(key)}, None, None)

    def check(self, name: str, key: keys.Key, condition: str, expr: Expr) -> None:
        self._add(name, "ConditionCheck", {"Key": marshal_item(key)}, condition, expr)

    def names(self) -> list[str]:
        return list(self._actions)

    def items(self) -> list[dict[str, Any]]:
        """The actions as TransactWriteItems takes them, in the order they were added."""
        return list(self._actions.values())

    def __len__(self) -> int:
        return len(self._actions)


def read_modify_write(attempts: int, attempt: Callable[[], T], *, exhausted: Callable[[], Exception]) -> T:
    """Run ``attempt`` (read, decide, conditional write) until its write holds, at most ``attempts`` times.

    A write refused because what was read changed (:class:`ConditionFailed`, :class:`Cancelled`)
    reads again; an attempt that must not be repeated raises its own error instead. After the
    last refusal ``exhausted()`` is raised.
    """
    for _ in range(attempts):
        try:
            return attempt()
        except Refused:
            continue
    raise exhausted()


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


def _old_item(err: ClientError) -> dict[str, Any] | None:
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

    def now(self) -> int:
        return int(self._clock())

    def now_ms(self) -> int:
        return int(self._clock() * 1000)

    def clock(self) -> float:
        return self._clock()

    @overload
    def together(self, first: Callable[[], A], second: Callable[[], B], /) -> tuple[A, B]: ...

    @overload
    def together(
        self, first: Callable[[], A], second: Callable[[], B], third: Callable[[], C], /
    ) -> tuple[A, B, C]: ...

    @overload
    def together(
        self, first: Callable[[], A], second: Callable[[], B], third: Callable[[], C], fourth: Callable[[], D], /
    ) -> tuple[A, B, C, D]: ...

    @overload
    def together(
        self,
        first: Callable[[], A],
        second: Callable[[], B],
        third: Callable[[], C],
        fourth: Callable[[], D],
        fifth: Callable[[], E],
        /,
    ) -> tuple[A, B, C, D, E]: ...

    def together(self, *calls: Callable[[], Any]) -> tuple[Any, ...]:
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

    def get(self, key: keys.Key, *, consistent: bool = True) -> dict[str, Any] | None:
        resp = self.client.get_item(TableName=self.table_name, Key=marshal_item(key), ConsistentRead=consistent)
        item = resp.get("Item")
        return unmarshal_item(item) if item else None

    def put_new(self, item: Mapping[str, Any]) -> None:
        """PutItem that never overwrites; ConditionFailed (with the item there) when the key exists."""
        expr = Expr()
        try:
            self.client.put_item(
                TableName=self.table_name,
                Item=marshal_item(item),
                ConditionExpression=f"attribute_not_exists({expr.n(PARTITION_KEY)})",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
                **expr.params(),
            )
        except ClientError as err:
            if code_of(err) != CONDITION_FAILED:
                raise
            raise ConditionFailed(_old_item(err)) from None

    def update_if(self, key: keys.Key, update: Update, condition: str, *, returns: str = "ALL_NEW") -> dict[str, Any]:
        """Conditional UpdateItem; returns the attributes ``returns`` asks for.

        A condition that does not hold raises ConditionFailed with the item as it was.
        """
        try:
            resp = self.client.update_item(
                TableName=self.table_name,
                Key=marshal_item(key),
                UpdateExpression=update.expression(),
                ConditionExpression=condition,
                ReturnValues=returns,
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
                **update.expr.params(),
            )
        except ClientError as err:
            if code_of(err) != CONDITION_FAILED:
                raise
            raise ConditionFailed(_old_item(err)) from None
        return unmarshal_item(resp.get("Attributes", {}))

    def updated_if(self, key: keys.Key, update: Update, condition: str) -> bool:
        """Conditional UpdateItem whose refusal is an answer, not an error: whether the condition held and it wrote."""
        try:
            self.update_if(key, update, condition, returns="NONE")
        except ConditionFailed:
            return False
        return True

    def update(
        self,
        key: keys.Key,
        update: Update,
        condition: str,
        *,
        missing: Callable[[], Exception],
        changed: Callable[[dict[str, Any]], Exception],
        returns: str = "ALL_NEW",
    ) -> dict[str, Any]:
        """:meth:`update_if` whose refusal is the caller's error: ``missing()`` or ``changed(old item)``."""
        try:
            return self.update_if(key, update, condition, returns=returns)
        except ConditionFailed as failed:
            raise (missing() if failed.old is None else changed(failed.old)) from None

    def commit(self, transaction: Transaction) -> None:
        """Write ``transaction`` atomically; Cancelled names the actions whose condition failed.

        A transaction of one Put is written as that PutItem (half the write units), refused the
        same way.
        """
        actions = transaction.items()
        names = transaction.names()
        try:
            if len(actions) == 1 and "Put" in actions[0]:
                self.client.put_item(**actions[0]["Put"])
            else:
                self.client.transact_write_items(TransactItems=actions)
        except ClientError as err:
            code = code_of(err)
            if code == CONDITION_FAILED:
                raise Cancelled(frozenset(names), err) from None
            if code != TRANSACTION_CANCELED:
                raise
            reasons = err.response.get("CancellationReasons") or []
            failed = {
                name
                for name, reason in zip(names, reasons, strict=False)
                if reason.get("Code") == CONDITION_CHECK_FAILED
            }
            raise Cancelled(frozenset(failed), err) from None

    def query(self, **params: Any) -> Iterator[dict[str, Any]]:
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

    def count(self, params: dict[str, Any]) -> int:
        """How many items a Query matches (``Select: COUNT``, every page); eventually consistent."""
        params = {"TableName": self.table_name, **params, "Select": "COUNT"}
        total = 0
        while True:
            page = self.client.query(**params)
            total += int(page.get("Count", 0))
            if not page.get("LastEvaluatedKey"):
                return total
            params["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def query_page(
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

    def backoff(self, attempt: int) -> float:
        return self._batch_policy().delay(attempt)

    def sleep(self, seconds: float) -> None:
        self._sleep(seconds)

    def _batch_policy(self) -> Backoff:
        return Backoff(
            attempts=self.max_batch_retries + 1,
            base_seconds=self._backoff_base,
            cap_seconds=self._backoff_cap,
            sleep=self._sleep,
            rand=self._rand,
        )

    def batch_delete(self, item_keys: Sequence[keys.Key]) -> int:
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

    def partition_keys(self, pk: str, sk_prefix: str | None = None) -> list[keys.Key]:
        """Keys (only) of the items of partition ``pk``, optionally under one SK prefix."""
        expr = Expr()
        condition = f"{expr.n(PARTITION_KEY)} = {expr.v(pk)}"
        if sk_prefix is not None:
            condition += f" AND begins_with({expr.n(SORT_KEY)}, {expr.v(sk_prefix)})"
        projection = f"{expr.n(PARTITION_KEY)}, {expr.n(SORT_KEY)}"
        return [
            keys.key(str(item[PARTITION_KEY]), str(item[SORT_KEY]))
            for item in self.query(
                KeyConditionExpression=condition,
                ProjectionExpression=projection,
                **expr.params(),
            )
        ]

    def latest(self, session_id: str, prefix: str) -> dict[str, Any] | None:
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


class Aggregate:
    """One aggregate's operations over the shared :class:`TableCore` (composed, never inherited)."""

    def __init__(self, table: TableCore) -> None:
        self.table = table
