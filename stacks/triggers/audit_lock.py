"""The audit locker: the stage's Object Lock retention on each new object of the audit bucket."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_kms as kms
from constructs import Construct

from constructs_lib import SecureBucket, SecureQueue, SharedFunction
from constructs_lib.nag_findings import acknowledge_grant, resource_finding
from stacks.functions import StageFunctions


class AuditLocker(Construct):
    """Locks each new audit object for the stage's retention, announced by the bucket's own events.

    Example::

        AuditLocker(self, "AuditLock", audit=storage.audit, encryption_key=queues_key, functions=functions)

    The audit bucket has no default retention (so Firehose's uploads need no checksum, see
    ``lambdas/events/audit_lock.py``); its "Object Created" events reach ``AuditLocker`` through
    ``ObjectCreated``, a rule on the account's default bus, where S3 sends them. Failed deliveries
    and failed invocations land in ``DeadLetterQueue``, which the stack's alarms watch.

    Args:
        audit: the Object Lock bucket (sending its events to EventBridge).
        encryption_key: customer key of the dead-letter queue.
        functions: the app's function factory.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        audit: SecureBucket,
        encryption_key: kms.IKey,
        functions: StageFunctions,
    ) -> None:
        super().__init__(scope, construct_id)
        self.dead_letter_queue: SecureQueue = SecureQueue(
            self, "DeadLetterQueue", encryption_key=encryption_key, dead_letter_queue=False
        )
        self.function: SharedFunction = functions(
            self,
            "AuditLocker",
            "lambdas.events.audit_lock.handler",
            on_failure=self.dead_letter_queue.queue,
            retry_attempts=2,
        )
        fn = self.function.function
        audit.grant_object_retention(fn)
        acknowledge_grant(
            fn,
            {
                resource_finding(fn, audit.bucket.bucket_arn, "/*", owner=audit.bucket): (
                    "Put/GetObjectRetention on the audit bucket's objects: every object it holds is locked, and "
                    "their keys (Firehose's time-based names) are known only when they are written."
                ),
            },
        )
        self.rule: events.Rule = events.Rule(
            self,
            "ObjectCreated",
            description="Every new object of the audit bucket -> the audit locker (Object Lock retention)",
            event_pattern=events.EventPattern(
                source=["aws.s3"],
                detail_type=["Object Created"],
                detail={"bucket": {"name": [audit.bucket.bucket_name]}},
            ),
            targets=[
                targets.LambdaFunction(
                    fn,
                    dead_letter_queue=self.dead_letter_queue.queue,
                    retry_attempts=8,
                    max_event_age=Duration.hours(24),
                )
            ],
        )
