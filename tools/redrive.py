"""Move the messages of a dead-letter queue back to the queue they failed in; a dry run unless --apply.

Usage (``make redrive`` lists the dev stage's DLQs, ``make redrive QUEUE=... [APPLY=1]`` redrives one)::

    python -m tools.redrive --stage dev        # the stage's dead-letter queues and what waits in each
    python -m tools.redrive QUEUE              # dry run: depth, a sample, where the messages would go
    python -m tools.redrive QUEUE --apply [--max N] [--rate N] [--to QUEUE]
    python -m tools.redrive QUEUE --status     # the DLQ's recent message move tasks

QUEUE is the dead-letter queue's name, URL or ARN. Where its messages go is found, not typed: the
SQS queue whose redrive policy names it (``ListDeadLetterSourceQueues``). With several such
queues the tool refuses and lists them, and ``--to`` picks one. A DLQ that no SQS queue feeds (a
stream consumer's or a function's failure destination, an EventBridge target's, an SNS
subscription's) has no queue to go back to: the tool says what its messages are and what to do
instead. ``--to`` then moves the ones that are messages to a queue you name; failure records stay,
and a stream consumer's DLQ is refused outright.

``--apply`` on a standard DLQ starts SQS's own message move task (``StartMessageMoveTask``;
``--rate`` is its ``MaxNumberOfMessagesPerSecond``) and reports its handle and status. A FIFO DLQ,
``--max``, a ``--to`` queue that is no source of the DLQ, or an endpoint without move tasks (moto)
move by hand instead: batches of ten received from the DLQ, sent to the destination with the same
body and message attributes (FIFO: the same group, in order), and deleted from the DLQ only once
sent. A message that fails stays in the DLQ, is named in the report, and is visible again when
the run ends.

Exit status: 0 done or nothing to do; 1 some messages were not moved (the report names them);
2 refused or could not start (bad arguments, unknown queue, no credentials, a DLQ that cannot be
redriven as asked).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from functools import partial
from typing import Any, Final

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    NoCredentialsError,
    NoRegionError,
    PartialCredentialsError,
    ProfileNotFound,
)

from lambdas.shared.retry import Backoff, Entry, call_with_retries, error_code, send_with_retries

#: SQS's batch size, and the most messages one receive returns.
BATCH: Final = 10
#: SendMessageBatch's limit on one request: every body and attribute together.
BATCH_BYTES: Final = 262_144
#: How long a message taken for moving stays hidden while it moves (a batch takes seconds).
MOVE_VISIBILITY_SECONDS: Final = 120
#: How long a sampled message would stay hidden if making it visible again failed.
PEEK_VISIBILITY_SECONDS: Final = 30
#: Long polling: an empty answer then means the queue is empty, not that one server had nothing.
RECEIVE_WAIT_SECONDS: Final = 2
BODY_PREVIEW: Final = 200
#: botocore's standard retry mode retries a throttled, 5xx or dropped call this many times in all.
CALL_ATTEMPTS: Final = 5
#: The task's MaxNumberOfMessagesPerSecond range.
RATE_RANGE: Final = (1, 500)

#: Error codes meaning "no such queue" (JSON protocol and its query-compatible form).
_NO_QUEUE = frozenset({"AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"})
#: Error codes meaning "this endpoint or queue has no message move tasks".
_NO_MOVE_TASKS = frozenset(
    {"UnsupportedOperation", "AWS.SimpleQueueService.UnsupportedOperation", "InvalidAction", "UnknownOperation"}
)
_BAD_CREDENTIALS = frozenset(
    {
        "InvalidClientTokenId",
        "UnrecognizedClientException",
        "ExpiredToken",
        "ExpiredTokenException",
        "SignatureDoesNotMatch",
        "InvalidSignatureException",
    }
)
#: Attributes EventBridge (rules and Scheduler) puts on what a target could not receive.
_EVENTBRIDGE_ORIGINS = ("RULE_ARN", "SCHEDULE_ARN")

_QUEUE_NAME = re.compile(r"[A-Za-z0-9_-]{1,75}(\.fifo)?|[A-Za-z0-9_-]{1,80}")
_ARN = re.compile(r"arn:[\w-]+:sqs:(?P<region>[\w-]+):(?P<account>\d{12}):(?P<name>[\w.-]+)")
_URL = re.compile(r"https?://(?P<host>[^/]+)/(?P<account>\d{12})/(?P<name>[\w.-]+)/?")
_REGION_IN_HOST = re.compile(r"(?:^|\.)(?P<region>[a-z]{2}(?:-[a-z]+)+-\d+)\.")


class Refused(Exception):
    """The tool will not do what was asked; the message says why and what to do instead."""


# --- What was asked for -------------------------------------------------------------------------


@dataclass(frozen=True)
class QueueRef:
    """A queue as the operator typed it (name, URL or ARN), with the region and account it names."""

    text: str
    name: str
    url: str | None = None
    account: str | None = None
    region: str | None = None


def parse_queue(text: str) -> QueueRef:
    """The queue ``text`` names; ValueError says what a queue reference looks like."""
    text = text.strip()
    if match := _ARN.fullmatch(text):
        return QueueRef(text, match["name"], account=match["account"], region=match["region"])
    if match := _URL.fullmatch(text):
        host = _REGION_IN_HOST.search(match["host"])
        region = host["region"] if host else None
        return QueueRef(text, match["name"], url=text.rstrip("/"), account=match["account"], region=region)
    if _QUEUE_NAME.fullmatch(text):
        return QueueRef(text, text)
    raise ValueError(
        f"{text!r} is no queue name, URL (https://sqs.<region>.amazonaws.com/<account>/<name>) "
        "or ARN (arn:aws:sqs:<region>:<account>:<name>)"
    )


# --- What SQS says ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Queue:
    """A queue and its attributes as SQS returned them."""

    url: str
    arn: str
    attributes: Mapping[str, str]

    @property
    def name(self) -> str:
        return self.arn.rsplit(":", 1)[-1]

    @property
    def fifo(self) -> bool:
        return self.attributes.get("FifoQueue") == "true"

    def _count(self, attribute: str) -> int:
        return int(self.attributes.get(attribute, "0") or 0)

    @property
    def waiting(self) -> int:
        return self._count("ApproximateNumberOfMessages")

    @property
    def in_flight(self) -> int:
        return self._count("ApproximateNumberOfMessagesNotVisible")

    @property
    def delayed(self) -> int:
        return self._count("ApproximateNumberOfMessagesDelayed")

    @property
    def dead_letter_target(self) -> str | None:
        """The ARN of this queue's own DLQ, if it has one."""
        policy = _json_object(self.attributes.get("RedrivePolicy"))
        target = policy.get("deadLetterTargetArn")
        return str(target) if target else None

    @property
    def max_receive_count(self) -> int | None:
        count = _json_object(self.attributes.get("RedrivePolicy")).get("maxReceiveCount")
        return int(count) if count is not None else None

    @property
    def redrive_permission(self) -> str | None:
        """Which queues may use this one as their DLQ: RedriveAllowPolicy's allowAll, denyAll or byQueue."""
        permission = _json_object(self.attributes.get("RedriveAllowPolicy")).get("redrivePermission")
        return str(permission) if permission else None

    @property
    def senders(self) -> list[str]:
        """Services the queue policy lets send here, with their source: ``SNS topic arn:...``."""
        found: list[str] = []
        statements = _json_object(self.attributes.get("Policy")).get("Statement", [])
        for statement in statements if isinstance(statements, list) else [statements]:
            if not isinstance(statement, dict) or statement.get("Effect") != "Allow":
                continue
            principal = statement.get("Principal")
            services = principal.get("Service", []) if isinstance(principal, dict) else []
            for service in [services] if isinstance(services, str) else services:
                label = {"sns.amazonaws.com": "SNS topic", "events.amazonaws.com": "EventBridge rule"}.get(service)
                if label:
                    sources = _condition_values(statement.get("Condition"), "aws:SourceArn") or ["(any)"]
                    found += [f"{label} {source}" for source in sources]
        return found


