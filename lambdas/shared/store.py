"""SessionStore: the typed data-access layer over the single DynamoDB table (seed 004, DDR-039).

Every Lambda that touches the table goes through :class:`SessionStore`; no handler builds a key
or an expression itself. :class:`DynamoSessionStore` implements it on a low-level boto3 client.

Usage::

    store = DynamoSessionStore(settings.table_name)   # module level: one client per container
    session = store.create_session("customer-1")
    turn = store.add_turn(session.session_id, "user", "Is volume 3 out yet?")
    page = store.list_turns(session.session_id, limit=20)
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final, Generic, Protocol, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from lambdas.shared import cursor as cursors
from lambdas.shared import keys
from lambdas.shared.errors import (
    AgentNotFound,
    AgentUnavailable,
    BatchWriteIncomplete,
    Conflict,
    ConnectionSuperseded,
    HandoffNotFound,
    InvalidCursor,
    InvalidInput,
    InvalidTransition,
    ReviewExpired,
    ReviewNotFound,
    ReviewNotPending,
    SessionClosed,
    SessionNotFound,
    UnexpectedStatus,
)
from lambdas.shared.records import (
    ALLOWED_SOURCES,
    AWAITING_CLEANUP,
    SESSION_SETTABLE_ATTRIBUTES,
    TURN_ACCEPTING,
    Agent,
    AgentStatus,
    CleanupCandidate,
    Connection,
    Handoff,
    HandoffStatus,
    Review,
    ReviewStatus,
    Role,
    Session,
    SessionRecord,
    SessionStatus,
    Summary,
    Turn,
    compress,
    record_from_item,
)
from lambdas.shared.schema import (
    AVAILABLE_AGENTS,
    CLEANUP,
    CUSTOMER_SESSIONS,
    PARTITION_KEY,
    SORT_KEY,
    TTL_ATTRIBUTE,
)
from lambdas.shared.serialize import AttributeValue, marshal, marshal_item, unmarshal_item

T = TypeVar("T")

MAX_PAGE_SIZE: Final = 100
MAX_ITEMS_PAGE_SIZE: Final = 1000
BATCH_SIZE: Final = 25  # BatchWriteItem's hard limit
MAX_AGENT_SKILLS: Final = 40  # keeps put_agent within TransactWriteItems' 100 actions
# DynamoDB's item limit is 400 KB; leave room for the other attributes of a turn.
MAX_COMPRESSED_CONTENT: Final = 350_000
MAX_ID_LENGTH: Final = 256

_STATUS_TIMESTAMP: Final[Mapping[SessionStatus, str]] = {
    SessionStatus.DISCONNECTED: "disconnected_at",
    SessionStatus.DELETED: "deleted_at",
    SessionStatus.ARCHIVED: "archived_at",
}

_CONDITION_FAILED: Final = "ConditionalCheckFailedException"
_TRANSACTION_CANCELED: Final = "TransactionCanceledException"


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a listing; pass ``next_cursor`` back to get the next one (None: last page)."""

    items: list[T]
    next_cursor: str | None = None


class SessionStore(Protocol):
    """The operations on MangaAssist state. Errors are the typed ones of ``errors.py``."""

    # Sessions
    def create_session(self, customer_id: str, *, metadata: Mapping[str, Any] | None = None) -> Session: ...
    def get_session(self, session_id: str, *, consistent: bool = True) -> Session | None: ...
    def list_customer_sessions(
        self, customer_id: str, *, limit: int = 10, cursor: str | None = None
    ) -> Page[Session]: ...
    def update_status(
        self,
        session_id: str,
        new_status: SessionStatus | str,
        *,
        expected: SessionStatus | str | None = None,
        if_connection: str | None = None,
        **attrs: Any,
    ) -> Session: ...
    def set_connection(self, session_id: str, connection_id: str) -> Session: ...
    def clear_connection(self, session_id: str, connection_id: str) -> bool: ...
    def sessions_awaiting_cleanup(
        self, older_than: int, *, limit: int = 100, cursor: str | None = None
    ) -> Page[CleanupCandidate]: ...

    # Turns and summaries
    def add_turn(self, session_id: str, role: Role | str, content: str) -> Turn: ...
    def list_turns(self, session_id: str, *, limit: int = 20, cursor: str | None = None) -> Page[Turn]: ...
    def turns_between(self, session_id: str, first: int, last: int) -> list[Turn]: ...
    def put_summary(
        self,
        session_id: str,
        summary_number: int,
        *,
        summary_text: str,
        window_start: int,
        window_end: int,
        turn_count_at_summary: int,
    ) -> Summary: ...
    def latest_summary(self, session_id: str) -> Summary | None: ...

    # Whole-partition operations
    def list_session_items(
        self, session_id: str, *, limit: int = 500, cursor: str | None = None
    ) -> Page[SessionRecord]: ...
    def invalidate(self, session_id: str, sk_prefixes: Sequence[str]) -> int: ...
    def delete_session_items(self, session_id: str, *, keep_meta: bool = True) -> int: ...

    # Handoffs
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
    ) -> Handoff: ...
    def get_handoff(self, session_id: str, handoff_id: str) -> Handoff | None: ...
    def latest_handoff(self, session_id: str) -> Handoff | None: ...
    def update_handoff(
        self,
        session_id: str,
        handoff_id: str,
        *,
        status: HandoffStatus | str | None = None,
        agent_id: str | None = None,
        execution_arn: str | None = None,
        expected_status: HandoffStatus | str | None = None,
    ) -> Handoff: ...

    # Reviews (approval gate)
    def put_review(
        self,
        state: str | Mapping[str, Any],
        *,
        requested_by: str,
        review_id: str | None = None,
        expires_in_seconds: int | None = None,
        task_token: str | None = None,
    ) -> Review: ...
    def get_review(self, review_id: str) -> Review | None: ...
    def decide_review(
        self,
        review_id: str,
        decision: ReviewStatus | str,
        *,
        decided_by: str,
        note: str | None = None,
    ) -> Review: ...

    # Agents
    def put_agent(self, agent: Agent) -> Agent: ...
    def get_agent(self, agent_id: str) -> Agent | None: ...
    def find_available_agent(self, skill: str, *, managers_only: bool = False) -> Agent | None: ...
    def reserve_agent(self, agent_id: str, session_id: str) -> Agent: ...
    def release_agent(self, agent_id: str, *, session_id: str | None = None) -> Agent: ...

    # WebSocket connections
    def put_connection(
        self,
        connection_id: str,
        *,
        session_id: str,
        customer_id: str,
        domain_name: str,
        stage: str,
    ) -> Connection: ...
    def get_connection(self, connection_id: str) -> Connection | None: ...
    def delete_connection(self, connection_id: str) -> Connection | None: ...


