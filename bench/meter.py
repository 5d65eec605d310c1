"""Count what the functions of an embedded stage do, attributed to the invocation that did it.

Inside :meth:`Meter.installed` (within ``embedded.embedded_stage``) and while
:meth:`Meter.measuring`, every Lambda invocation the stage runs in-process is recorded as a
:class:`~bench.usage.Invocation`, and every AWS call a handler makes (whatever client, session or
code path made it: botocore's ``_make_api_call`` is wrapped) is counted against it:

* DynamoDB: read and write request units from the sizes of the items involved, read from the
  table around the call (moto reports a constant per call, see bench/store.py): a write bills the
  larger of the item before and after (a failed condition bills the item as it is), a GSI whose
  entry changes bills its own write (a new index key is a delete and a put), a read bills the
  full items whatever the projection, half for an eventually consistent read.
* Firehose records and their billed size, EventBridge events, SNS and SQS requests, WebSocket
  frames posted, by the payload each call carried.
* The model: tokens of every request and answer that passes the harness's Bedrock stub
  (:meth:`Meter.answering` wraps its answer function), whichever Bedrock operation asked.

Only calls made inside an invocation count: what the harness itself does (pumping the stream,
polling queues, invoking a route's function) stands for what AWS does on its own side.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import boto3
from boto3.dynamodb.types import TypeSerializer
from botocore.client import BaseClient
from botocore.exceptions import ClientError
from botocore.session import Session as BotocoreSession
from moto.awslambda.models import LambdaFunction
from moto.core.botocore_stubber import BotocoreStubber

from bench.store import item_size
from bench.usage import (
    CALL_LATENCY,
    DEFAULT_CALL_LATENCY,
    KB,
    FirehosePut,
    Invocation,
    Usage,
    chunks,
    firehose_billed_bytes,
    model_seconds,
    read_units,
    tokens,
    write_units,
)
from embedded import runtime as lambda_bridge

Item = Mapping[str, Any]  # an item in DynamoDB's wire format ({"PK": {"S": "..."}})

_WIRE_TYPES: Final = frozenset({"S", "N", "B", "SS", "NS", "BS", "M", "L", "NULL", "BOOL"})
_SERIALIZER: Final = TypeSerializer()
EVENT_CHUNK: Final = 64 * KB
WEBSOCKET_CHUNK: Final = 32 * KB
_SINGLE_WRITES: Final = frozenset({"PutItem", "UpdateItem", "DeleteItem"})


@dataclass(frozen=True)
class IndexSpec:
    """A global secondary index as the meter prices it."""

    name: str
    hash_key: str
    range_key: str | None
    projection: str  # ALL | KEYS_ONLY | INCLUDE
    non_key_attributes: tuple[str, ...] = ()


@dataclass(frozen=True)
class TableSpec:
    hash_key: str
    range_key: str | None
    indexes: tuple[IndexSpec, ...]

    @property
    def key_names(self) -> tuple[str, ...]:
        return tuple(k for k in (self.hash_key, self.range_key) if k)

    def key_of(self, item: Item) -> dict[str, Any]:
        return {name: wire(item[name]) for name in self.key_names}

    def index_entry(self, index: IndexSpec, item: Item | None) -> dict[str, Any] | None:
        """What ``item`` puts into ``index``: None when it lacks the index's keys (a sparse index)."""
        if item is None or index.hash_key not in item or (index.range_key and index.range_key not in item):
            return None
        if index.projection == "ALL":
            return dict(item)
        kept = {*self.key_names, index.hash_key, *([index.range_key] if index.range_key else [])}
        if index.projection == "INCLUDE":
            kept |= set(index.non_key_attributes)
        return {k: v for k, v in item.items() if k in kept}

    def index_write_units(self, index: IndexSpec, old: Item | None, new: Item | None) -> int:
        """Write units ``index`` bills when an item goes from ``old`` to ``new`` (None: absent)."""
        before, after = self.index_entry(index, old), self.index_entry(index, new)
        if before is None and after is None:
            return 0
        if before is None or after is None:
            return write_units(item_size(before or after or {}))
        keys = [index.hash_key, *([index.range_key] if index.range_key else [])]
        if any(before[k] != after[k] for k in keys):  # a new index key: delete the old entry, put the new
            return write_units(item_size(before)) + write_units(item_size(after))
        if before == after:
            return 0
        return write_units(max(item_size(before), item_size(after)))


@dataclass
class _Frame:
    """The invocation running now (invocations nest: the router invokes the summary generator)."""

    handler: str
    memory_mb: int
    cpu_start: float
    excluded_cpu: float = 0.0
    waiting: float = 0.0
    log_bytes: int = 0