def _json_object(text: str | None) -> dict[str, Any]:
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _condition_values(condition: Any, key: str) -> list[str]:
    values: list[str] = []
    for test in (condition or {}).values() if isinstance(condition, dict) else []:
        value = test.get(key) if isinstance(test, dict) else None
        values += [value] if isinstance(value, str) else [v for v in value or [] if isinstance(v, str)]
    return values


class Kind(Enum):
    """What a message in a dead-letter queue is, judged by its body and attributes."""

    MESSAGE = "message"
    STREAM_FAILURE = "stream failure record"
    INVOCATION_RECORD = "Lambda invocation record"
    EVENTBRIDGE = "EventBridge delivery failure"


def kind_of(body: str, message_attributes: Mapping[str, Any]) -> Kind:
    """Failure records Lambda writes (stream batches, asynchronous invocations), EventBridge's, or a message."""
    if "TARGET_ARN" in message_attributes and any(key in message_attributes for key in _EVENTBRIDGE_ORIGINS):
        return Kind.EVENTBRIDGE
    document = _json_object(body) if body.lstrip().startswith("{") else {}
    context = document.get("requestContext")
    if isinstance(context, dict) and "functionArn" in context and "condition" in context:
        # DDBStreamBatchInfo, KinesisBatchInfo: a range of stream records, not the records
        if any(key.endswith("BatchInfo") for key in document):
            return Kind.STREAM_FAILURE
        return Kind.INVOCATION_RECORD
    return Kind.MESSAGE


@dataclass(frozen=True)
class Message:
    """One received message: what a move needs, and what a sample shows."""

    id: str
    receipt: str
    body: str
    attributes: Mapping[str, str]
    message_attributes: Mapping[str, Mapping[str, Any]]

    @classmethod
    def from_sqs(cls, raw: Mapping[str, Any]) -> Message:
        return cls(
            raw["MessageId"],
            raw["ReceiptHandle"],
            raw.get("Body", ""),
            raw.get("Attributes", {}),
            raw.get("MessageAttributes", {}),
        )

    @property
    def kind(self) -> Kind:
        return kind_of(self.body, self.message_attributes)

    @property
    def receive_count(self) -> str:
        return self.attributes.get("ApproximateReceiveCount", "?")

    @property
    def group(self) -> str | None:
        return self.attributes.get("MessageGroupId")

    def outgoing(self, *, fifo: bool) -> dict[str, Any]:
        """The SendMessage parameters that put this message on another queue, unchanged.

        FIFO: the same group; the deduplication id is derived from this DLQ message's id, not the
        original one, which the source queue may still remember (for 5 minutes after the first
        send) and would then accept and silently drop. A rerun after an interrupted move sends
        the same id again, so within those 5 minutes SQS drops the copy instead of duplicating.
        """
        entry: dict[str, Any] = {"MessageBody": self.body}
        attributes = {
            name: {key: value[key] for key in ("DataType", "StringValue", "BinaryValue") if key in value}
            for name, value in self.message_attributes.items()
        }
        if attributes:
            entry["MessageAttributes"] = attributes
        if trace := self.attributes.get("AWSTraceHeader"):
            entry["MessageSystemAttributes"] = {"AWSTraceHeader": {"DataType": "String", "StringValue": trace}}
        if fifo:
            if self.group is not None:
                entry["MessageGroupId"] = self.group
            entry["MessageDeduplicationId"] = hashlib.sha256(f"redrive:{self.id}".encode()).hexdigest()
        return entry

    @property
    def size(self) -> int:
        """Bytes this message counts against a batch's limit (body, attribute names, types, values)."""
        size = len(self.body.encode())
        for name, value in self.message_attributes.items():
            size += len(name.encode()) + len(str(value.get("DataType", "")).encode())
            size += len(str(value.get("StringValue", "")).encode()) + len(value.get("BinaryValue", b"") or b"")
        return size


