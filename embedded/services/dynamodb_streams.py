"""The DynamoDB stream pump: what Lambda's stream poller does, on moto, when asked to.

For every event source mapping on a table stream, ``pump()`` reads the records written since the
last pump (``dynamodbstreams`` on moto), drops those the mapping's filters reject, and invokes the
function with batches of ``BatchSize`` records in stream order, shaped as Lambda sends them.

Failure handling is Lambda's for stream sources:

* a partial batch response (``ReportBatchItemFailures``) checkpoints before the lowest failed
  sequence number; the batch is retried from that record on (the records after it come again,
  as in AWS, so handlers must be idempotent);
* a function error retries the whole batch, or with ``BisectBatchOnFunctionError`` splits it in
  two and retries the halves (a split does not count as a retry);
* after ``MaximumRetryAttempts`` retries (or past ``MaximumRecordAgeInSeconds``) the batch is
  given up: an invocation record naming its sequence range goes to the on-failure destination
  (SQS queue or SNS topic), and the pump moves on.

``MaximumBatchingWindowInSeconds`` is not waited for: a pump delivers what is there.
"""

from __future__ import annotations

import datetime
import json
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from moto.events.models import EventPattern

from embedded.cloudformation.loaders import Cloud, EventSourceMapping
from embedded.events import stream_record_from
from embedded.iam.access import Access
from embedded.services.lambda_invoke import Outcome, invoke

#: What Lambda's stream poller calls with the function's role (Lambda developer guide, "Using AWS
#: Lambda with Amazon DynamoDB": execution role permissions).
STREAM_READ_ACTIONS = ("DescribeStream", "GetRecords", "GetShardIterator", "ListStreams")

#: A mapping with MaximumRetryAttempts unset retries until the record expires (a day); the
#: harness stops there instead and fails loudly.
UNBOUNDED_RETRY_CAP = 25


class StreamRetriesForever(RuntimeError):
    """A batch keeps failing under a mapping that never gives up (no MaximumRetryAttempts)."""


@dataclass
class Delivery:
    """One invocation made by a pump: the records' ids and how it ended."""

    mapping: str
    item_ids: list[str]
    outcome: Outcome
    attempt: int


