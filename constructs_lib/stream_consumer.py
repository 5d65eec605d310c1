"""A Lambda function consuming a DynamoDB stream the safe way: partial failures, bisect, bounded retries."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from constructs_lib.nag_findings import acknowledge_grant, kms_grant_findings
from constructs_lib.secure_queue import SecureQueue
from constructs_lib.validation import PropErrors, is_unresolved

#: DynamoDB streams keep records for 24 hours; a record older than that is gone anyway.
STREAM_RETENTION_SECONDS = 86400


class StreamConsumer(Construct):
    """Event source mapping from a table's stream to a function, with an on-failure SQS DLQ.

    Example::

        StreamConsumer(self, "ChangesSource", function=processor, table=table,
                       encryption_key=key, batch_size=100, max_batching_window=Duration.seconds(5),
                       filters=[{"dynamodb": {"Keys": {"SK": {"S": [{"prefix": "ORDER#"}]}}}}])

    The mapping reports batch item failures (the function returns ``batchItemFailures``), bisects
    a failing batch, retries a bounded number of times, drops records older than
    ``max_record_age`` (below the stream's 24 h retention, so a stuck record is sent to the DLQ
    instead of silently expiring) and sends what it gives up on to the DLQ. For a DynamoDB stream
    the DLQ message holds the shard and sequence-number range, not the record: an operator
    re-reads the range while it is in the stream.

    Args:
        function: the consumer. Its role gets stream read access through the mapping.
        table: the table whose stream is consumed; it must have a stream.
        encryption_key: customer key of the DLQ (when a new one is created).
        starting_position: defaults to TRIM_HORIZON: a new mapping starts at the oldest record
            still in the stream, so changes written between table creation and mapping creation
            are not skipped; the consumer must be idempotent (it must be anyway: at-least-once).
        batch_size: records per invocation, 1..1000. Defaults to 100.
        max_batching_window: wait for a fuller batch, 0..300 s. Defaults to 5 seconds.
        retry_attempts: retries of a failing batch, 0..10000. Defaults to 5.
        max_record_age: 60 s..24 h. Defaults to 6 hours.
        parallelization_factor: batches per shard at once, 1..10. Defaults to 1 (strict order
            per partition key; raising it keeps order per key but costs more invocations).
        filters: Lambda event filter patterns (ORed). Defaults to none (every record invokes).
        existing_dead_letter_queue: the on-failure queue to use. Defaults to a new
            :class:`SecureQueue` without a DLQ of its own (``encryption_key``, 14 days' retention).
        dead_letter_queue_props: further properties of the new DLQ (e.g. ``retention_period``);
            they override its defaults. Defaults to none.
        iterator_age_threshold: alarm when the function's IteratorAge stays above this (3 of 5
            minutes): the consumer is falling behind the stream. Defaults to 60 seconds (a
            minute behind is late for change-driven work). ``iterator_age_alarm`` and
            ``dead_letter_alarm`` (any message in the DLQ) have no actions; the caller adds them
            (e.g. an ops topic).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        function: lambda_.IFunction,
        table: dynamodb.ITable,
        encryption_key: kms.IKey,
        starting_position: lambda_.StartingPosition = lambda_.StartingPosition.TRIM_HORIZON,
        batch_size: int = 100,
        max_batching_window: Duration | None = None,
        retry_attempts: int = 5,
        max_record_age: Duration | None = None,
        parallelization_factor: int = 1,
        filters: Sequence[Mapping[str, Any]] = (),
        existing_dead_letter_queue: sqs.IQueue | None = None,
        dead_letter_queue_props: sqs.QueueProps | None = None,
        iterator_age_threshold: Duration | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        errors = PropErrors(self)
        errors.check_exclusive(
            existing_dead_letter_queue=existing_dead_letter_queue, dead_letter_queue_props=dead_letter_queue_props
        )
        settings = _checked(
            errors,
            _MappingSettings(
                batch_size=batch_size,
                window=max_batching_window if max_batching_window is not None else Duration.seconds(5),
                retry_attempts=retry_attempts,
                age=max_record_age or Duration.hours(6),
                parallelization_factor=parallelization_factor,
                filters=tuple(filters),
            ),
        )

        self.dead_letter_queue: sqs.IQueue = existing_dead_letter_queue or (
            SecureQueue(
                self,
                "DeadLetterQueue",
                encryption_key=encryption_key,
                dead_letter_queue=False,
                queue_props=dead_letter_queue_props,
            ).queue
        )
        self.event_source = sources.DynamoEventSource(
            table,
            starting_position=starting_position,
            batch_size=settings.batch_size,
            max_batching_window=settings.window,
            bisect_batch_on_error=True,
            report_batch_item_failures=True,
            retry_attempts=settings.retry_attempts,
            max_record_age=settings.age,
            parallelization_factor=settings.parallelization_factor,
            on_failure=sources.SqsDlq(self.dead_letter_queue),
            filters=[lambda_.FilterCriteria.filter(dict(pattern)) for pattern in settings.filters] or None,
        )
        function.add_event_source(self.event_source)
        # The mapping's grants: dynamodb:ListStreams (no resource-level permissions), and sending to the DLQ.
        findings = {
            "Resource::*": "dynamodb:ListStreams (the event source mapping's grant) supports no resource-level "
            "permissions."
        }
        if self.dead_letter_queue.encryption_master_key is not None:
            findings.update(kms_grant_findings("the mapping's encrypted on-failure queue"))
        acknowledge_grant(function, findings)
        self.iterator_age_alarm, self.dead_letter_alarm = self._alarms(function, iterator_age_threshold)

    def _alarms(
        self, function: lambda_.IFunction, iterator_age_threshold: Duration | None
    ) -> tuple[cloudwatch.Alarm, cloudwatch.Alarm]:
        """The consumer falling behind (IteratorAge), and records given up on (any message in the DLQ)."""
        age_limit = iterator_age_threshold or Duration.seconds(60)
        iterator_age = cloudwatch.Alarm(
            self,
            "IteratorAgeAlarm",
            metric=function.metric("IteratorAge", statistic="Maximum", period=Duration.minutes(1)),
            threshold=age_limit.to_milliseconds(),
            evaluation_periods=5,
            datapoints_to_alarm=3,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description=f"Stream consumer falling behind: IteratorAge above {age_limit.to_seconds()} s",
        )
        dead_letters = cloudwatch.Alarm(
            self,
            "DeadLetterAlarm",
            metric=self.dead_letter_queue.metric_approximate_number_of_messages_visible(
                statistic="Maximum", period=Duration.minutes(1)
            ),
            threshold=0,
            evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description="Stream records given up on: re-read the DLQ's shard/sequence range while in the stream",
        )
        return iterator_age, dead_letters