@dataclass(frozen=True)
class Consumer:
    """A Lambda event source mapping that sends its failure records to a queue."""

    function_arn: str
    source_arn: str

    @property
    def function(self) -> str:
        return self.function_arn.rsplit(":", 1)[-1]


# --- Talking to AWS -----------------------------------------------------------------------------


def _config(attempts: int) -> Config:
    return Config(retries={"mode": "standard", "total_max_attempts": attempts}, connect_timeout=5, read_timeout=30)


class Aws:
    """The tool's clients, all in one session and region.

    Whole calls are retried by botocore's standard mode. Sends and deletes run under the shared
    retry policy (:mod:`lambdas.shared.retry`), which also resends the entries a batch reports
    failed; their client makes one attempt per call, so the two retry layers never multiply.
    """

    def __init__(self, session: boto3.Session, region: str, *, receive_wait_seconds: int) -> None:
        self.region = region
        self.session = session
        self.sqs: Any = session.client("sqs", region_name=region, config=_config(CALL_ATTEMPTS))
        self.sqs_once: Any = session.client("sqs", region_name=region, config=_config(1))
        self.receive_wait_seconds = receive_wait_seconds
        self._consumers: dict[str, list[Consumer]] | None = None
        self.consumers_unknown: str | None = None

    def client(self, service: str) -> Any:
        return self.session.client(service, region_name=self.region, config=_config(CALL_ATTEMPTS))

    def queue(self, ref: QueueRef) -> Queue:
        """The queue ``ref`` names; Refused when it does not exist."""
        url = ref.url
        try:
            if url is None:
                named: dict[str, str] = {"QueueName": ref.name}
                if ref.account:
                    named["QueueOwnerAWSAccountId"] = ref.account
                url = self.sqs.get_queue_url(**named)["QueueUrl"]
            attributes = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        except ClientError as error:
            if error_code(error) in _NO_QUEUE:
                raise Refused(
                    f"there is no queue {ref.text} in {self.region} (for the account of these credentials): "
                    "check the name, or give --region or an ARN"
                ) from None
            raise
        return Queue(url, attributes["QueueArn"], attributes)

    def queue_at(self, url: str) -> Queue:
        """The queue at a URL SQS or CloudFormation gave (whatever its host looks like)."""
        return self.queue(QueueRef(url, url.rstrip("/").rsplit("/", 1)[-1], url=url))

    def sources(self, dlq: Queue) -> list[Queue]:
        """The SQS queues whose redrive policy names ``dlq``."""
        pages = self.sqs.get_paginator("list_dead_letter_source_queues").paginate(QueueUrl=dlq.url)
        return [self.queue_at(url) for page in pages for url in page.get("queueUrls", [])]

    def consumers(self) -> dict[str, list[Consumer]]:
        """Event source mappings by the ARN of their on-failure destination (read once).

        Empty, with ``consumers_unknown`` saying why, when Lambda cannot be asked: the messages
        themselves are then the only evidence.
        """
        if self._consumers is None:
            found: dict[str, list[Consumer]] = {}
            try:
                for page in self.client("lambda").get_paginator("list_event_source_mappings").paginate():
                    for mapping in page.get("EventSourceMappings", []):
                        target = ((mapping.get("DestinationConfig") or {}).get("OnFailure") or {}).get("Destination")
                        if target:
                            consumer = Consumer(mapping.get("FunctionArn", "?"), mapping.get("EventSourceArn", "?"))
                            found.setdefault(target, []).append(consumer)
            except (ClientError, BotoCoreError) as error:
                self.consumers_unknown = describe(error)
            self._consumers = found
        return self._consumers

    def receive(self, queue: Queue, count: int, *, visibility: int) -> list[Message]:
        answer = self.sqs.receive_message(
            QueueUrl=queue.url,
            MaxNumberOfMessages=count,
            VisibilityTimeout=visibility,
            WaitTimeSeconds=self.receive_wait_seconds,
            MessageAttributeNames=["All"],
            MessageSystemAttributeNames=["All"],
        )
        return [Message.from_sqs(raw) for raw in answer.get("Messages", [])]

    def release(self, queue: Queue, receipts: Mapping[str, str]) -> list[str]:
        """Make messages (id -> receipt handle) visible again at once; the ids that stay hidden."""
        hidden: list[str] = []
        items = list(receipts.items())
        for start in range(0, len(items), BATCH):
            chunk = items[start : start + BATCH]
            entries = [
                {"Id": str(n), "ReceiptHandle": receipt, "VisibilityTimeout": 0} for n, (_, receipt) in enumerate(chunk)
            ]
            try:
                answer = self.sqs.change_message_visibility_batch(QueueUrl=queue.url, Entries=entries)
            except (ClientError, BotoCoreError):
                hidden += [message_id for message_id, _ in chunk]
                continue
            hidden += [chunk[int(failed["Id"])][0] for failed in answer.get("Failed", [])]
        return hidden

    def move_tasks(self, dlq: Queue, *, most: int = 1) -> list[dict[str, Any]]:
        """The DLQ's most recent message move tasks, newest first; _NoMoveTasks where there are none."""
        try:
            return list(self.sqs.list_message_move_tasks(SourceArn=dlq.arn, MaxResults=most).get("Results", []))
        except NotImplementedError as error:  # moto, and other emulators, raise this for the API
            raise _NoMoveTasks("this endpoint does not implement ListMessageMoveTasks") from error
        except ClientError as error:
            if error_code(error) in _NO_MOVE_TASKS:
                raise _NoMoveTasks(describe(error)) from error
            raise


class _NoMoveTasks(Exception):
    """SQS message move tasks are not available for this queue or at this endpoint."""


def describe(error: BaseException) -> str:
    """One line for an AWS error: the operation, code and message, no traceback."""
    if isinstance(error, ClientError):
        info = error.response.get("Error", {})
        return f"{error.operation_name}: {info.get('Code', '?')}: {info.get('Message', '')}".rstrip(": ")
    return str(error)


# --- Deciding where the messages go -------------------------------------------------------------