class _Expr:
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


class _Update:
    """An UpdateExpression under construction: SET / REMOVE / ADD clauses sharing one _Expr."""

    def __init__(self, expr: _Expr) -> None:
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


def _code(err: ClientError) -> str:
    return str(err.response.get("Error", {}).get("Code", ""))


def _old_item(err: ClientError) -> dict[str, Any] | None:
    """The item as it was when a condition failed (ReturnValuesOnConditionCheckFailure)."""
    item = err.response.get("Item")
    return unmarshal_item(item) if item else None


def _require_id(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_ID_LENGTH:
        raise InvalidInput(f"{what} must be a non-empty string of at most {MAX_ID_LENGTH} chars")
    return value


def _require_limit(limit: Any, maximum: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= maximum:
        raise InvalidInput(f"limit must be an int in 1..{maximum} (given {limit!r})")
    return limit


def _enum(kind: type[Any], value: Any, what: str) -> Any:
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(str(member) for member in kind)
        raise InvalidInput(f"{what} must be one of {allowed} (given {value!r})") from None


def _key_of(item: Mapping[str, Any], attributes: Sequence[str]) -> dict[str, Any]:
    return {name: item[name] for name in attributes}


class DynamoSessionStore:
    """:class:`SessionStore` on one DynamoDB table, through a low-level boto3 client.

    Keyword arguments (all optional):

    * ``client``: a boto3 DynamoDB client. Defaults to one created on first use (standard retry
      mode, region from the environment) and reused for the life of the store, so a
      module-level store makes one client per Lambda container.
    * ``clock``: returns the time in epoch seconds; defaults to ``time.time``. Every timestamp,
      TTL and expiry check uses it.
    * ``sleep``: waits between BatchWriteItem retries; defaults to ``time.sleep``.
    * ``rand``: returns a float in [0, 1) for backoff jitter; defaults to ``random.random``.
    * ``ttl_hours``: defaults to 24. Sessions, turns, summaries, handoffs, connections and
      agents get ``ttl = now + ttl_hours``; a session's TTL slides forward with every turn, and
      an agent's with every write (an agent not heard from for that long disappears).
    * ``review_ttl_days``: defaults to 7. Reviews get ``ttl = created_at + review_ttl_days``
      and, unless told otherwise, ``expires_at`` at the same moment.
    * ``cleanup_shards``: defaults to 8. Number of CleanupIndex partitions a session is hashed
      onto (crc32 of its id). Changing it strands sessions already in a shard >= the new count
      until they leave the index, so only ever increase it.
    * ``max_batch_retries``: defaults to 8. How often one BatchWriteItem chunk is retried
      while DynamoDB returns UnprocessedItems, before BatchWriteIncomplete is raised.
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
        ttl_hours: int = 24,
        review_ttl_days: int = 7,
        cleanup_shards: int = 8,
        max_batch_retries: int = 8,
        backoff_base_seconds: float = 0.05,
        backoff_cap_seconds: float = 5.0,
    ) -> None:
        if not table_name:
            raise ValueError("table_name must be the name of the sessions table (given '')")
        for name, value, low in (
            ("ttl_hours", ttl_hours, 1),
            ("review_ttl_days", review_ttl_days, 1),
            ("cleanup_shards", cleanup_shards, 1),
            ("max_batch_retries", max_batch_retries, 0),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an int >= {low} (given {value!r})")
        if backoff_base_seconds < 0 or backoff_cap_seconds < backoff_base_seconds:
            raise ValueError(
                "backoff must satisfy 0 <= backoff_base_seconds <= backoff_cap_seconds "
                f"(given {backoff_base_seconds}, {backoff_cap_seconds})"
            )
        self.table_name = table_name
        self._client = client
        self._client_lock = threading.Lock()
        self._clock = clock
        self._sleep = sleep
        self._rand = rand
        self.ttl_seconds = ttl_hours * 3600
        self.review_ttl_seconds = review_ttl_days * 86400
        self.cleanup_shards = cleanup_shards
        self.max_batch_retries = max_batch_retries
        self._backoff_base = backoff_base_seconds
        self._backoff_cap = backoff_cap_seconds

    # ------------------------------------------------------------------ plumbing

    @property
    def client(self) -> Any:
        """The boto3 DynamoDB client, created on first use."""
        if self._client is None:
            with self._client_lock:
                if self._client is None:
                    self._client = boto3.client("dynamodb", config=Config(retries={"mode": "standard"}))
        return self._client

    def _now(self) -> int:
        return int(self._clock())

    def _get(self, key: keys.Key, *, consistent: bool = True) -> dict[str, Any] | None:
        resp = self.client.get_item(TableName=self.table_name, Key=marshal_item(key), ConsistentRead=consistent)
        item = resp.get("Item")
        return unmarshal_item(item) if item else None

    def _put_new(self, item: Mapping[str, Any], *, return_old: bool = False) -> None:
        """PutItem that never overwrites; raises the ClientError when the key exists."""
        expr = _Expr()
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
        update: _Update,
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
            return items, cursors.encode(scope, _key_of(items[-1], key_attributes))
        last = resp.get("LastEvaluatedKey")
        if last:  # the 1 MB page limit cut the page short
            return items, cursors.encode(scope, unmarshal_item(last))
        return items, None

    def _backoff(self, attempt: int) -> float:
        return self._rand() * min(self._backoff_cap, self._backoff_base * 2**attempt)

    def _batch_delete(self, item_keys: Sequence[keys.Key]) -> int:
        """Delete ``item_keys`` in BatchWriteItem chunks of 25; returns how many were deleted.

        UnprocessedItems are retried with exponential backoff and full jitter, at most
        ``max_batch_retries`` times per chunk; then BatchWriteIncomplete says how many are left.
        """
        deleted = 0
        for start in range(0, len(item_keys), BATCH_SIZE):
            chunk = item_keys[start : start + BATCH_SIZE]
            requests: list[dict[str, Any]] = [{"DeleteRequest": {"Key": marshal_item(k)}} for k in chunk]
            attempt = 0
            while requests:
                resp = self.client.batch_write_item(RequestItems={self.table_name: requests})
                unprocessed = resp.get("UnprocessedItems", {}).get(self.table_name, [])
                deleted += len(requests) - len(unprocessed)
                requests = unprocessed
                if not requests:
                    break
                if attempt >= self.max_batch_retries:
                    never_sent = len(item_keys) - (start + len(chunk))
                    raise BatchWriteIncomplete(len(requests) + never_sent, deleted)
                self._sleep(self._backoff(attempt))
                attempt += 1
        return deleted

    def _partition_keys(self, pk: str, sk_prefix: str | None = None) -> list[keys.Key]:
        """Keys (only) of the items of partition ``pk``, optionally under one SK prefix."""
        expr = _Expr()
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
        expr = _Expr()
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

    # ------------------------------------------------------------------ sessions

    def create_session(self, customer_id: str, *, metadata: Mapping[str, Any] | None = None) -> Session:
        """A new active session with a uuid4 id; one conditional PutItem that never overwrites."""
        _require_id(customer_id, "customer_id")
        if metadata is not None and not isinstance(metadata, Mapping):
            raise InvalidInput("metadata must be an object")
        now = self._now()
        session = Session(
            session_id=str(uuid.uuid4()),
            customer_id=customer_id,
            status=SessionStatus.ACTIVE,
            turn_count=0,
            created_at=now,
            updated_at=now,
            ttl=now + self.ttl_seconds,
            metadata=dict(metadata or {}),
        )
        try:
            self._put_new(session.to_item())
        except ClientError as err:
            if _code(err) == _CONDITION_FAILED:
                raise Conflict(f"session {session.session_id!r} exists already") from None
            raise
        return session

    def get_session(self, session_id: str, *, consistent: bool = True) -> Session | None:
        """The session, or None. ``consistent=False`` halves the read cost, may lag a write."""
        _require_id(session_id, "session_id")
        item = self._get(keys.session_key(session_id), consistent=consistent)
        return Session.from_item(item) if item else None

    def list_customer_sessions(self, customer_id: str, *, limit: int = 10, cursor: str | None = None) -> Page[Session]:
        """A customer's sessions (every status), most recently updated first, via GSI1.

        The index is eventually consistent and ordered by ``updated_at``, which every turn
        bumps: a session that gets a turn while the caller pages may move to the front.
        """
        _require_id(customer_id, "customer_id")
        _require_limit(limit, MAX_PAGE_SIZE)
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
        expr = _Expr()
        items, next_cursor = self._query_page(
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
        _require_id(session_id, "session_id")
        new = _enum(SessionStatus, new_status, "status")
        want = None if expected is None else _enum(SessionStatus, expected, "expected")
        unknown = set(attrs) - SESSION_SETTABLE_ATTRIBUTES
        if unknown:
            raise InvalidInput(
                f"update_status cannot set {sorted(unknown)}; settable: {sorted(SESSION_SETTABLE_ATTRIBUTES)}"
            )
        for name, value in attrs.items():
            kind = int if name.endswith("_at") else str
            if value is not None and (isinstance(value, bool) or not isinstance(value, kind)):
                raise InvalidInput(f"{name} must be {'epoch seconds' if kind is int else 'a string'}")
        sources = ALLOWED_SOURCES[new]
        if want is not None and want not in sources:
            raise InvalidTransition(session_id, want, new)

        now = self._now()
        values = dict(attrs)
        stamp = _STATUS_TIMESTAMP.get(new)
        if stamp is not None and values.get(stamp) is None:
            values[stamp] = now
        expr = _Expr()
        update = _Update(expr)
        update.set("status", str(new))
        update.set("updated_at", now)
        for name, value in sorted(values.items()):
            update.set(name, value)
        if new in AWAITING_CLEANUP:
            update.set(CLEANUP.partition_key, keys.cleanup_shard(session_id, self.cleanup_shards))
            update.set(CLEANUP.sort_key, values[_STATUS_TIMESTAMP[new]])
        else:
            update.remove(CLEANUP.partition_key)
            update.remove(CLEANUP.sort_key)
        status = expr.n("status")
        allowed = ", ".join(expr.v(str(s)) for s in sorted(sources))
        condition = f"attribute_exists({expr.n(PARTITION_KEY)}) AND {status} IN ({allowed})"
        if want is not None:
            condition += f" AND {status} = {expr.v(str(want))}"
        if if_connection is not None:
            _require_id(if_connection, "if_connection")
            condition += f" AND {expr.n('connection_id')} = {expr.v(if_connection)}"
        try:
            item = self._update(keys.session_key(session_id), update, condition)
        except ClientError as err:
            if _code(err) != _CONDITION_FAILED:
                raise
            old = _old_item(err)
            if old is None:
                raise SessionNotFound(session_id) from None
            current = str(old.get("status"))
            if current not in sources:
                raise InvalidTransition(session_id, current, new) from None
            if want is not None and current != want:
                raise UnexpectedStatus(session_id, current, new, want) from None
            if if_connection is not None and old.get("connection_id") != if_connection:
                raise ConnectionSuperseded(session_id, if_connection) from None
            raise Conflict(f"session {session_id!r} changed concurrently; retry") from None
        return Session.from_item(item)

    def set_connection(self, session_id: str, connection_id: str) -> Session:
        """Record the session's live WebSocket connection (replacing any previous one)."""
        _require_id(session_id, "session_id")
        _require_id(connection_id, "connection_id")
        expr = _Expr()
        update = _Update(expr)
        update.set("connection_id", connection_id)
        update.set("updated_at", self._now())
        accepted = ", ".join(expr.v(str(s)) for s in sorted(TURN_ACCEPTING))
        condition = f"attribute_exists({expr.n(PARTITION_KEY)}) AND {expr.n('status')} IN ({accepted})"
        try:
            item = self._update(keys.session_key(session_id), update, condition)
        except ClientError as err:
            if _code(err) != _CONDITION_FAILED:
                raise
            old = _old_item(err)
            if old is None:
                raise SessionNotFound(session_id) from None
            raise SessionClosed(session_id, str(old.get("status"))) from None
        return Session.from_item(item)

    def clear_connection(self, session_id: str, connection_id: str) -> bool:
        """Forget the session's connection if it is still ``connection_id``; True if it was.

        A reconnect may already have replaced it, in which case nothing changes.
        """
        _require_id(session_id, "session_id")
        _require_id(connection_id, "connection_id")
        expr = _Expr()
        update = _Update(expr)
        update.remove("connection_id")
        condition = f"{expr.n('connection_id')} = {expr.v(connection_id)}"
        try:
            self._update(keys.session_key(session_id), update, condition, return_values="NONE")
        except ClientError as err:
            if _code(err) != _CONDITION_FAILED:
                raise
            return False
        return True

    def sessions_awaiting_cleanup(
        self, older_than: int, *, limit: int = 100, cursor: str | None = None
    ) -> Page[CleanupCandidate]:
        """Sessions disconnected or deleted before ``older_than`` (epoch s, exclusive).

        One Query per CleanupIndex shard, oldest first within a shard, shards in order; never a
        Scan. The index is sparse, so it holds nothing but sessions waiting for cleanup.
        """
        if isinstance(older_than, bool) or not isinstance(older_than, int) or older_than < 0:
            raise InvalidInput(f"older_than must be epoch seconds (given {older_than!r})")
        _require_limit(limit, MAX_ITEMS_PAGE_SIZE)
        index = CLEANUP
        scope = f"cleanup:{older_than}:{self.cleanup_shards}"
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
            if shard >= self.cleanup_shards:
                raise InvalidCursor()
            if position:
                if (
                    position[index.partition_key] != keys.cleanup_shards(self.cleanup_shards)[shard]
                    or int(position[index.sort_key]) >= older_than
                    or position[SORT_KEY] != keys.META_SK
                    or not str(position[PARTITION_KEY]).startswith(keys.SESSION_PREFIX)
                ):
                    raise InvalidCursor()
                start = position

        found: list[CleanupCandidate] = []
        shard_names = keys.cleanup_shards(self.cleanup_shards)
        while shard < self.cleanup_shards and len(found) < limit:
            expr = _Expr()
            request: dict[str, Any] = {
                "TableName": self.table_name,
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
            resp = self.client.query(**request)
            found.extend(CleanupCandidate.from_item(unmarshal_item(item)) for item in resp.get("Items", []))
            last = resp.get("LastEvaluatedKey")
            if last:
                start = unmarshal_item(last)
            else:
                shard, start = shard + 1, None
        if shard >= self.cleanup_shards:
            return Page(found, None)
        resume: dict[str, Any] = {"shard": shard, **(start or {})}
        return Page(found, cursors.encode(scope, resume))

    # ------------------------------------------------------------------ turns and summaries

    def add_turn(self, session_id: str, role: Role | str, content: str) -> Turn:
        """Append a turn: two writes, no transaction.

        1. UpdateItem on META: ``ADD turn_count 1``, ``SET updated_at, ttl`` (the session's TTL
           slides), conditioned on the session existing in a status that accepts turns; the
           new counter value is the turn number, so numbers are unique under any concurrency.
        2. Conditional PutItem of the TURN item, content zlib-compressed.

        If the process dies between the two, the number is burnt: a gap, never a duplicate.
        Raises SessionNotFound or SessionClosed (status not active/handoff).
        """
        _require_id(session_id, "session_id")
        turn_role = _enum(Role, role, "role")
        if not isinstance(content, str):
            raise InvalidInput("content must be a string")
        if len(compress(content)) > MAX_COMPRESSED_CONTENT:
            raise InvalidInput(f"content is too large (max {MAX_COMPRESSED_CONTENT} bytes zipped)")
        now = self._now()
        expr = _Expr()
        update = _Update(expr)
        update.set("updated_at", now)
        update.set(TTL_ATTRIBUTE, now + self.ttl_seconds)
        update.add("turn_count", 1)
        accepted = ", ".join(expr.v(str(s)) for s in sorted(TURN_ACCEPTING))
        condition = f"attribute_exists({expr.n(PARTITION_KEY)}) AND {expr.n('status')} IN ({accepted})"
        try:
            attributes = self._update(keys.session_key(session_id), update, condition, return_values="UPDATED_NEW")
        except ClientError as err:
            if _code(err) != _CONDITION_FAILED:
                raise
            old = _old_item(err)
            if old is None:
                raise SessionNotFound(session_id) from None
            raise SessionClosed(session_id, str(old.get("status"))) from None
        turn = Turn(
            session_id=session_id,
            turn_number=int(attributes["turn_count"]),
            role=turn_role,
            content=content,
            created_at=now,
            ttl=now + self.ttl_seconds,
        )
        try:
            self._put_new(turn.to_item())
        except ClientError as err:
            if _code(err) == _CONDITION_FAILED:
                raise Conflict(f"turn {turn.turn_number} of session {session_id!r} exists already") from None
            raise
        return turn

    def list_turns(self, session_id: str, *, limit: int = 20, cursor: str | None = None) -> Page[Turn]:
        """The newest ``limit`` (1..100) turns before the cursor, in chronological order.

        ``next_cursor`` leads to the next older page; it is None on the oldest page.
        """
        _require_id(session_id, "session_id")
        _require_limit(limit, MAX_PAGE_SIZE)
        pk = keys.session_pk(session_id)
        scope = f"turns:{session_id}"
        start = None
        if cursor is not None:
            start = cursors.decode(cursor, scope, {PARTITION_KEY: str, SORT_KEY: str})
            if start[PARTITION_KEY] != pk or not keys.is_turn_sk(str(start[SORT_KEY])):
                raise InvalidCursor("it was issued for another session")
        expr = _Expr()
        items, next_cursor = self._query_page(
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
        _require_id(session_id, "session_id")
        for name, value in (("first", first), ("last", last)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInput(f"{name} must be a turn number >= 1 (given {value!r})")
        if first > last:
            raise InvalidInput(f"first must be <= last (given {first}, {last})")
        expr = _Expr()
        return [
            Turn.from_item(item)
            for item in self._query(
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
        _require_id(session_id, "session_id")
        if not isinstance(summary_number, int) or summary_number < 1:
            raise InvalidInput(f"summary_number must be >= 1 (given {summary_number!r})")
        if not 1 <= window_start <= window_end:
            raise InvalidInput(f"window must satisfy 1 <= start <= end (given {window_start}, {window_end})")
        now = self._now()
        summary = Summary(
            session_id=session_id,
            summary_number=summary_number,
            summary_text=summary_text,
            window_start=window_start,
            window_end=window_end,
            turn_count_at_summary=turn_count_at_summary,
            created_at=now,
            ttl=now + self.ttl_seconds,
        )
        try:
            self._put_new(summary.to_item(), return_old=True)
        except ClientError as err:
            old = _old_item(err) if _code(err) == _CONDITION_FAILED else None
            if old is None:
                raise
            return Summary.from_item(old)
        return summary

    def latest_summary(self, session_id: str) -> Summary | None:
        """The highest-numbered summary of the session, or None."""
        _require_id(session_id, "session_id")
        item = self._latest(session_id, keys.SUMMARY_PREFIX)
        return Summary.from_item(item) if item else None

    # ------------------------------------------------------------------ whole partition

    def list_session_items(
        self, session_id: str, *, limit: int = 500, cursor: str | None = None
    ) -> Page[SessionRecord]:
        """Every record of a session partition (META, turns, summaries, handoffs), by SK.

        For the archive: page through until ``next_cursor`` is None.
        """
        _require_id(session_id, "session_id")
        _require_limit(limit, MAX_ITEMS_PAGE_SIZE)
        pk = keys.session_pk(session_id)
        scope = f"items:{session_id}"
        start = None
        if cursor is not None:
            start = cursors.decode(cursor, scope, {PARTITION_KEY: str, SORT_KEY: str})
            if start[PARTITION_KEY] != pk:
                raise InvalidCursor("it was issued for another session")
        expr = _Expr()
        items, next_cursor = self._query_page(
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
        _require_id(session_id, "session_id")
        if isinstance(sk_prefixes, str) or not sk_prefixes:
            raise InvalidInput("sk_prefixes must be a non-empty list of prefixes")
        for prefix in sk_prefixes:
            if not isinstance(prefix, str) or not prefix.startswith(keys.SESSION_CHILD_PREFIXES):
                raise InvalidInput(f"sk prefix {prefix!r} must start with one of {keys.SESSION_CHILD_PREFIXES}")
        pk = keys.session_pk(session_id)
        targets: dict[str, keys.Key] = {}
        for prefix in sk_prefixes:
            for k in self._partition_keys(pk, prefix):
                targets[k[SORT_KEY]] = k
        return self._batch_delete(list(targets.values()))

    def delete_session_items(self, session_id: str, *, keep_meta: bool = True) -> int:
        """Delete every item of a session partition (META too unless ``keep_meta``).

        Keys-only Query pages + ceil(N/25) BatchWriteItem calls; META goes last. Safe to run
        again after BatchWriteIncomplete. Returns how many items were deleted.
        """
        _require_id(session_id, "session_id")
        all_keys = self._partition_keys(keys.session_pk(session_id))
        children = [k for k in all_keys if k[SORT_KEY] != keys.META_SK]
        meta = [k for k in all_keys if k[SORT_KEY] == keys.META_SK]
        return self._batch_delete(children if keep_meta else children + meta)

    # ------------------------------------------------------------------ handoffs

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
        """A new handoff record (never overwrites; Conflict if ``handoff_id`` is taken).

        ``handoff_id`` defaults to ``<13-digit epoch ms>-<12 hex>`` so that SK order is creation
        order; give one (e.g. the execution name) to make retries idempotent-by-conflict.
        """
        _require_id(session_id, "session_id")
        _require_id(reason, "reason")
        now_seconds = self._clock()
        now = int(now_seconds)
        handoff = Handoff(
            session_id=session_id,
            handoff_id=_require_id(
                handoff_id or f"{int(now_seconds * 1000):013d}-{uuid.uuid4().hex[:12]}",
                "handoff_id",
            ),
            reason=reason,
            priority=priority,
            status=_enum(HandoffStatus, status, "handoff status"),
            created_at=now,
            updated_at=now,
            ttl=now + self.ttl_seconds,
            agent_id=agent_id,
            execution_arn=execution_arn,
        )
        try:
            self._put_new(handoff.to_item())
        except ClientError as err:
            if _code(err) == _CONDITION_FAILED:
                raise Conflict(f"handoff {handoff.handoff_id!r} exists already") from None
            raise
        return handoff

    def get_handoff(self, session_id: str, handoff_id: str) -> Handoff | None:
        _require_id(session_id, "session_id")
        _require_id(handoff_id, "handoff_id")
        item = self._get(keys.handoff_key(session_id, handoff_id))
        return Handoff.from_item(item) if item else None

    def latest_handoff(self, session_id: str) -> Handoff | None:
        """The most recently created handoff of the session, or None."""
        _require_id(session_id, "session_id")
        item = self._latest(session_id, keys.HANDOFF_PREFIX)
        return Handoff.from_item(item) if item else None

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
        """Set the given fields of a handoff (None leaves a field alone) in one UpdateItem.

        With ``expected_status`` the write only happens from that status (Conflict otherwise).
        """
        _require_id(session_id, "session_id")
        _require_id(handoff_id, "handoff_id")
        changes = {"status": status, "agent_id": agent_id, "execution_arn": execution_arn}
        if all(value is None for value in changes.values()):
            raise InvalidInput("update_handoff needs status, agent_id or execution_arn")
        if status is not None:
            changes["status"] = str(_enum(HandoffStatus, status, "handoff status"))
        expr = _Expr()
        update = _Update(expr)
        for name, value in changes.items():
            if value is not None:
                update.set(name, value)
        update.set("updated_at", self._now())
        condition = f"attribute_exists({expr.n(PARTITION_KEY)})"
        want = None
        if expected_status is not None:
            want = str(_enum(HandoffStatus, expected_status, "expected_status"))
            condition += f" AND {expr.n('status')} = {expr.v(want)}"
        try:
            item = self._update(keys.handoff_key(session_id, handoff_id), update, condition)
        except ClientError as err:
            if _code(err) != _CONDITION_FAILED:
                raise
            old = _old_item(err)
            if old is None:
                raise HandoffNotFound(session_id, handoff_id) from None
            raise Conflict(f"handoff {handoff_id!r} is {old.get('status')!r}, not {want!r}") from None
        return Handoff.from_item(item)

    # ------------------------------------------------------------------ reviews

    def put_review(
        self,
        state: str | Mapping[str, Any],
        *,
        requested_by: str,
        review_id: str | None = None,
        expires_in_seconds: int | None = None,
        task_token: str | None = None,
    ) -> Review:
        """A pending review holding the paused workflow's ``state`` (JSON text or an object).

        ``expires_at`` defaults to now + review_ttl_days; ``ttl`` is never earlier than it.
        ``task_token`` (the paused Step Functions task's) stays on the record for the decider.
        """
        _require_id(requested_by, "requested_by")
        if isinstance(state, Mapping):
            state_text = json.dumps(state, sort_keys=True, separators=(",", ":"))
        elif isinstance(state, str):
            try:
                json.loads(state)
            except ValueError:
                raise InvalidInput("state must be JSON text or an object") from None
            state_text = state
        else:
            raise InvalidInput("state must be JSON text or an object")
        lifetime = self.review_ttl_seconds if expires_in_seconds is None else expires_in_seconds
        if isinstance(lifetime, bool) or not isinstance(lifetime, int) or lifetime < 1:
            raise InvalidInput(f"expires_in_seconds must be >= 1 (given {lifetime!r})")
        now = self._now()
        review = Review(
            review_id=_require_id(review_id or str(uuid.uuid4()), "review_id"),
            status=ReviewStatus.PENDING,
            state=state_text,
            requested_by=requested_by,
            created_at=now,
            expires_at=now + lifetime,
            ttl=now + max(lifetime, self.review_ttl_seconds),
            task_token=task_token or None,
        )
        try:
            self._put_new(review.to_item())
        except ClientError as err:
            if _code(err) == _CONDITION_FAILED:
                raise Conflict(f"review {review.review_id!r} exists already") from None
            raise
        return review

    def get_review(self, review_id: str) -> Review | None:
        _require_id(review_id, "review_id")
        item = self._get(keys.review_key(review_id))
        return Review.from_item(item) if item else None

    def decide_review(
        self,
        review_id: str,
        decision: ReviewStatus | str,
        *,
        decided_by: str,
        note: str | None = None,
    ) -> Review:
        """Approve or reject a review: one UpdateItem conditioned on pending and unexpired.

        Expiry is ``expires_at`` against the store's clock, not TTL (whose deletion lags).
        Raises ReviewNotFound, ReviewNotPending or ReviewExpired; an expired pending review is
        marked ``expired`` on the way (best effort).
        """
        _require_id(review_id, "review_id")
        _require_id(decided_by, "decided_by")
        outcome = _enum(ReviewStatus, decision, "decision")
        if outcome not in (ReviewStatus.APPROVED, ReviewStatus.REJECTED):
            raise InvalidInput(f"decision must be approved or rejected (given {decision!r})")
        now = self._now()
        expr = _Expr()
        update = _Update(expr)
        update.set("status", str(outcome))
        update.set("decided_at", now)
        update.set("decided_by", decided_by)
        if note is not None:
            update.set("note", note)
        status, now_value = expr.n("status"), expr.v(now)
        condition = (
            f"attribute_exists({expr.n(PARTITION_KEY)}) AND "
            f"{status} = {expr.v(str(ReviewStatus.PENDING))} AND "
            f"{expr.n('expires_at')} > {now_value}"
        )
        try:
            item = self._update(keys.review_key(review_id), update, condition)
        except ClientError as err:
            if _code(err) != _CONDITION_FAILED:
                raise
            old = _old_item(err)
            if old is None:
                raise ReviewNotFound(review_id) from None
            if old.get("status") != ReviewStatus.PENDING:
                raise ReviewNotPending(review_id, str(old.get("status"))) from None
            self._mark_review_expired(review_id, now)
            raise ReviewExpired(review_id, int(old["expires_at"])) from None
        return Review.from_item(item)

    def _mark_review_expired(self, review_id: str, now: int) -> None:
        expr = _Expr()
        update = _Update(expr)
        update.set("status", str(ReviewStatus.EXPIRED))
        status = expr.n("status")
        condition = f"{status} = {expr.v(str(ReviewStatus.PENDING))} AND {expr.n('expires_at')} <= {expr.v(now)}"
        try:
            self._update(keys.review_key(review_id), update, condition, return_values="NONE")
        except ClientError as err:
            if _code(err) != _CONDITION_FAILED:
                raise

    # ------------------------------------------------------------------ agents

    def put_agent(self, agent: Agent) -> Agent:
        """Create or replace an agent, keeping its AvailableAgentsIndex rows in step.

        Writes META plus one SKILL# row per skill while ``available`` and deletes rows of skills
        it no longer has (or all of them when busy/offline): one TransactWriteItems, or one
        PutItem when there are no rows to touch. The store sets ``updated_at``, ``ttl``,
        ``revision`` and, when available and not given, ``available_since`` = now.
        """
        _require_id(agent.agent_id, "agent_id")
        status = _enum(AgentStatus, agent.status, "agent status")
        skills = tuple(dict.fromkeys(agent.skills))
        if isinstance(agent.skills, str) or len(skills) > MAX_AGENT_SKILLS:
            raise InvalidInput(f"skills must be a list of at most {MAX_AGENT_SKILLS} strings")
        for skill in skills:
            _require_id(skill, "skill")
        now = self._now()
        stored = replace(
            agent,
            skills=skills,
            status=status,
            available_since=(agent.available_since or now) if status == AgentStatus.AVAILABLE else None,
            updated_at=now,
            ttl=now + self.ttl_seconds,
            revision=uuid.uuid4().hex,
        )
        wanted = stored.skill_items()
        wanted_sks = {item[SORT_KEY] for item in wanted}
        stale = [
            k
            for k in self._partition_keys(keys.agent_pk(agent.agent_id), keys.SKILL_PREFIX)
            if k[SORT_KEY] not in wanted_sks
        ]
        if not wanted and not stale:
            self.client.put_item(TableName=self.table_name, Item=marshal_item(stored.to_item()))
            return stored
        actions: list[dict[str, Any]] = [
            {"Put": {"TableName": self.table_name, "Item": marshal_item(item)}} for item in [stored.to_item(), *wanted]
        ]
        actions += [{"Delete": {"TableName": self.table_name, "Key": marshal_item(k)}} for k in stale]
        try:
            self.client.transact_write_items(TransactItems=actions)
        except ClientError as err:
            if _code(err) == _TRANSACTION_CANCELED:
                raise AgentUnavailable(agent.agent_id, "changed concurrently; retry") from None
            raise
        return stored

    def get_agent(self, agent_id: str) -> Agent | None:
        _require_id(agent_id, "agent_id")
        item = self._get(keys.agent_key(agent_id))
        return Agent.from_item(item) if item else None

    def find_available_agent(self, skill: str, *, managers_only: bool = False) -> Agent | None:
        """The longest-waiting available agent with ``skill`` (or None).

        Queries the sparse AvailableAgentsIndex (oldest ``available_since`` first), then reads
        each candidate's META consistently, because the index lags: the first candidate still
        available (and a manager, with ``managers_only``) is returned. Reserve it with
        :meth:`reserve_agent`, which may still lose to a concurrent caller (AgentUnavailable).
        """
        _require_id(skill, "skill")
        index = AVAILABLE_AGENTS
        expr = _Expr()
        candidates = self._query(
            IndexName=index.name,
            KeyConditionExpression=f"{expr.n(index.partition_key)} = {expr.v(skill)}",
            ScanIndexForward=True,
            Limit=10,
            **expr.params(),
        )
        for checked, row in enumerate(candidates):
            if checked >= 25:
                break
            agent = self.get_agent(str(row["agent_id"]))
            if agent is None or agent.status != AgentStatus.AVAILABLE:
                continue
            if managers_only and not agent.is_manager:
                continue
            return agent
        return None

    def reserve_agent(self, agent_id: str, session_id: str) -> Agent:
        """Make an available agent busy with ``session_id``; exactly one concurrent caller wins.

        One TransactWriteItems: META available -> busy, conditioned on the status and on the
        ``revision`` read just before (so a concurrent skill change cannot leave a stale index
        row), plus deleting the agent's SKILL# rows (out of the AvailableAgentsIndex).
        Raises AgentNotFound or AgentUnavailable (a Conflict).
        """
        _require_id(session_id, "session_id")
        current = self.get_agent(agent_id)
        if current is None:
            raise AgentNotFound(agent_id)
        if current.status != AgentStatus.AVAILABLE:
            raise AgentUnavailable(agent_id, f"is {current.status}")
        now = self._now()
        revision = uuid.uuid4().hex
        expr = _Expr()
        update = _Update(expr)
        update.set("status", str(AgentStatus.BUSY))
        update.set("current_session_id", session_id)
        update.set("updated_at", now)
        update.set(TTL_ATTRIBUTE, now + self.ttl_seconds)
        update.set("revision", revision)
        update.remove("available_since")
        condition = (
            f"{expr.n('status')} = {expr.v(str(AgentStatus.AVAILABLE))} AND "
            f"{expr.n('revision')} = {expr.v(current.revision)}"
        )
        actions: list[dict[str, Any]] = [
            {
                "Update": {
                    "TableName": self.table_name,
                    "Key": marshal_item(keys.agent_key(agent_id)),
                    "UpdateExpression": update.expression(),
                    "ConditionExpression": condition,
                    **expr.params(),
                }
            }
        ]
        actions += [
            {
                "Delete": {
                    "TableName": self.table_name,
                    "Key": marshal_item(keys.agent_skill_key(agent_id, skill)),
                }
            }
            for skill in current.skills
        ]
        try:
            self.client.transact_write_items(TransactItems=actions)
        except ClientError as err:
            if _code(err) == _TRANSACTION_CANCELED:
                raise AgentUnavailable(agent_id, "was reserved or changed concurrently") from None
            raise
        return replace(
            current,
            status=AgentStatus.BUSY,
            current_session_id=session_id,
            available_since=None,
            updated_at=now,
            ttl=now + self.ttl_seconds,
            revision=revision,
        )

    def release_agent(self, agent_id: str, *, session_id: str | None = None) -> Agent:
        """Make a busy agent available again (back into the AvailableAgentsIndex).

        With ``session_id``, only if the agent is serving that session. One TransactWriteItems:
        META busy -> available (conditioned like :meth:`reserve_agent`) plus the SKILL# rows.
        """
        current = self.get_agent(agent_id)
        if current is None:
            raise AgentNotFound(agent_id)
        if current.status != AgentStatus.BUSY:
            raise AgentUnavailable(agent_id, f"is {current.status}, not busy")
        if session_id is not None and current.current_session_id != session_id:
            raise AgentUnavailable(agent_id, f"is not serving session {session_id!r}")
        now = self._now()
        released = replace(
            current,
            status=AgentStatus.AVAILABLE,
            current_session_id=None,
            available_since=now,
            updated_at=now,
            ttl=now + self.ttl_seconds,
            revision=uuid.uuid4().hex,
        )
        expr = _Expr()
        condition = (
            f"{expr.n('status')} = {expr.v(str(AgentStatus.BUSY))} AND "
            f"{expr.n('revision')} = {expr.v(current.revision)}"
        )
        actions: list[dict[str, Any]] = [
            {
                "Put": {
                    "TableName": self.table_name,
                    "Item": marshal_item(released.to_item()),
                    "ConditionExpression": condition,
                    **expr.params(),
                }
            }
        ]
        actions += [
            {"Put": {"TableName": self.table_name, "Item": marshal_item(item)}} for item in released.skill_items()
        ]
        try:
            self.client.transact_write_items(TransactItems=actions)
        except ClientError as err:
            if _code(err) == _TRANSACTION_CANCELED:
                raise AgentUnavailable(agent_id, "was released or changed concurrently") from None
            raise
        return released

    def put_inbox_item(
        self,
        agent_id: str,
        *,
        session_id: str,
        handoff_id: str,
        reason: str,
        priority: str = "normal",
    ) -> bool:
        """Put a handoff into an agent's inbox (``AGENT#<id>`` / ``INBOX#<handoff_id>``), once.

        True when written; False when it was there already (a redelivered message). The item
        expires with the session TTL.
        """
        for name, value in (
            ("agent_id", agent_id),
            ("session_id", session_id),
            ("handoff_id", handoff_id),
            ("reason", reason),
        ):
            _require_id(value, name)
        now = self._now()
        item = {
            **keys.agent_inbox_key(agent_id, handoff_id),
            "agent_id": agent_id,
            "session_id": session_id,
            "handoff_id": handoff_id,
            "reason": reason,
            "priority": priority,
            "created_at": now,
            TTL_ATTRIBUTE: now + self.ttl_seconds,
        }
        try:
            self._put_new(item)
        except ClientError as err:
            if _code(err) == _CONDITION_FAILED:
                return False
            raise
        return True

    # ------------------------------------------------------------------ connections

    def put_connection(
        self,
        connection_id: str,
        *,
        session_id: str,
        customer_id: str,
        domain_name: str,
        stage: str,
    ) -> Connection:
        """Record a WebSocket connection (overwrites: a retried $connect is harmless)."""
        for name, value in (
            ("connection_id", connection_id),
            ("session_id", session_id),
            ("customer_id", customer_id),
            ("domain_name", domain_name),
            ("stage", stage),
        ):
            _require_id(value, name)
        now = self._now()
        connection = Connection(
            connection_id=connection_id,
            session_id=session_id,
            customer_id=customer_id,
            domain_name=domain_name,
            stage=stage,
            connected_at=now,
            ttl=now + self.ttl_seconds,
        )
        self.client.put_item(TableName=self.table_name, Item=marshal_item(connection.to_item()))
        return connection

    def get_connection(self, connection_id: str) -> Connection | None:
        _require_id(connection_id, "connection_id")
        item = self._get(keys.connection_key(connection_id))
        return Connection.from_item(item) if item else None

    def delete_connection(self, connection_id: str) -> Connection | None:
        """Delete a connection record; returns what it held (None if it was gone already)."""
        _require_id(connection_id, "connection_id")
        resp = self.client.delete_item(
            TableName=self.table_name,
            Key=marshal_item(keys.connection_key(connection_id)),
            ReturnValues="ALL_OLD",
        )
        item = resp.get("Attributes")
        return Connection.from_item(unmarshal_item(item)) if item else None


if TYPE_CHECKING:  # mypy proves the implementation satisfies the protocol

    def _implements(store: DynamoSessionStore) -> SessionStore:
        return store
