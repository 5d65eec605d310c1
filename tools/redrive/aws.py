"""The tool's AWS clients, one session and region, and one line for an AWS error."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from lambdas.shared.retry import error_code
from tools.redrive.queues import BATCH, Consumer, Message, Queue, QueueRef, Refused

#: botocore's standard retry mode retries a throttled, 5xx or dropped call this many times in all.
CALL_ATTEMPTS: Final = 5
#: Error codes meaning "no such queue" (JSON protocol and its query-compatible form).
_NO_QUEUE = frozenset({"AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"})
#: Error codes meaning "this endpoint or queue has no message move tasks".
NO_MOVE_TASKS = frozenset(
    {"UnsupportedOperation", "AWS.SimpleQueueService.UnsupportedOperation", "InvalidAction", "UnknownOperation"}
)


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
        """The DLQ's most recent message move tasks, newest first; NoMoveTasks where there are none."""
        try:
            return list(self.sqs.list_message_move_tasks(SourceArn=dlq.arn, MaxResults=most).get("Results", []))
        except NotImplementedError as error:  # moto, and other emulators, raise this for the API
            raise NoMoveTasks("this endpoint does not implement ListMessageMoveTasks") from error
        except ClientError as error:
            if error_code(error) in NO_MOVE_TASKS:
                raise NoMoveTasks(describe(error)) from error
            raise


class NoMoveTasks(Exception):
    """SQS message move tasks are not available for this queue or at this endpoint."""


def describe(error: BaseException) -> str:
    """One line for an AWS error: the operation, code and message, no traceback."""
    if isinstance(error, ClientError):
        info = error.response.get("Error", {})
        return f"{error.operation_name}: {info.get('Code', '?')}: {info.get('Message', '')}".rstrip(": ")
    return str(error)