ADVICE: Final[Mapping[Kind, str]] = {
    Kind.STREAM_FAILURE: (
        "These are failure records of a stream consumer (an event source mapping's on-failure destination): "
        "each names a shard and a range of sequence numbers the function gave up on (DDBStreamBatchInfo), "
        "not the stream records themselves, so there is nothing to send back to a queue. Instead read that "
        "range from the stream while it still holds it (a DynamoDB stream keeps records for 24 hours), fix "
        "the cause, have the function process those records again, then delete the failure record."
    ),
    Kind.INVOCATION_RECORD: (
        "These are Lambda's records of asynchronous invocations that failed after their retries: "
        "requestContext.functionArn names the function and requestPayload holds its event. Once the cause is "
        "fixed, invoke that function again with the requestPayload (aws lambda invoke --invocation-type Event), "
        "then delete the record."
    ),
    Kind.EVENTBRIDGE: (
        "These are what an EventBridge rule or schedule could not deliver to its target after its retries: the "
        "body is the event (or the schedule's input); the RULE_ARN or SCHEDULE_ARN, TARGET_ARN and "
        "ERROR_CODE attributes say where it was going and why it failed. Once the cause is fixed, start that "
        "target again with the body as its input, then delete the message."
    ),
}
#: Kinds --to never moves: they describe a failure, they are not the failed message.
NOT_MOVABLE: Final = frozenset({Kind.STREAM_FAILURE, Kind.INVOCATION_RECORD})


def choose_destination(
    dlq: Queue,
    sources: Sequence[Queue],
    to: Queue | None,
    consumers: Sequence[Consumer],
    kinds: Iterable[Kind],
) -> Queue:
    """Where the DLQ's messages go: its one source queue, or the ``--to`` queue when that is allowed.

    Refused, with what to do instead, for several sources and no ``--to``; a ``--to`` that is not
    one of the sources; a DLQ no SQS queue feeds, unless ``--to`` names a queue (never for a stream
    consumer's DLQ: failure records are not messages); and a FIFO/standard mismatch.
    """
    names = ", ".join(source.name for source in sources)
    if to is not None and to.arn == dlq.arn:
        raise Refused(f"--to names the dead-letter queue itself ({dlq.name})")
    if consumers:
        mappings = "; ".join(f"{c.function} reading {c.source_arn}" for c in consumers)
        raise Refused(
            f"{dlq.name} is the on-failure destination of {mappings}. {ADVICE[Kind.STREAM_FAILURE]}"
            + (" --to cannot help: a failure record moved to a queue is still no stream record." if to else "")
        )
    if to is not None:
        if sources and to.arn not in {source.arn for source in sources}:
            raise Refused(f"--to {to.name} is not a source of {dlq.name}; its sources are: {names}")
        destination = to
    elif len(sources) == 1:
        destination = sources[0]
    elif sources:
        raise Refused(
            f"{dlq.name} is the dead-letter queue of {len(sources)} queues: {names}. Its messages do not say "
            "which one they came from; give --to with the one to move them all to"
        )
    else:
        raise Refused(_no_source(dlq, set(kinds)))
    if destination.fifo != dlq.fifo:
        kind = "a FIFO queue" if destination.fifo else "a standard queue"
        raise Refused(
            f"{destination.name} is {kind} and {dlq.name} is not: messages keep their order and group only FIFO to FIFO"
        )
    return destination


def _no_source(dlq: Queue, kinds: set[Kind]) -> str:
    lines = [f"{dlq.name} has no source queue: no SQS queue's redrive policy names it."]
    lines += [ADVICE[kind] for kind in (Kind.STREAM_FAILURE, Kind.INVOCATION_RECORD, Kind.EVENTBRIDGE) if kind in kinds]
    if sns := [sender for sender in dlq.senders if sender.startswith("SNS")]:
        lines.append(f"Its queue policy lets {', '.join(sns)} send to it: it is an SNS subscription's DLQ.")
    if not kinds:
        lines.append("A dry run (without --apply) shows what its messages are and what to do with them.")
    if not kinds or kinds - NOT_MOVABLE:
        lines.append(
            "To move its messages to a queue of your choice, give --to QUEUE (failure records stay where they are)."
        )
    return "\n".join(lines)


def use_task(
    dlq: Queue, sources: Sequence[Queue], destination: Queue, *, method: str, limit: int | None
) -> tuple[bool, str]:
    """Whether to move with SQS's message move task, and why (or why not)."""
    if method == "manual":
        return False, "moving by hand (--method manual)"
    reasons = []
    if dlq.fifo:
        reasons.append("SQS's message move task has not supported FIFO queues")
    if limit is not None:
        reasons.append("--max bounds the move, which a message move task cannot")
    if destination.arn not in {source.arn for source in sources}:
        reasons.append("a message move task only redrives a DLQ of SQS queues")
    if method == "task" and reasons:
        raise Refused(f"--method task: {'; '.join(reasons)}")
    if reasons:
        return False, f"moving by hand: {'; '.join(reasons)}"
    return True, "with an SQS message move task"


# --- Dry run ------------------------------------------------------------------------------------


def show_queue(dlq: Queue, sources: Sequence[Queue], consumers: Sequence[Consumer], aws: Aws) -> None:
    kind = "FIFO" if dlq.fifo else "standard"
    print(f"Dead-letter queue {dlq.name} ({kind}, {aws.region})")
    print(f"  {dlq.url}")
    print(f"  {dlq.waiting} waiting, {dlq.in_flight} in flight, {dlq.delayed} delayed (approximate)")
    for source in sources:
        print(f"  source: {source.name} (moves a message here after {source.max_receive_count} receives)")
    for consumer in consumers:
        print(f"  failure records of: {consumer.function} reading {consumer.source_arn}")
    for sender in dlq.senders:
        print(f"  its policy lets send: {sender}")
    if not sources and not consumers and aws.consumers_unknown:
        print(f"  (could not list Lambda event source mappings: {aws.consumers_unknown})")
    if dlq.dead_letter_target:
        print(
            f"  warning: this queue has a dead-letter queue of its own ({dlq.dead_letter_target.rsplit(':', 1)[-1]}): "
            f"after {dlq.max_receive_count} receives, peeking or a failed move sends a message on to it"
        )


