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

Firehose bills every record rounded up to the next 5 KB ("Amazon Data Firehose pricing": a 3 KB
record is billed as 5 KB, and the rounding is per record, not per call), and a router line is
well under 1 KB. A :class:`FirehoseWriter` that ``pack``s puts consecutive lines into one record,
up to :data:`FIREHOSE_MAX_RECORD_BYTES`: a stream into S3 writes its records' bytes one after the
other, so the objects hold the same newline-delimited lines either way, and Athena's JSON SerDe
reads them one line at a time. A record is delivered or failed whole, so every line of a record
that finally failed is reported (its owners retry; readers de-duplicate on ``event_id``).
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
    "FIREHOSE_MAX_RECORD_BYTES",
    "SNS_MAX_BYTES",
    "SNS_MAX_ENTRIES",
    "AsyncInvoker",
    "Backoff",
    "Entry",
    "EventBusWriter",
    "FirehoseWriter",
    "TopicWriter",
    "chunked",
    "packed",
    "send_with_retries",
]

FIREHOSE_MAX_RECORDS: Final = 500
FIREHOSE_MAX_BYTES: Final = 4 * 1024 * 1024
#: Firehose's largest record, before base64 encoding: 1,000 KiB.
FIREHOSE_MAX_RECORD_BYTES: Final = 1000 * 1024
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


def packed(lines: Sequence[tuple[str, bytes]], *, max_bytes: int) -> list[tuple[set[str], bytes]]:
    """Consecutive ``(owner, line)`` pairs joined into records of at most ``max_bytes``, with their owners.

    The lines keep their order; a line longer than ``max_bytes`` is a record of its own.
    """
    records: list[tuple[set[str], bytes]] = []
    owners: set[str] = set()
    parts: list[bytes] = []
    size = 0
    for owner, line in lines:
        if parts and size + len(line) > max_bytes:
            records.append((owners, b"".join(parts)))
            owners, parts, size = set(), [], 0
        owners.add(owner)
        parts.append(line)
        size += len(line)
    if parts:
        records.append((owners, b"".join(parts)))
    return records


@dataclass
class FirehoseWriter:
    """PutRecordBatch of newline-delimited JSON lines, 500 records / 4 MiB per call.

    ``pack``: several lines to a record, up to :data:`FIREHOSE_MAX_RECORD_BYTES` (see the module
    docstring), for a stream into S3. Defaults to one line per record, which a destination that
    takes a record as one document (OpenSearch) needs.
    """

    client: Any
    stream_name: str
    backoff: Backoff = field(default_factory=Backoff)
    pack: bool = False

    def write(self, entries: Sequence[Entry[dict[str, Any]]]) -> set[str]:
        """Deliver every entry; returns the owners of entries whose record finally failed."""
        lines = [(e.owner, _ndjson(e.payload)) for e in entries]
        groups = packed(lines, max_bytes=FIREHOSE_MAX_RECORD_BYTES) if self.pack else [({o}, line) for o, line in lines]
        records = [Entry(str(n), {"Data": data}, len(data)) for n, (_, data) in enumerate(groups)]
        failed: set[str] = set()
        for chunk in chunked(records, max_count=FIREHOSE_MAX_RECORDS, max_bytes=FIREHOSE_MAX_BYTES):
            for record in send_with_retries(chunk, self._send, self.backoff):
                failed |= groups[int(record.owner)][0]
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
