"""What the operator names (a queue reference) and what SQS answers (a queue, its messages)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final

#: SQS's batch size, and the most messages one receive returns.
BATCH: Final = 10
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