def peek(aws: Aws, dlq: Queue, count: int) -> list[Message]:
    """Up to ``count`` messages, made visible again at once; nothing else about them changes."""
    if count == 0:
        return []
    sample = aws.receive(dlq, count, visibility=PEEK_VISIBILITY_SECONDS)
    hidden = aws.release(dlq, {message.id: message.receipt for message in sample})
    print(f"\nSample: {len(sample)} message(s), visible again at once (peeking counts as one receive of each):")
    for n, message in enumerate(sample, 1):
        names = ", ".join(sorted(message.message_attributes)) or "none"
        group = f", group {message.group}" if message.group else ""
        print(f"  {n}. {message.id}: received {message.receive_count} time(s){group}, attributes: {names}")
        if message.kind is not Kind.MESSAGE:
            print(f"     a {message.kind.value}")
        preview = message.body[:BODY_PREVIEW].replace("\n", " ")
        print(f"     {preview}{' ...' if len(message.body) > BODY_PREVIEW else ''}")
    if hidden:
        print(f"  could not make {', '.join(hidden)} visible again: hidden for up to {PEEK_VISIBILITY_SECONDS} s")
    return sample


# --- Moving -------------------------------------------------------------------------------------


@dataclass
class MoveReport:
    """What a move did to each message it took from the DLQ."""

    moved: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # left in the DLQ: id -> why
    not_deleted: dict[str, str] = field(default_factory=dict)  # in the destination AND still in the DLQ
    left: dict[str, str] = field(default_factory=dict)  # not attempted, left in the DLQ: id -> why
    stopped: str | None = None  # why the move ended before the DLQ was empty or the bound reached

    @property
    def taken(self) -> int:
        return len(self.moved) + len(self.failed) + len(self.left) + len(self.not_deleted)

    @property
    def complete(self) -> bool:
        return not (self.failed or self.not_deleted or self.left or self.stopped)


@dataclass
class ManualMove:
    """Moves messages from ``dlq`` to ``destination`` by receive, send, then delete, at most ``limit``."""

    aws: Aws
    dlq: Queue
    destination: Queue
    limit: int | None = None
    rate: int | None = None
    skip_records: bool = False
    backoff: Backoff = field(default_factory=Backoff)
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    report: MoveReport = field(default_factory=MoveReport)
    _held: dict[str, str] = field(default_factory=dict)  # id -> receipt: left in the DLQ, released at the end
    _blocked_groups: dict[str, str] = field(default_factory=dict)  # FIFO group -> the message that failed

    def run(self) -> MoveReport:
        started = self.clock()
        try:
            while self.limit is None or self.report.taken < self.limit:
                if self.rate:  # pace before receiving, so no message waits hidden for its turn
                    ahead = len(self.report.moved) / self.rate - (self.clock() - started)
                    if ahead > 0:
                        self.sleep(ahead)
                want = BATCH if self.limit is None else min(BATCH, self.limit - self.report.taken)
                received = self.aws.receive(self.dlq, want, visibility=MOVE_VISIBILITY_SECONDS)
                fresh = [m for m in received if m.id not in self._held and m.id not in self.report.not_deleted]
                for message in received:
                    if message.id in self._held or message.id in self.report.not_deleted:
                        self._held[message.id] = message.receipt  # back after its visibility ran out
                if not fresh:
                    break  # empty, or only what this run has already left behind is visible
                self._move(fresh)
        except (ClientError, BotoCoreError) as error:
            self.report.stopped = describe(error)
        finally:
            hidden = self.aws.release(self.dlq, self._held) if self._held else []
            if hidden:
                print(
                    f"warning: {len(hidden)} message(s) left in the DLQ stay hidden up to {MOVE_VISIBILITY_SECONDS} s"
                )
        return self.report

    def _move(self, messages: list[Message]) -> None:
        movable: list[Message] = []
        for message in messages:
            if self.skip_records and message.kind in NOT_MOVABLE:
                self._leave(message, f"a {message.kind.value}, not a message (a dry run says what to do instead)")
            elif message.group is not None and message.group in self._blocked_groups:
                self._leave(message, f"its group {message.group} waits behind {self._blocked_groups[message.group]}")
            else:
                movable.append(message)
        sent = self._send_fifo(movable) if self.destination.fifo else self._send_standard(movable)
        self._delete(sent)

    def _leave(self, message: Message, why: str) -> None:
        self.report.left[message.id] = why
        self._held[message.id] = message.receipt

    def _fail(self, message: Message, why: str) -> None:
        self.report.failed[message.id] = why
        self._held[message.id] = message.receipt
        if message.group is not None:
            self._blocked_groups.setdefault(message.group, message.id)

    def _send_standard(self, messages: list[Message]) -> list[Message]:
        """Send in batches within SQS's size limit; a batch refused whole is retried message by message."""
        by_id = {str(n): message for n, message in enumerate(messages)}
        reasons: dict[str, str] = {}

        send = _batch_call(partial(self.aws.sqs_once.send_message_batch, QueueUrl=self.destination.url), reasons)
        pending = [Entry(key, {"Id": key, **m.outgoing(fifo=False)}, m.size) for key, m in by_id.items()]
        unsent: list[Entry[dict[str, Any]]] = []
        for chunk in _chunks(pending):
            left = send_with_retries(chunk, send, self.backoff)
            if len(left) == len(chunk) > 1:  # refused as a whole (too large, one bad entry): one by one
                left = [e for entry in left for e in send_with_retries([entry], send, self.backoff)]
            unsent += left
        failed = {entry.owner for entry in unsent}
        for key in failed:
            self._fail(by_id[key], f"not sent: {reasons.get(key, 'no answer')}")
        return [message for key, message in by_id.items() if key not in failed]

    def _send_fifo(self, messages: list[Message]) -> list[Message]:
        """Send one at a time in the order received; a failure holds back the rest of its group."""
        sent: list[Message] = []
        for message in messages:
            if message.group is not None and message.group in self._blocked_groups:
                self._leave(message, f"its group {message.group} waits behind {self._blocked_groups[message.group]}")
                continue
            request = {"QueueUrl": self.destination.url, **message.outgoing(fifo=True)}
            try:
                call_with_retries(partial(self.aws.sqs_once.send_message, **request), self.backoff)
            except (ClientError, BotoCoreError) as error:
                self._fail(message, f"not sent: {describe(error)}")
                continue
            sent.append(message)
        return sent

    def _delete(self, sent: list[Message]) -> None:
        """Delete from the DLQ what reached the destination; a delete that fails is reported as a copy."""
        by_id = {str(n): message for n, message in enumerate(sent)}
        reasons: dict[str, str] = {}

        delete = _batch_call(partial(self.aws.sqs_once.delete_message_batch, QueueUrl=self.dlq.url), reasons)
        entries = [Entry(key, {"Id": key, "ReceiptHandle": m.receipt}, 0) for key, m in by_id.items()]
        not_deleted = {entry.owner for entry in send_with_retries(entries, delete, self.backoff)} if entries else set()
        for key, message in by_id.items():
            if key in not_deleted:
                self.report.not_deleted[message.id] = reasons.get(key, "no answer")
            else:
                self.report.moved.append(message.id)


