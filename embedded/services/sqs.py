"""The SQS pump: what Lambda's queue poller does for the queue event source mappings.

``pump()`` receives up to ``BatchSize`` messages per invocation, invokes the mapped function with
them shaped as Lambda sends them, deletes what succeeded and makes what failed visible again at
once (time compressed: the visibility timeout is not waited for). A batch Lambda throttles
(reserved concurrency) fails like an error, and the mapping backs off until the next pump. With
``ReportBatchItemFailures`` only the listed ``itemIdentifier`` (message ids) fail; a function
error fails the whole batch. The queue's own redrive policy moves a message to its DLQ after
``maxReceiveCount`` receives (moto does that on receive, as SQS does).
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from typing import Any

from moto.events.models import EventPattern

from embedded.cloudformation.loaders import Cloud, EventSourceMapping
from embedded.events import sqs_record_from
from embedded.iam.access import Access
from embedded.services.dynamodb_streams import Delivery
from embedded.services.lambda_invoke import invoke

MAX_ROUNDS = 50
#: What Lambda's queue poller calls with the function's role (Lambda developer guide, "Using Lambda
#: with Amazon SQS": execution role permissions).
QUEUE_POLL_ACTIONS = ("ReceiveMessage", "DeleteMessage", "GetQueueAttributes")


@dataclass
class SqsPump:
    """Delivers queue messages to the functions mapped onto the queues (see module docstring)."""

    cloud: Cloud
    mappings: list[EventSourceMapping]
    deliveries: list[Delivery] = field(default_factory=list)
    #: every message body each mapped queue handed to its function (queue ARN -> bodies, in order)
    received: dict[str, list[str]] = field(default_factory=dict)
    _readable: dict[str, bool] = field(default_factory=dict)
    _urls: dict[str, str] = field(default_factory=dict)

    def readable(self, mapping: EventSourceMapping) -> bool:
        """Whether the mapping's function role may poll its queue (decided once; a refusal is reported).

        Lambda polls with the function's execution role: ``sqs:ReceiveMessage``, ``sqs:DeleteMessage``
        and ``sqs:GetQueueAttributes`` on the queue, and ``kms:Decrypt`` on an encrypted queue's key.
        """
        if mapping.logical_id not in self._readable:
            guard = self.cloud.guard
            role = guard.authority.function_roles[mapping.function_name] if guard else ""
            wanted = [Access(f"sqs:{a}", mapping.event_source_arn) for a in QUEUE_POLL_ACTIONS]
            made_by = f"event source mapping {mapping.logical_id} of {mapping.function_name}"
            self._readable[mapping.logical_id] = guard is None or guard.as_role(role, wanted, made_by) is None
        return self._readable[mapping.logical_id]

    def queue_url(self, arn: str) -> str:
        """The queue's URL, asked once per queue."""
        if arn not in self._urls:
            parts = arn.split(":")
            self._urls[arn] = self.cloud.client("sqs").get_queue_url(
                QueueName=parts[5], QueueOwnerAWSAccountId=parts[4]
            )["QueueUrl"]
        return self._urls[arn]

    def waiting(self, arn: str) -> bool:
        """Whether a receive on the queue would return a message: one visible and not delayed.

        Read from moto's backend: every pump asks every mapped queue, and an empty queue's answer
        through the API (a request moto serializes and botocore parses) cost a settling stage
        most of its idle polls. A queue moto does not know is asked through the API, which fails.
        """
        from moto.sqs.models import sqs_backends

        _, _, _, region, account, name = arn.split(":")
        queue = sqs_backends[account][region].queues.get(name)
        return queue is None or queue.approximate_number_of_messages > 0

    def pump(self) -> int:
        """Drain every mapped queue (bounded); returns the number of invocations."""
        before = len(self.deliveries)
        backing_off: set[str] = set()  # throttled this pump: Lambda's poller backs off until the next
        for _round in range(MAX_ROUNDS):
            progressed = False
            for mapping in self.mappings:
                if not mapping.enabled or mapping.logical_id in backing_off or not self.readable(mapping):
                    continue
                if self._pump_once(mapping):
                    progressed = True
                    if self.deliveries[-1].outcome.throttled:
                        backing_off.add(mapping.logical_id)
            if not progressed:
                break
        return len(self.deliveries) - before

    def _receive(self, url: str, limit: int) -> list[dict[str, Any]]:
        sqs = self.cloud.client("sqs")
        messages: list[dict[str, Any]] = []
        while len(messages) < limit:
            response = sqs.receive_message(
                QueueUrl=url,
                MaxNumberOfMessages=min(10, limit - len(messages)),
                AttributeNames=["All"],
                MessageAttributeNames=["All"],
                VisibilityTimeout=30,
            )
            batch = response.get("Messages", [])
            if not batch:
                break
            messages.extend(batch)
        return messages

    def _pump_once(self, mapping: EventSourceMapping) -> bool:
        if not self.waiting(mapping.event_source_arn):
            return False
        sqs = self.cloud.client("sqs")
        url = self.queue_url(mapping.event_source_arn)
        messages = self._receive(url, mapping.batch_size)
        if not messages:
            return False
        records = [sqs_record_from(m, queue_arn=mapping.event_source_arn) for m in messages]
        seen = self.received.setdefault(mapping.event_source_arn, [])
        seen.extend(r["body"] for r in records if r["attributes"].get("ApproximateReceiveCount") == "1")
        passing = [r for r in records if _passes(mapping, r)]
        # Lambda deletes messages its filters reject.
        for record in records:
            if record not in passing:
                sqs.delete_message(QueueUrl=url, ReceiptHandle=record["receiptHandle"])
        if not passing:
            return True
        outcome = invoke(self.cloud.client("lambda"), mapping.function_name, {"Records": passing})
        ids = [r["messageId"] for r in passing]
        self.deliveries.append(Delivery(mapping.logical_id, ids, outcome, 0))
        failed: set[str]
        if not outcome.ok:
            failed = set(ids)
        else:
            listed = outcome.failed_item_ids() if mapping.report_batch_item_failures else None
            failed = set(listed or [])
            if listed and not failed <= set(ids):
                failed = set(ids)  # an unknown identifier fails the whole batch, as in Lambda
        for record in passing:
            if record["messageId"] in failed:
                sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=record["receiptHandle"], VisibilityTimeout=0)
            else:
                sqs.delete_message(QueueUrl=url, ReceiptHandle=record["receiptHandle"])
        return True


def _passes(mapping: EventSourceMapping, record: dict[str, Any]) -> bool:
    if not mapping.filters:
        return True
    candidate = dict(record)
    with contextlib.suppress(ValueError):
        candidate["body"] = json.loads(record["body"])
    event: Any = candidate
    return any(EventPattern.load(pattern).matches_event(event) for pattern in mapping.filters)