def _seconds(duration: Duration) -> float | str:
    """A duration's seconds for a message (an unresolved one is never judged, so never shown)."""
    return "a token" if duration.is_unresolved() else duration.to_seconds()


@dataclass(frozen=True)
class _MappingSettings:
    """The event source mapping's settings, as given or, where one was out of range, its default."""

    batch_size: int
    window: Duration
    retry_attempts: int
    age: Duration
    parallelization_factor: int
    filters: tuple[Mapping[str, Any], ...]


def _checked(errors: PropErrors, given: _MappingSettings) -> _MappingSettings:
    """``given`` with each setting that is out of range recorded (with the fix) and replaced by its default."""
    batch_size, window, retry_attempts = given.batch_size, given.window, given.retry_attempts
    age, parallelization_factor, filters = given.age, given.parallelization_factor, given.filters
    if not errors.check(
        is_unresolved(batch_size) or 1 <= batch_size <= 1000,
        f"batch_size must be 1..1000 for a DynamoDB stream (given {batch_size})",
    ):
        batch_size = 100
    if not errors.check(
        window.is_unresolved() or 0 <= window.to_seconds() <= 300,
        f"max_batching_window must be 0..300 seconds (given {_seconds(window)})",
    ):
        window = Duration.seconds(5)
    if not errors.check(
        is_unresolved(retry_attempts) or 0 <= retry_attempts <= 10000,
        f"retry_attempts must be 0..10000, never infinite (given {retry_attempts})",
    ):
        retry_attempts = 5
    if not errors.check(
        age.is_unresolved() or 60 <= age.to_seconds() < STREAM_RETENTION_SECONDS,
        f"max_record_age must be 60..{STREAM_RETENTION_SECONDS - 1} seconds, below the stream's "
        f"24 h retention (given {_seconds(age)})",
    ):
        age = Duration.hours(6)
    if not errors.check(
        is_unresolved(parallelization_factor) or 1 <= parallelization_factor <= 10,
        f"parallelization_factor must be 1..10 (given {parallelization_factor})",
    ):
        parallelization_factor = 1
    if not errors.check(len(filters) <= 5, f"at most 5 filter patterns per mapping (given {len(filters)})"):
        filters = filters[:5]
    return _MappingSettings(batch_size, window, retry_attempts, age, parallelization_factor, filters)