def _batch_call(operation: Callable[..., Any], reasons: dict[str, str]) -> Callable[[list[dict[str, Any]]], list[bool]]:
    """A batch SQS operation (SendMessageBatch, DeleteMessageBatch) as :func:`send_with_retries` calls it.

    It answers which entries went through, and leaves in ``reasons`` why each one that did not
    failed (the entry's failure, or the error that refused the whole batch, which it re-raises).
    """

    def call(entries: list[dict[str, Any]]) -> list[bool]:
        try:
            answer = operation(Entries=entries)
        except (ClientError, BotoCoreError) as error:
            reasons.update({entry["Id"]: describe(error) for entry in entries})
            raise
        for failed in answer.get("Failed", []):
            reasons[failed["Id"]] = f"{failed.get('Code', '?')}: {failed.get('Message', '')}"
        failed_ids = {failed["Id"] for failed in answer.get("Failed", [])}
        return [entry["Id"] not in failed_ids for entry in entries]

    return call


def _chunks(entries: list[Entry[dict[str, Any]]]) -> Iterable[list[Entry[dict[str, Any]]]]:
    """Batches of at most ten entries and BATCH_BYTES (a larger single entry goes alone)."""
    chunk: list[Entry[dict[str, Any]]] = []
    size = 0
    for entry in entries:
        if chunk and (len(chunk) == BATCH or size + entry.size > BATCH_BYTES):
            yield chunk
            chunk, size = [], 0
        chunk.append(entry)
        size += entry.size
    if chunk:
        yield chunk


def print_report(report: MoveReport, dlq: Queue, destination: Queue) -> None:
    print(f"\nMoved {len(report.moved)} message(s) from {dlq.name} to {destination.name}.")
    if report.stopped:
        print(f"  stopped early, the rest is still in the DLQ: {report.stopped}")
    for message_id, why in report.failed.items():
        print(f"  not moved, still in the DLQ: {message_id}: {why}")
    for message_id, why in report.left.items():
        print(f"  left in the DLQ: {message_id}: {why}")
    for message_id, why in report.not_deleted.items():
        print(
            f"  moved but NOT deleted from the DLQ, so it is in both queues: {message_id} ({why}); delete it from "
            "the DLQ by hand, or the next redrive sends it again"
        )


def start_task(aws: Aws, dlq: Queue, destination: Queue, rate: int | None) -> int:
    """Start SQS's message move task and report its handle and status; _NoMoveTasks where there are none."""
    running = [task for task in aws.move_tasks(dlq) if task.get("Status") == "RUNNING"]
    if running:
        raise Refused(
            f"a message move task is already running on {dlq.name} ({running[0].get('TaskHandle', '?')}): "
            "follow it with --status, or cancel it (aws sqs cancel-message-move-task) before starting another"
        )
    request: dict[str, Any] = {"SourceArn": dlq.arn, "DestinationArn": destination.arn}
    if rate is not None:
        request["MaxNumberOfMessagesPerSecond"] = rate
    try:
        handle = aws.sqs.start_message_move_task(**request)["TaskHandle"]
    except ClientError as error:
        if error_code(error) in _NO_MOVE_TASKS:
            raise _NoMoveTasks(describe(error)) from error
        print(f"error: the message move task did not start: {describe(error)}", file=sys.stderr)
        return 1
    print(f"\nStarted an SQS message move task to {destination.name}: {handle}")
    try:
        for task in aws.move_tasks(dlq):
            print(f"  {_task_line(task)}")
    except (_NoMoveTasks, ClientError, BotoCoreError) as error:
        print(f"  (its status is not available yet: {error})")
    print(
        f"It runs on in SQS. Follow it: python -m tools.redrive {dlq.url} --status; "
        f"stop it: aws sqs cancel-message-move-task --task-handle {handle}"
    )
    return 0


def _show_move_tasks(aws: Aws, dlq: Queue) -> None:
    """For a dry run: whether --apply could start a move task here (read only)."""
    try:
        running = [task for task in aws.move_tasks(dlq) if task.get("Status") == "RUNNING"]
    except _NoMoveTasks as error:
        print(f"No message move task here ({error}): --apply would move by hand.")
        return
    except (ClientError, BotoCoreError) as error:
        print(f"Could not list the DLQ's message move tasks ({describe(error)}).")
        return
    for task in running:
        print(f"A message move task is already running, --apply would be refused: {_task_line(task)}")


