"""An SQS queue hardened by default: customer-key encryption, SSL only, and a dead-letter queue."""

from __future__ import annotations

from typing import Any

from aws_cdk import Acknowledgment, Duration, RemovalPolicy, Validations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from constructs_lib.nag_findings import acknowledge_grant, kms_grant_findings
from constructs_lib.validation import PropErrors, is_unresolved, struct_values


class SecureQueue(Construct):
    """A KMS-encrypted, SSL-only queue that moves a message to its own DLQ after N receives.

    Example::

        work = SecureQueue(self, "Work", encryption_key=key, visibility_timeout=Duration.minutes(3))
        orders = SecureQueue(self, "Orders", encryption_key=key, queue_props=sqs.QueueProps(fifo=True))
        failures = SecureQueue(self, "Failures", encryption_key=key, dead_letter_queue=False)
        fn = SharedFunction(..., on_failure=failures.queue)

    A FIFO queue (``queue_props=sqs.QueueProps(fifo=True)``) gets a FIFO dead-letter queue:
    SQS moves a FIFO queue's messages only to a FIFO queue.

    Args:
        encryption_key: customer-managed KMS key of the queue (and of its new DLQ). Required.
        visibility_timeout: defaults to 30 seconds; give at least 6x the consumer's timeout.
        retention_period: how long a message may wait. Defaults to 4 days for a work queue and
            14 days (the maximum) for a dead-letter queue, so a failure outlives a long weekend.
        max_receive_count: receives before a message moves to the DLQ, 1..1000. Defaults to 3.
        dead_letter_queue: give this queue a DLQ. Defaults to true; set false for a queue that
            *is* a dead-letter queue or failure destination (Lambda async on-failure, event source
            mapping on-failure, EventBridge target DLQ): nothing consumes it, an operator reads
            and redrives it.
        existing_dead_letter_queue: bring the DLQ (of the same type, standard or FIFO). Defaults
            to a new queue: the same key, SSL only, 14 days' retention, FIFO when this queue is.
        dead_letter_queue_props: further properties of the new DLQ; they override its defaults.
            Defaults to none.
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
        existing_dead_letter_queue: sqs.IQueue | None = None,
        dead_letter_queue_props: sqs.QueueProps | None = None,
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
        errors.check_exclusive(
            existing_dead_letter_queue=existing_dead_letter_queue, dead_letter_queue_props=dead_letter_queue_props
        )
        errors.check(
            dead_letter_queue or (existing_dead_letter_queue is None and dead_letter_queue_props is None),
            "dead_letter_queue=False makes a queue without a DLQ: drop existing_dead_letter_queue and "
            "dead_letter_queue_props, or leave dead_letter_queue true",
        )
        shape = struct_values(queue_props)
        fifo = bool(shape.get("fifo"))
        self.dead_letter_queue: sqs.IQueue | None = None
        dlq_spec = None
        if dead_letter_queue:
            self.dead_letter_queue = existing_dead_letter_queue or self._new_dead_letter_queue(
                encryption_key, removal_policy, fifo, dead_letter_queue_props
            )
            dlq_fifo = self.dead_letter_queue.fifo
            errors.check(
                is_unresolved(dlq_fifo) or bool(dlq_fifo) == fifo,
                f"the dead-letter queue of a {'FIFO' if fifo else 'standard'} queue must be "
                f"{'FIFO' if fifo else 'standard'} too (given a {'FIFO' if dlq_fifo else 'standard'} one)",
            )
            dlq_spec = sqs.DeadLetterQueue(queue=self.dead_letter_queue, max_receive_count=max_receive_count)
        default_retention = Duration.days(4) if dead_letter_queue else Duration.days(14)
        props: dict[str, Any] = {
            "encryption": sqs.QueueEncryption.KMS,
            "encryption_master_key": encryption_key,
            "enforce_ssl": True,
            "visibility_timeout": visibility,
            "retention_period": retention_period or default_retention,
            "dead_letter_queue": dlq_spec,
            "removal_policy": removal_policy,
            **shape,
        }
        self.queue: sqs.Queue = sqs.Queue(self, "Resource", **props)
        if not dead_letter_queue:
            _acknowledge_is_dlq(self.queue, f"{construct_id}, a failure destination")

    def _new_dead_letter_queue(
        self, key: kms.IKey, removal_policy: RemovalPolicy, fifo: bool, props: sqs.QueueProps | None
    ) -> sqs.Queue:
        queue = sqs.Queue(
            self,
            "DeadLetterQueue",
            **{
                "encryption": sqs.QueueEncryption.KMS,
                "encryption_master_key": key,
                "enforce_ssl": True,
                "retention_period": Duration.days(14),
                "removal_policy": removal_policy,
                **({"fifo": True} if fifo else {}),
                **struct_values(props),
            },
        )
        _acknowledge_is_dlq(queue, f"the dead-letter queue of {self.node.id}")
        return queue

    @property
    def queue_arn(self) -> str:
        return self.queue.queue_arn

    def grant_send_messages(self, grantee: iam.IGrantable) -> iam.Grant:
        """Send messages (and encrypt them with the queue's key)."""
        grant = self.queue.grant_send_messages(grantee)
        acknowledge_grant(grantee, kms_grant_findings("this encrypted queue"))
        return grant

    def grant_consume_messages(self, grantee: iam.IGrantable) -> iam.Grant:
        """Receive and delete messages (and decrypt them)."""
        return self.queue.grant_consume_messages(grantee)


def _acknowledge_is_dlq(queue: sqs.Queue, what: str) -> None:
    Validations.of(queue).acknowledge(
        Acknowledgment(
            id="AwsSolutions-SQS3",
            reason=f"This queue is {what}: it is the end of a failure path, read and redriven by an "
            "operator, so it has no dead-letter queue of its own.",
        )
    )
