"""Batched writers for the stream router: one chunked call per service, retries of failed entries only.

Each writer takes entries tagged with the *owner* (the stream record's sequence number they came
from), sends them in as few calls as the service allows (Firehose PutRecordBatch: 500 records or
4 MiB; EventBridge PutEvents and SNS PublishBatch: 10 entries or 256 KiB), and retries only the
entries the service reported as failed (``FailedPutCount``, ``FailedEntryCount``, ``Failed``)
under the shared retry policy (:func:`lambdas.shared.retry.send_with_retries`), at most
``Backoff.attempts`` calls per chunk. What is still failed after that comes back as the set of
owners, so the router reports exactly those records in ``batchItemFailures``.

A whole call that raises (throttling, 5xx) is retried the same way, on single-attempt clients so
botocore does not multiply the calls; an error that a retry cannot fix (validation, access
denied) fails the chunk at once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from lambdas.shared.retry import Backoff, Entry, send_with_retries

__all__ = [
    "EVENTS_MAX_BYTES",
    "EVENTS_MAX_ENTRIES",
    "FIREHOSE_MAX_BYTES",
    "FIREHOSE_MAX_RECORDS",
    "SNS_MAX_BYTES",
    "SNS_MAX_ENTRIES",
    "AsyncInvoker",
    "Backoff",
    "Entry",
    "EventBusWriter",
    "FirehoseWriter",
    "TopicWriter",
    "chunked",
    "send_with_retries",
]

FIREHOSE_MAX_RECORDS: Final = 500
FIREHOSE_MAX_BYTES: Final = 4 * 1024 * 1024
EVENTS_MAX_ENTRIES: Final = 10
EVENTS_MAX_BYTES: Final = 256 * 1024
SNS_MAX_ENTRIES: Final = 10
SNS_MAX_BYTES: Final = 256 * 1024

T = TypeVar("T")


def chunked(entries: Sequence[Entry[T]], *, max_count: int, max_bytes: int) -> Iterator[list[Entry[T]]]:
    """Consecutive chunks of at most ``max_count`` entries and ``max_bytes`` summed sizes."""
    chunk: list[Entry[T]] = []
    size = 0
    for entry in entries:
        if chunk and (len(chunk) >= max_count or size + entry.size > max_bytes):
            yield chunk
            chunk, size = [], 0
        chunk.append(entry)
        size += entry.size
    if chunk:
        yield chunk


@dataclass
class FirehoseWriter:
    """PutRecordBatch of newline-delimited JSON records, 500 records / 4 MiB per call."""

    client: Any
    stream_name: str
    backoff: Backoff = field(default_factory=Backoff)

    def write(self, entries: Sequence[Entry[dict[str, Any]]]) -> set[str]:
        """Deliver every entry; returns the owners of entries that finally failed."""
        records = [Entry(e.owner, {"Data": _ndjson(e.payload)}, 0) for e in entries]
        records = [Entry(r.owner, r.payload, len(r.payload["Data"])) for r in records]
        failed: set[str] = set()
        for chunk in chunked(records, max_count=FIREHOSE_MAX_RECORDS, max_bytes=FIREHOSE_MAX_BYTES):
            failed.update(e.owner for e in send_with_retries(chunk, self._send, self.backoff))
        return failed

    def _send(self, records: list[dict[str, Any]]) -> list[bool]:
        resp = self.client.put_record_batch(DeliveryStreamName=self.stream_name, Records=records)
        results = resp.get("RequestResponses", [])
        if not resp.get("FailedPutCount"):
            return [True] * len(records)
        return [not r.get("ErrorCode") for r in results]


@dataclass
class EventBusWriter:
    """PutEvents, 10 entries / 256 KiB per call."""

    client: Any
    backoff: Backoff = field(default_factory=Backoff)

    def write(self, entries: Sequence[Entry[dict[str, Any]]]) -> set[str]:
        sized = [Entry(e.owner, e.payload, _event_size(e.payload)) for e in entries]
        failed: set[str] = set()
        for chunk in chunked(sized, max_count=EVENTS_MAX_ENTRIES, max_bytes=EVENTS_MAX_BYTES):
            failed.update(e.owner for e in send_with_retries(chunk, self._send, self.backoff))
        return failed

    def _send(self, entries: list[dict[str, Any]]) -> list[bool]:
        resp = self.client.put_events(Entries=entries)
        if not resp.get("FailedEntryCount"):
            return [True] * len(entries)
        return [not r.get("ErrorCode") for r in resp.get("Entries", [])]


@dataclass
class TopicWriter:
    """SNS PublishBatch, 10 messages / 256 KiB per call (an entry's ``Id`` is set here)."""

    client: Any
    topic_arn: str
    backoff: Backoff = field(default_factory=Backoff)

    def write(self, entries: Sequence[Entry[dict[str, Any]]]) -> set[str]:
        sized = [Entry(e.owner, e.payload, _message_size(e.payload)) for e in entries]
        failed: set[str] = set()
        for chunk in chunked(sized, max_count=SNS_MAX_ENTRIES, max_bytes=SNS_MAX_BYTES):
            failed.update(e.owner for e in send_with_retries(chunk, self._send, self.backoff))
        return failed

    def _send(self, messages: list[dict[str, Any]]) -> list[bool]:
        batch = [{**m, "Id": str(i)} for i, m in enumerate(messages)]
        resp = self.client.publish_batch(TopicArn=self.topic_arn, PublishBatchRequestEntries=batch)
        failed_ids = {f["Id"] for f in resp.get("Failed", [])}
        return [str(i) not in failed_ids for i in range(len(messages))]


@dataclass
class AsyncInvoker:
    """Asynchronous Lambda invocations (InvocationType Event), one call per payload.

    There is no batch API for Invoke; the router calls it only for every N-th turn.
    """

    client: Any
    function_name: str
    backoff: Backoff = field(default_factory=Backoff)

    def write(self, entries: Sequence[Entry[dict[str, Any]]]) -> set[str]:
        failed: set[str] = set()
        for entry in entries:
            if send_with_retries([entry], self._send, self.backoff):
                failed.add(entry.owner)
        return failed

    def _send(self, payloads: list[dict[str, Any]]) -> list[bool]:
        (payload,) = payloads
        self.client.invoke(
            FunctionName=self.function_name,
            InvocationType="Event",
            Payload=json.dumps(payload, separators=(",", ":"), sort_keys=True).encode(),
        )
        return [True]


def _ndjson(payload: dict[str, Any]) -> bytes:
    return (json.dumps(payload, separators=(",", ":"), sort_keys=True, default=str) + "\n").encode()


def _event_size(entry: dict[str, Any]) -> int:
    # The PutEvents entry-size formula: Source + DetailType + Detail + resources, plus 14 bytes
    # for the time; rounded up a little so a chunk never crosses the limit.
    return sum(len(str(entry.get(k, "")).encode()) for k in ("Source", "DetailType", "Detail")) + 64


def _message_size(entry: dict[str, Any]) -> int:
    attributes = entry.get("MessageAttributes", {})
    attr_size = sum(
        len(k) + len(str(v.get("StringValue", ""))) + len(str(v.get("DataType", ""))) for k, v in attributes.items()
    )
    return len(str(entry.get("Message", "")).encode()) + attr_size + 64