@dataclass
class Meter:
    """Fills ``usage`` with what the stage's functions do (see the module docstring)."""

    usage: Usage
    region: str = "us-east-1"
    #: The stage's clock (epoch seconds): when each Firehose put happened, for its buffering.
    clock: Callable[[], float] = time.time
    active: bool = False
    _frames: list[_Frame] = field(default_factory=list)
    _internal: int = 0
    _tables: dict[str, TableSpec] = field(default_factory=dict)
    _ddb: Any = None
    _lock: threading.RLock = field(default_factory=threading.RLock)

    # ------------------------------------------------------------------ public

    @contextlib.contextmanager
    def installed(self) -> Iterator[Meter]:
        """Wrap the invocation, API call, moto and client-creation paths for the block (see module docstring)."""
        meter = self
        invoke_lambda = LambdaFunction._invoke_lambda
        make_api_call = BaseClient._make_api_call
        stub = BotocoreStubber.__call__
        create_client = BotocoreSession.create_client
        resolve_handler = lambda_bridge.resolve_handler

        def invoke(function: Any, event: Any = None) -> Any:
            if not meter.active:
                return invoke_lambda(function, event)
            frame = _Frame(str(function.handler), int(function.memory_size or 128), time.thread_time())
            meter._frames.append(frame)
            try:
                return invoke_lambda(function, event)
            finally:
                meter._frames.pop()
                local = time.thread_time() - frame.cpu_start - frame.excluded_cpu
                meter.usage.invocations.append(
                    Invocation(frame.handler, frame.memory_mb, max(0.0, local), frame.waiting, frame.log_bytes)
                )

        def api_call(client: Any, operation: str, params: dict[str, Any]) -> Any:
            if not meter._counting():
                return make_api_call(client, operation, params)
            return meter._call(make_api_call, client, operation, params)

        def moto_answers(stubber: Any, *args: Any, **kwargs: Any) -> Any:
            # moto's side of a call is AWS's work, not the function's: leave its CPU out.
            frame = meter._frames[-1] if meter._counting() else None
            started = time.thread_time()
            try:
                return stub(stubber, *args, **kwargs)
            finally:
                if frame is not None:
                    frame.excluded_cpu += time.thread_time() - started

        def new_client(session: Any, *args: Any, **kwargs: Any) -> Any:
            # The harness resets the functions' cached clients before every invocation; a warm
            # Lambda container has them already, so their creation is not the function's work.
            frame = meter._frames[-1] if meter._frames else None
            started = time.thread_time()
            try:
                return create_client(session, *args, **kwargs)
            finally:
                if frame is not None:
                    frame.excluded_cpu += time.thread_time() - started

        def resolve(handler: str) -> Any:
            # The first call imports the handler's module: a warm container has it imported.
            frame = meter._frames[-1] if meter._frames else None
            started = time.thread_time()
            try:
                return resolve_handler(handler)
            finally:
                if frame is not None:
                    frame.excluded_cpu += time.thread_time() - started

        with (
            _patched(lambda_bridge.__dict__, "resolve_handler", resolve),
            _patched(LambdaFunction, "_invoke_lambda", invoke),
            _patched(BaseClient, "_make_api_call", api_call),
            _patched(BotocoreStubber, "__call__", moto_answers),
            _patched(BotocoreSession, "create_client", new_client),
        ):
            self._ddb = boto3.client("dynamodb", region_name=self.region)
            yield self

    @contextlib.contextmanager
    def measuring(self) -> Iterator[Usage]:
        """Count inside the block only."""
        self.active = True
        try:
            yield self.usage
        finally:
            self.active = False

    def answering(self, answer: Callable[[dict[str, Any]], str]) -> Callable[[dict[str, Any]], str]:
        """Wrap the Bedrock stub's answer function so every model call is counted (tokens, wait)."""

        def counted(request: dict[str, Any]) -> str:
            reply = answer(request)
            if self._counting():
                frame = self._frames[-1]
                prompt = sum(len(str(block.get("text", ""))) for block in request.get("system") or [])
                blocks = [block for m in request.get("messages") or [] for block in m.get("content") or []]
                prompt += sum(len(str(block.get("text", ""))) for block in blocks)
                output = tokens(len(reply))
                self.usage.input_tokens += tokens(prompt)
                self.usage.output_tokens += output
                self.usage.model_calls[frame.handler] += 1
                frame.waiting += model_seconds(output)
            return reply

        return counted

    def log(self, text: str) -> None:
        """Count what a function logged (the log sink calls this for every write)."""
        if self._counting():
            self._frames[-1].log_bytes += len(text.encode())

    # ------------------------------------------------------------------ counting

    def _counting(self) -> bool:
        return self.active and bool(self._frames) and not self._internal

    def _call(self, make_api_call: Callable[..., Any], client: Any, operation: str, params: dict[str, Any]) -> Any:
        frame = self._frames[-1]
        service = client.meta.service_model.service_name
        self.usage.calls[f"{service}.{operation}"] += 1
        if service != "bedrock-runtime":  # the model's wait is counted by `answering`
            frame.waiting += CALL_LATENCY.get(f"{service}.{operation}", DEFAULT_CALL_LATENCY)
        started = time.thread_time()
        before = self._quietly(self._dynamodb_before, operation, params) if service == "dynamodb" else None
        frame.excluded_cpu += time.thread_time() - started
        failure: ClientError | None = None
        try:
            result = make_api_call(client, operation, params)
        except ClientError as error:  # a failed conditional write still bills; count, then raise
            failure, result = error, error.response
        started = time.thread_time()
        self._quietly(self._account, service, operation, params, result, before, failure is not None)
        frame.excluded_cpu += time.thread_time() - started
        if failure is not None:
            raise failure
        return result

    def _quietly(self, work: Callable[..., Any], *args: Any) -> Any:
        """Run the meter's own reads without counting them."""
        with self._lock:
            self._internal += 1
            try:
                return work(*args)
            finally:
                self._internal -= 1

    def _account(
        self, service: str, operation: str, params: dict[str, Any], result: Any, before: Any, failed: bool
    ) -> None:
        usage = self.usage
        if service == "dynamodb":
            self._dynamodb_after(operation, params, result, before, failed)
        elif service == "firehose":
            records = params.get("Records") or ([params["Record"]] if "Record" in params else [])
            sizes = [_size(record.get("Data", b"")) for record in records]
            usage.firehose_records += len(sizes)
            usage.firehose_billed_bytes += sum(firehose_billed_bytes(size) for size in sizes)
            usage.firehose_puts.append(FirehosePut(str(params.get("DeliveryStreamName")), self.clock(), sum(sizes)))
        elif service == "events" and operation == "PutEvents":
            for entry in params.get("Entries", []):
                size = sum(_size(entry.get(k, "")) for k in ("Source", "DetailType", "Detail")) + 14
                size += sum(_size(r) for r in entry.get("Resources", []))
                usage.events += chunks(size, EVENT_CHUNK)
                usage.event_bytes += size
        elif service == "sns" and operation in ("Publish", "PublishBatch"):
            entries = params.get("PublishBatchRequestEntries") or [params]
            size = sum(_size(e.get("Message", "")) + _size(e.get("Subject", "")) for e in entries)
            size += sum(
                _size(name) + _size(str(value.get("StringValue", "")))
                for e in entries
                for name, value in (e.get("MessageAttributes") or {}).items()
            )
            usage.sns_requests += chunks(size, EVENT_CHUNK)
        elif service == "sqs":
            body = params.get("MessageBody", "")
            bodies = [e.get("MessageBody", "") for e in params.get("Entries", [])]
            usage.sqs_requests += chunks(sum(_size(b) for b in [body, *bodies]), EVENT_CHUNK)
        elif service == "apigatewaymanagementapi" and operation == "PostToConnection":
            usage.ws_messages += chunks(_size(params.get("Data", b"")), WEBSOCKET_CHUNK)

    # ------------------------------------------------------------------ DynamoDB

    def _table(self, name: str) -> TableSpec:
        if name not in self._tables:
            table = self._ddb.describe_table(TableName=name)["Table"]

            def keys_of(schema: list[dict[str, str]]) -> tuple[str, str | None]:
                by_type = {k["KeyType"]: k["AttributeName"] for k in schema}
                return by_type["HASH"], by_type.get("RANGE")

            indexes = []
            for gsi in table.get("GlobalSecondaryIndexes", []):
                hash_key, range_key = keys_of(gsi["KeySchema"])
                projection = gsi.get("Projection", {})
                indexes.append(
                    IndexSpec(
                        gsi["IndexName"],
                        hash_key,
                        range_key,
                        projection.get("ProjectionType", "ALL"),
                        tuple(projection.get("NonKeyAttributes", [])),
                    )
                )
            hash_key, range_key = keys_of(table["KeySchema"])
            self._tables[name] = TableSpec(hash_key, range_key, tuple(indexes))
        return self._tables[name]

    def _item(self, table: str, key: Item) -> dict[str, Any] | None:
        found = self._ddb.get_item(TableName=table, Key=dict(key), ConsistentRead=True).get("Item")
        return dict(found) if found else None

    def _dynamodb_before(self, operation: str, params: dict[str, Any]) -> list[tuple[str, dict[str, Any], Any]] | None:
        """(table, key, item before) of every item a write touches; None for a read."""
        targets: list[tuple[str, Item]] = []
        if operation in _SINGLE_WRITES:
            targets.append((params["TableName"], params.get("Key") or params["Item"]))
        elif operation == "BatchWriteItem":
            for table, requests in params.get("RequestItems", {}).items():
                for request in requests:
                    put, delete = request.get("PutRequest"), request.get("DeleteRequest")
                    targets.append((table, put["Item"] if put else delete["Key"]))
        elif operation == "TransactWriteItems":
            for entry in params.get("TransactItems", []):
                ((_, action),) = entry.items()
                targets.append((action["TableName"], action.get("Key") or action["Item"]))
        else:
            return None
        found = []
        for table, item in targets:
            key = self._table(table).key_of(item)
            found.append((table, key, self._item(table, key)))
        return found

    def _dynamodb_after(self, operation: str, params: dict[str, Any], result: Any, before: Any, failed: bool) -> None:
        usage = self.usage
        if before is not None:
            transactional = operation == "TransactWriteItems"
            for table, key, old in before:
                new = self._item(table, key)
                size = max(item_size(old or {}), item_size(new or {}))
                usage.write_units += write_units(size, transactional=transactional)
                if not failed:
                    spec = self._table(table)
                    usage.index_write_units += sum(spec.index_write_units(index, old, new) for index in spec.indexes)
            return
        consistent = bool(params.get("ConsistentRead"))
        if operation == "GetItem":
            item = self._item(params["TableName"], self._table(params["TableName"]).key_of(params["Key"]))
            usage.read_units += read_units(item_size(item or {}), consistent=consistent)
        elif operation in ("Query", "Scan"):
            table = params["TableName"]
            total = sum(self._read_size(table, params.get("IndexName"), item) for item in result.get("Items", []))
            usage.read_units += read_units(total, consistent=consistent)
        elif operation == "BatchGetItem":
            for table, request in params.get("RequestItems", {}).items():
                for key in request.get("Keys", []):
                    item = self._item(table, self._table(table).key_of(key))
                    consistent = bool(request.get("ConsistentRead"))
                    usage.read_units += read_units(item_size(item or {}), consistent=consistent)
        elif operation == "TransactGetItems":
            for entry in params.get("TransactItems", []):
                get = entry["Get"]
                item = self._item(get["TableName"], self._table(get["TableName"]).key_of(get["Key"]))
                usage.read_units += read_units(item_size(item or {}), consistent=True, transactional=True)

    def _read_size(self, table: str, index_name: str | None, returned: Item) -> int:
        """What a Query or Scan bills for one item: the whole item (or index entry), whatever was projected."""
        spec = self._table(table)
        returned = wire_item(returned)
        if not all(k in returned for k in spec.key_names):
            return item_size(returned)
        full = self._item(table, spec.key_of(returned)) or dict(returned)
        index = next((i for i in spec.indexes if i.name == index_name), None)
        entry = spec.index_entry(index, full) if index is not None else full
        return item_size(entry or full)


def wire(value: Any) -> Any:
    """``value`` as DynamoDB's wire format: boto3's resource layer hands the client plain Python values."""
    if isinstance(value, dict) and len(value) == 1 and next(iter(value)) in _WIRE_TYPES:
        return value
    return _SERIALIZER.serialize(value)


def wire_item(item: Item) -> dict[str, Any]:
    return {name: wire(value) for name, value in item.items()}


def _size(value: Any) -> int:
    if isinstance(value, (bytes, bytearray)):
        return len(value)
    return len(str(value).encode())


@contextlib.contextmanager
def _patched(owner: Any, name: str, value: Any) -> Iterator[None]:
    """Replace ``owner.name`` (a class attribute, or a module's ``__dict__`` entry) for the block."""
    namespace = owner if isinstance(owner, dict) else owner.__dict__
    original = namespace[name]
    if isinstance(owner, dict):
        owner[name] = value
    else:
        setattr(owner, name, value)
    try:
        yield
    finally:
        if isinstance(owner, dict):
            owner[name] = original
        else:
            setattr(owner, name, original)