def _task_line(task: Mapping[str, Any]) -> str:
    started = task.get("StartedTimestamp")
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started / 1000)) if started else "?"
    moved, total = task.get("ApproximateNumberOfMessagesMoved", "?"), task.get("ApproximateNumberOfMessagesToMove", "?")
    line = f"{task.get('Status', '?')}: {moved} of {total} moved, started {when}"
    if task.get("MaxNumberOfMessagesPerSecond"):
        line += f", {task['MaxNumberOfMessagesPerSecond']}/s"
    if task.get("DestinationArn"):
        line += f", to {task['DestinationArn'].rsplit(':', 1)[-1]}"
    if task.get("FailureReason"):
        line += f"; failed: {task['FailureReason']}"
    return line


# --- The stage's dead-letter queues -------------------------------------------------------------


def stage_queues(aws: Aws, stage: str) -> list[tuple[str, Queue]]:
    """(stack, queue) for every queue of the stage's stacks, ``MangaAssist-<stage>-*``, as CloudFormation lists them."""
    cloudformation = aws.client("cloudformation")
    prefix = f"MangaAssist-{stage}-"
    stacks = [
        stack["StackName"]
        for page in cloudformation.get_paginator("describe_stacks").paginate()
        for stack in page.get("Stacks", [])
        if stack["StackName"].startswith(prefix) and stack.get("StackStatus") != "DELETE_COMPLETE"
    ]
    if not stacks:
        raise Refused(
            f"no CloudFormation stacks {prefix}* in {aws.region} for the account of these credentials: "
            "is the stage deployed there? (--region, --profile)"
        )
    queues: list[tuple[str, Queue]] = []
    for stack in sorted(stacks):
        for page in cloudformation.get_paginator("list_stack_resources").paginate(StackName=stack):
            for resource in page.get("StackResourceSummaries", []):
                url = resource.get("PhysicalResourceId")  # a queue's physical id is its URL
                if resource["ResourceType"] != "AWS::SQS::Queue" or not url:
                    continue
                if str(resource.get("ResourceStatus", "")).startswith("DELETE"):
                    continue
                try:
                    queues.append((stack.removeprefix(prefix), aws.queue_at(url)))
                except Refused:
                    continue  # deleted outside CloudFormation
    return queues


def dead_letter_queues(queues: Sequence[tuple[str, Queue]]) -> list[tuple[str, Queue, list[str]]]:
    """(stack, DLQ, names of its source queues) for the queues among ``queues`` that are DLQs.

    A queue is one when another queue's redrive policy names it or its RedriveAllowPolicy says
    ``byQueue``; and when it has no DLQ of its own: the construct library gives every work queue a
    DLQ and leaves it out only on failure destinations (``SecureQueue(dead_letter_queue=False)``),
    and tests/infra/test_invariants.py holds every stage to that. A RedriveAllowPolicy of
    ``denyAll`` says it is none.
    """
    sources: dict[str, list[str]] = {}
    for _, queue in queues:
        if queue.dead_letter_target:
            sources.setdefault(queue.dead_letter_target, []).append(queue.name)
    found: list[tuple[str, Queue, list[str]]] = []
    for stack, queue in queues:
        permission = queue.redrive_permission
        if permission == "denyAll":
            continue
        if queue.arn in sources or permission == "byQueue" or queue.dead_letter_target is None:
            found.append((stack, queue, sorted(sources.get(queue.arn, []))))
    return found


def list_stage(aws: Aws, stage: str, account: str) -> int:
    """Print the stage's DLQs, their depth and where a redrive would send their messages."""
    dlqs = dead_letter_queues(stage_queues(aws, stage))
    consumers = aws.consumers()
    print(f"Dead-letter queues of stage {stage} (account {account}, {aws.region}):")
    for stack, dlq, sources in dlqs:
        print(f"\n  {dlq.name}  [{stack}]")
        depth = f"{dlq.waiting} waiting, {dlq.in_flight} in flight"
        if sources:
            print(f"    {depth}; redrives to {', '.join(sources)}")
        elif dlq.arn in consumers:
            functions = ", ".join(consumer.function for consumer in consumers[dlq.arn])
            print(f"    {depth}; stream failure records of {functions}: replayed from the stream, not redriven")
        else:
            print(f"    {depth}; no source queue: failure records or undeliverable events (a dry run says which)")
    if aws.consumers_unknown:
        print(f"\n(could not list Lambda event source mappings: {aws.consumers_unknown})")
    print("\nLook into one (a dry run): python -m tools.redrive QUEUE; move its messages with --apply")
    return 0


# --- Command line -------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.redrive",
        description=__doc__.splitlines()[0] if __doc__ else None,
        epilog="Exit status: 0 done, 1 some messages not moved, 2 refused or could not start.",
    )
    parser.add_argument("queue", nargs="?", help="the dead-letter queue: name, URL or ARN")
    parser.add_argument("--stage", help="list the dead-letter queues of this stage (stacks MangaAssist-<stage>-*)")
    parser.add_argument("--apply", action="store_true", help="move the messages (without it: a dry run)")
    parser.add_argument("--to", help="the queue to move to: one of the DLQ's sources, or any queue when it has none")
    parser.add_argument("--max", type=int, dest="limit", metavar="N", help="move at most N messages (moves by hand)")
    parser.add_argument("--rate", type=int, metavar="N", help="at most N messages per second (1..500)")
    parser.add_argument(
        "--sample", type=int, default=5, metavar="N", help="messages a dry run shows (0..10, default 5)"
    )
    parser.add_argument(
        "--method",
        choices=("auto", "task", "manual"),
        default="auto",
        help="auto (default): SQS's message move task where it applies, else by hand",
    )
    parser.add_argument("--status", action="store_true", help="show the DLQ's recent message move tasks")
    parser.add_argument("--region", help="AWS region (default: the queue URL's or ARN's, else the profile's)")
    parser.add_argument("--profile", help="AWS profile (default: the environment's credentials)")
    return parser


