"""An SQS queue hardened by default: customer-key encryption, SSL only, and a dead-letter queue."""

from __future__ import annotations

from typing import Any

from aws_cdk import Acknowledgment, Duration, RemovalPolicy, Validations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from constructs_lib.validation import PropErrors, struct_values


class SecureQueue(Construct):
    """A KMS-encrypted, SSL-only queue that moves a message to its own DLQ after N receives.

    Example::

        work = SecureQueue(self, "Work", encryption_key=key, visibility_timeout=Duration.minutes(3))
        failures = SecureQueue(self, "Failures", encryption_key=key, dead_letter_queue=False)
        fn = SharedFunction(..., on_failure=failures.queue)

    Args:
        encryption_key: customer-managed KMS key of the queue (and of its DLQ). Required.
        visibility_timeout: defaults to 30 seconds; give at least 6x the consumer's timeout.
        retention_period: how long a message may wait. Defaults to 4 days for a work queue and
            14 days (the maximum) for a dead-letter queue, so a failure outlives a long weekend.
        max_receive_count: receives before a message moves to the DLQ, 1..1000. Defaults to 3.
        dead_letter_queue: give this queue a DLQ of its own. Defaults to true; set false for a
            queue that *is* a dead-letter queue or failure destination (Lambda async on-failure,
            event source mapping on-failure, EventBridge target DLQ): nothing consumes it, an
            operator reads and redrives it.
        removal_policy: defaults to DESTROY (messages are transient; a DLQ's are redriven or lost
            with the stage on purpose).
        queue_props: further properties of the queue (e.g. ``fifo``, ``delivery_delay``); they
            override the hardened defaults above, so loosening one is explicit. Defaults to none.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        encryption_key: kms.IKey,
        visibility_timeout: Duration | None = None,
        retention_period: Duration | None = None,
        max_receive_count: int = 3,
        dead_letter_queue: bool = True,
        removal_policy: RemovalPolicy = RemovalPolicy.DESTROY,
        queue_props: sqs.QueueProps | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        errors = PropErrors(self)
        if not errors.check_range("max_receive_count", max_receive_count, 1, 1000):
            # Synthesis fails on the recorded error; SQS's own check would stop the build here first.
            max_receive_count = 1
        visibility = visibility_timeout or Duration.seconds(30)
        if not visibility.is_unresolved():
            errors.check(
                visibility.to_seconds() <= 43200,
                f"visibility_timeout must be at most 12 hours (given {visibility.to_seconds()} s)",
            )
        self.dead_letter_queue: sqs.Queue | None = None
        dlq_spec = None
        if dead_letter_queue:
            self.dead_letter_queue = sqs.Queue(
                self,
                "DeadLetterQueue",
                encryption=sqs.QueueEncryption.KMS,
                encryption_master_key=encryption_key,
                enforce_ssl=True,
                retention_period=Duration.days(14),
                removal_policy=removal_policy,
            )
            _acknowledge_is_dlq(self.dead_letter_queue, f"the dead-letter queue of {construct_id}")
            dlq_spec = sqs.DeadLetterQueue(queue=self.dead_letter_queue, max_receive_count=max_receive_count)
        default_retention = Duration.days(4) if dead_letter_queue else Duration.days(14)
        shape: dict[str, Any] = {
            "encryption": sqs.QueueEncryption.KMS,
            "encryption_master_key": encryption_key,
            "enforce_ssl": True,
            "visibility_timeout": visibility,
            "retention_period": retention_period or default_retention,
            "dead_letter_queue": dlq_spec,
            "removal_policy": removal_policy,
            **struct_values(queue_props),
        }
        self.queue: sqs.Queue = sqs.Queue(self, "Resource", **shape)
        if not dead_letter_queue:
            _acknowledge_is_dlq(self.queue, f"{construct_id}, a failure destination")

    @property
    def queue_arn(self) -> str:
        return self.queue.queue_arn

    def grant_send_messages(self, grantee: iam.IGrantable) -> iam.Grant:
        return self.queue.grant_send_messages(grantee)

    def grant_consume_messages(self, grantee: iam.IGrantable) -> iam.Grant:
        return self.queue.grant_consume_messages(grantee)


def _acknowledge_is_dlq(queue: sqs.Queue, what: str) -> None:
    Validations.of(queue).acknowledge(
        Acknowledgment(
            id="AwsSolutions-SQS3",
            reason=f"This queue is {what}: it is the end of a failure path, read and redriven by an "
            "operator, so it has no dead-letter queue of its own.",
        )
    )