@dataclass
class StreamPump:
    """Delivers a table stream to the functions mapped onto it (see module docstring)."""

    cloud: Cloud
    mappings: list[EventSourceMapping]
    clock: Callable[[], float]
    deliveries: list[Delivery] = field(default_factory=list)
    discarded: list[dict[str, Any]] = field(default_factory=list)
    _positions: dict[str, str | None] = field(default_factory=dict)
    _readable: dict[str, bool] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for mapping in self.mappings:
            # TRIM_HORIZON and LATEST coincide here: the pump starts with the stack.
            self._positions[mapping.logical_id] = self._latest_sequence(mapping.event_source_arn)

    def _latest_sequence(self, stream_arn: str) -> str | None:
        records = self._read(stream_arn, None)
        return records[-1]["dynamodb"]["SequenceNumber"] if records else None

    def _read(self, stream_arn: str, after: str | None) -> list[dict[str, Any]]:
        streams = self.cloud.client("dynamodbstreams")
        shards = streams.describe_stream(StreamArn=stream_arn)["StreamDescription"]["Shards"]
        records: list[dict[str, Any]] = []
        for shard in shards:
            args: dict[str, Any] = {"StreamArn": stream_arn, "ShardId": shard["ShardId"]}
            if after is None:
                args["ShardIteratorType"] = "TRIM_HORIZON"
            else:
                args.update(ShardIteratorType="AFTER_SEQUENCE_NUMBER", SequenceNumber=after)
            iterator = streams.get_shard_iterator(**args)["ShardIterator"]
            while iterator:
                response = streams.get_records(ShardIterator=iterator, Limit=1000)
                records.extend(response["Records"])
                if not response["Records"]:
                    break
                iterator = response.get("NextShardIterator")
        return records

    def pending(self) -> int:
        """Records written since the last pump, over every mapping.

        Counted from the stream's newest sequence number in moto's backend rather than by reading
        the records: ``settle`` asks after every pump, and reading a backlog of thousands of
        records through the API (each serialized by moto and parsed by botocore) only to count
        them cost a loaded stage most of its settle time.
        """
        total = 0
        for mapping in self.mappings:
            if not self.readable(mapping):
                continue  # nothing will ever read it: the refusal is in the stage's report
            newest = self._newest_sequence(mapping.event_source_arn)
            position = self._positions[mapping.logical_id]
            if newest is not None:
                total += newest - (int(position) if position is not None else self._first_sequence(mapping) - 1)
        return total

    def _shard(self, stream_arn: str) -> Any:
        from moto.dynamodbstreams.models import dynamodbstreams_backends

        backend = dynamodbstreams_backends[self.cloud.account][self.cloud.region]
        return backend._get_table_from_arn(stream_arn).stream_shard

    def _newest_sequence(self, stream_arn: str) -> int | None:
        shard = self._shard(stream_arn)
        return int(shard.starting_sequence_number) + len(shard.items) - 1 if shard.items else None

    def _written_after(self, stream_arn: str, position: str | None) -> bool:
        """Whether the stream holds a record after ``position`` (None: before the first), from moto's
        backend: ``pump`` asks every mapping at every settle poll, mostly to find nothing new, and
        an empty read through the API is three requests."""
        newest = self._newest_sequence(stream_arn)
        return newest is not None and (position is None or newest > int(position))

    def _first_sequence(self, mapping: EventSourceMapping) -> int:
        return int(self._shard(mapping.event_source_arn).starting_sequence_number)

    def readable(self, mapping: EventSourceMapping) -> bool:
        """Whether the mapping's function role may read its stream (decided once; a refusal is reported).

        Lambda polls a stream with the function's execution role: without ``dynamodb:GetRecords``
        and the rest (and ``kms:Decrypt`` on the table's key) the mapping delivers nothing.
        """
        if mapping.logical_id not in self._readable:
            guard = self.cloud.guard
            role = guard.authority.function_roles[mapping.function_name] if guard else ""
            wanted = [Access(f"dynamodb:{a}", mapping.event_source_arn) for a in STREAM_READ_ACTIONS]
            made_by = f"event source mapping {mapping.logical_id} of {mapping.function_name}"
            self._readable[mapping.logical_id] = guard is None or guard.as_role(role, wanted, made_by) is None
        return self._readable[mapping.logical_id]

    def pump(self) -> int:
        """Deliver everything written since the last pump; returns the number of invocations."""
        before = len(self.deliveries)
        for mapping in self.mappings:
            if not mapping.enabled or not self.readable(mapping):
                continue
            started_at = self._positions[mapping.logical_id]
            if not self._written_after(mapping.event_source_arn, started_at):
                continue
            raw = self._read(mapping.event_source_arn, started_at)
            if not raw:
                continue
            self._positions[mapping.logical_id] = raw[-1]["dynamodb"]["SequenceNumber"]
            records = [self._lambda_record(r, mapping) for r in raw]
            records = [r for r in records if _passes(mapping, r)]
            for start in range(0, len(records), mapping.batch_size):
                owed = self._deliver(mapping, records[start : start + mapping.batch_size])
                if owed:  # throttled: the poller backs off and reads again from the first record owed
                    first = min(int(r["dynamodb"]["SequenceNumber"]) for r in owed)
                    earlier = [
                        r["dynamodb"]["SequenceNumber"] for r in raw if int(r["dynamodb"]["SequenceNumber"]) < first
                    ]
                    self._positions[mapping.logical_id] = earlier[-1] if earlier else started_at
                    break
        return len(self.deliveries) - before

    def _lambda_record(self, record: dict[str, Any], mapping: EventSourceMapping) -> dict[str, Any]:
        shaped = stream_record_from(record, stream_arn=mapping.event_source_arn, region=self.cloud.region)
        shaped["dynamodb"].setdefault("ApproximateCreationDateTime", self.clock())
        return shaped

    def _deliver(self, mapping: EventSourceMapping, batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Deliver one batch with Lambda's retries; the records still owed when Lambda throttled (else none)."""
        lambda_client = self.cloud.client("lambda")
        limit = mapping.maximum_retry_attempts
        pending: deque[tuple[list[dict[str, Any]], int]] = deque([(batch, 0)])
        while pending:
            records, attempt = pending.popleft()
            outcome = invoke(lambda_client, mapping.function_name, {"Records": records})
            ids = [r["dynamodb"]["SequenceNumber"] for r in records]
            self.deliveries.append(Delivery(mapping.logical_id, ids, outcome, attempt))
            if outcome.throttled:  # not an attempt: Lambda retries throttles until the records expire
                return [*records, *(r for rest, _ in pending for r in rest)]
            failed = outcome.failed_item_ids() if mapping.report_batch_item_failures else None
            if outcome.ok and not failed:
                continue
            if outcome.ok and failed:
                positions = [ids.index(f) for f in failed if f in ids]
                # An identifier that is not in the batch fails the whole batch, as in Lambda.
                retry = records[min(positions) :] if len(positions) == len(failed) else records
            elif mapping.bisect_on_error and len(records) > 1:
                half = len(records) // 2
                pending.appendleft((records[half:], attempt))
                pending.appendleft((records[:half], attempt))
                continue
            else:
                retry = records
            if self._expired(retry, attempt + 1, limit):
                self._give_up(mapping, retry, attempt + 1, outcome)
            else:
                pending.appendleft((retry, attempt + 1))
        return []

    def _expired(self, records: list[dict[str, Any]], attempts: int, limit: int | None) -> bool:
        if limit is None or limit < 0:
            if attempts > UNBOUNDED_RETRY_CAP:
                raise StreamRetriesForever(
                    f"batch starting at {records[0]['dynamodb']['SequenceNumber']} failed {attempts} times and its "
                    "mapping sets no MaximumRetryAttempts: in AWS it would block the shard until the records expire"
                )
            return False
        return attempts > limit

    def _give_up(
        self, mapping: EventSourceMapping, records: list[dict[str, Any]], attempts: int, outcome: Outcome
    ) -> None:
        self.discarded.extend(records)
        if mapping.on_failure_arn is None:
            return
        first, last = records[0], records[-1]
        arrival = [float(r["dynamodb"].get("ApproximateCreationDateTime", 0)) for r in (first, last)]
        message = {
            "requestContext": {
                "requestId": f"harness-{first['dynamodb']['SequenceNumber']}",
                "functionArn": self.cloud.arn("lambda", f"function:{mapping.function_name}"),
                "condition": "RetryAttemptsExhausted",
                "approximateInvokeCount": attempts,
            },
            "responseContext": {
                "statusCode": 200,
                "executedVersion": "$LATEST",
                "functionError": outcome.error or "PartialBatchFailure",
            },
            "version": "1.0",
            "timestamp": datetime.datetime.fromtimestamp(self.clock(), datetime.UTC).isoformat(),
            "DDBStreamBatchInfo": {
                "shardId": first.get("shardId", "shardId-0"),
                "startSequenceNumber": first["dynamodb"]["SequenceNumber"],
                "endSequenceNumber": last["dynamodb"]["SequenceNumber"],
                "approximateArrivalOfFirstRecord": datetime.datetime.fromtimestamp(
                    arrival[0], datetime.UTC
                ).isoformat(),
                "approximateArrivalOfLastRecord": datetime.datetime.fromtimestamp(arrival[1], datetime.UTC).isoformat(),
                "batchSize": len(records),
                "streamArn": mapping.event_source_arn,
            },
        }
        send_to_destination(self.cloud, mapping.on_failure_arn, message, function_name=mapping.function_name)


def send_to_destination(cloud: Cloud, arn: str, message: dict[str, Any], *, function_name: str) -> None:
    """Put an invocation record on an SQS queue or SNS topic destination, as the function's role.

    Lambda sends to a destination with the function's execution role: a role that may not send
    there loses the record (kept in the stage's report), as in AWS.
    """
    body = json.dumps(message)
    service = arn.split(":")[2]
    if cloud.guard is not None:
        action = {"sqs": "sqs:SendMessage", "sns": "sns:Publish"}.get(service, f"{service}:unknown")
        role = cloud.guard.authority.function_roles[function_name]
        made_by = f"Lambda destination of {function_name}"
        if cloud.guard.as_role(role, [Access(action, arn)], made_by) is not None:
            return
    if service == "sqs":
        sqs = cloud.client("sqs")
        name, account = arn.split(":")[5], arn.split(":")[4]
        url = sqs.get_queue_url(QueueName=name, QueueOwnerAWSAccountId=account)["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody=body)
    elif service == "sns":
        cloud.client("sns").publish(TopicArn=arn, Message=body)
    else:
        raise NotImplementedError(f"on-failure destination {arn}: only SQS and SNS are emulated")


def _passes(mapping: EventSourceMapping, record: dict[str, Any]) -> bool:
    """Lambda's FilterCriteria: a record passes when any filter pattern matches it."""
    if not mapping.filters:
        return True
    event: Any = record
    return any(EventPattern.load(pattern).matches_event(event) for pattern in mapping.filters)