def _check_usage(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if (args.queue is None) == (args.stage is None):
        parser.error("give a dead-letter queue (name, URL or ARN) or --stage STAGE, one of them")
    if args.stage is not None and (args.apply or args.to or args.limit or args.status):
        parser.error("--stage lists dead-letter queues; --apply, --to, --max and --status need a QUEUE")
    if args.status and (args.apply or args.to or args.limit):
        parser.error("--status only shows the move tasks; give --apply, --to or --max without it")
    if args.limit is not None and args.limit < 1:
        parser.error(f"--max must be at least 1 (given {args.limit})")
    if args.rate is not None and not RATE_RANGE[0] <= args.rate <= RATE_RANGE[1]:
        parser.error(f"--rate must be {RATE_RANGE[0]}..{RATE_RANGE[1]} messages per second (given {args.rate})")
    if not 0 <= args.sample <= BATCH:
        parser.error(f"--sample must be 0..{BATCH} (given {args.sample})")
    if args.method == "task" and args.limit is not None:
        parser.error("--max needs moving by hand: a message move task cannot be bounded")
    for name in ("queue", "to"):
        value = getattr(args, name)
        if value is not None:
            try:
                parse_queue(value)
            except ValueError as error:
                parser.error(str(error))


def redrive(aws: Aws, args: argparse.Namespace, *, sleep: Callable[[float], None], clock: Callable[[], float]) -> int:
    """Dry run, apply or status for one dead-letter queue; the exit status."""
    dlq = aws.queue(parse_queue(args.queue))
    if args.status:
        try:
            tasks = aws.move_tasks(dlq, most=10)
        except _NoMoveTasks as error:
            raise Refused(f"no message move tasks here: {error}") from None
        print(
            f"Message move tasks of {dlq.name}, newest first:"
            if tasks
            else f"{dlq.name} has had no message move tasks."
        )
        for task in tasks:
            print(f"  {_task_line(task)}" + (f"\n    handle {task['TaskHandle']}" if task.get("TaskHandle") else ""))
        return 0
    sources = aws.sources(dlq)
    consumers = [] if sources else aws.consumers().get(dlq.arn, [])
    to = aws.queue(parse_queue(args.to)) if args.to else None
    show_queue(dlq, sources, consumers, aws)
    sample = peek(aws, dlq, args.sample) if not args.apply else []
    destination = choose_destination(dlq, sources, to, consumers, {message.kind for message in sample})
    by_task, how = use_task(dlq, sources, destination, method=args.method, limit=args.limit)
    bound = f"up to {args.limit}" if args.limit else "all"
    print(f"\nPlan: move {bound} of its messages to {destination.name}, {how}.")
    if not args.apply:
        if by_task:
            _show_move_tasks(aws, dlq)
        print("Dry run: nothing was moved. Add --apply to move them.")
        return 0
    if dlq.waiting == 0 and dlq.in_flight == 0:
        print("Nothing waiting in the DLQ (the counts are approximate, about a minute behind).")
        return 0
    if by_task:
        try:
            return start_task(aws, dlq, destination, args.rate)
        except _NoMoveTasks as error:
            if args.method == "task":
                raise Refused(f"no message move tasks here: {error}") from None
            print(f"No message move task here ({error}): moving by hand instead.")
    move = ManualMove(
        aws,
        dlq,
        destination,
        limit=args.limit,
        rate=args.rate,
        skip_records=not sources,
        backoff=Backoff(sleep=sleep),
        clock=clock,
        sleep=sleep,
    )
    report = move.run()
    print_report(report, dlq, destination)
    try:
        remaining = aws.queue_at(dlq.url)
        print(f"{dlq.name} now holds about {remaining.waiting} waiting, {remaining.in_flight} in flight.")
    except (Refused, ClientError, BotoCoreError) as error:
        print(f"(could not read the DLQ's depth afterwards: {error})")
    return 0 if report.complete else 1


def main(
    argv: Sequence[str] | None = None,
    *,
    session: boto3.Session | None = None,
    receive_wait_seconds: int = RECEIVE_WAIT_SECONDS,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    _check_usage(parser, args)
    try:
        session = session or boto3.Session(profile_name=args.profile)
        region = args.region
        pinned_account = None
        if args.stage is not None:
            pinned_account, pinned_region = _stage_home(args.stage)
            region = region or pinned_region
        else:
            for text in (args.queue, args.to):
                named = parse_queue(text).region if text else None
                if named and region and named != region:
                    raise Refused(f"{text} is in {named}, not {region}: a redrive stays within one region")
                region = region or named
        region = region or session.region_name
        if not region:
            raise Refused("no AWS region: give --region, a queue URL or ARN, or set AWS_REGION")
        aws = Aws(session, region, receive_wait_seconds=receive_wait_seconds)
        account = str(aws.client("sts").get_caller_identity()["Account"])
        if pinned_account and account != pinned_account:
            raise Refused(
                f"stage {args.stage} lives in account {pinned_account} (cdk.json); these credentials are for {account}"
            )
        if args.stage is not None:
            return list_stage(aws, args.stage, account)
        return redrive(aws, args, sleep=sleep, clock=clock)
    except Refused as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except (NoCredentialsError, PartialCredentialsError):
        print("error: no AWS credentials: set AWS_PROFILE (or --profile), or sign in (aws sso login)", file=sys.stderr)
        return 2
    except (ProfileNotFound, NoRegionError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except ClientError as error:
        if error_code(error) in _BAD_CREDENTIALS:
            print(f"error: AWS refused these credentials ({describe(error)}): renew them", file=sys.stderr)
        else:
            print(f"error: {describe(error)}", file=sys.stderr)
        return 2
    except BotoCoreError as error:
        print(f"error: {describe(error)}", file=sys.stderr)
        return 2


def _stage_home(stage: str) -> tuple[str | None, str | None]:
    """The account and region cdk.json pins for ``stage`` (Refused for a stage it does not define)."""
    from stacks.config import ConfigError  # imports the CDK (a second), so only when a stage is asked for
    from tools.deploy import stage_config

    try:
        config = stage_config(stage)
    except ConfigError as error:
        raise Refused(str(error)) from None
    return config.account, config.region


if __name__ == "__main__":
    sys.exit(main())
