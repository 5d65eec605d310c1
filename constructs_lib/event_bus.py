"""A custom EventBridge bus with an archive, an account-only policy and rules whose targets never drop events."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from constructs_lib.encryption_key import EncryptionKey
from constructs_lib.secure_queue import SecureQueue
from constructs_lib.validation import PropErrors, is_unresolved


class SecureEventBus(Construct):
    """Custom event bus: archive of every event, only this account may put, targets with DLQ + retries.

    Example::

        bus = SecureEventBus(self, "Bus", encryption_key=key, archive_retention=Duration.days(30))
        bus.route_to_function("Started", event_pattern=events.EventPattern(...), function=fn)
        bus.route_to_queue("Shipped", event_pattern=events.EventPattern(...), queue=queue)

    Args:
        encryption_key: customer key of the bus's events. Required. Give the bus a literal
            ``event_bus_name`` when this key lives in another stack: CDK adds a statement naming
            the bus to the key's policy.
        event_bus_name: defaults to a name CloudFormation generates.
        archive_retention: how long archived events can be replayed. Defaults to 30 days.
        archive_encryption_key: customer key of the archive. Defaults to a new rotating key of its
            own (not ``encryption_key``: CDK names the bus in the archive key's policy, and the
            bus's own encryption names its key, so sharing one key would be a dependency cycle).
        archive_pattern: which events are archived. Defaults to every event on the bus that
            comes from this account.
        target_retry_attempts: retries of a failed delivery to a target, 0..185. Defaults to 8.
        target_max_event_age: give up on an event after, 60 s..24 h. Defaults to 2 hours.
        existing_dead_letter_queue: DLQ of every target. Defaults to a new :class:`SecureQueue`
            (``encryption_key``, 14 days' retention).
        dead_letter_queue_props: further properties of the new DLQ (e.g. its
            ``encryption_master_key``); they override its defaults. Defaults to none.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        encryption_key: kms.IKey,
        event_bus_name: str | None = None,
        archive_retention: Duration | None = None,
        archive_encryption_key: kms.IKey | None = None,
        archive_pattern: events.EventPattern | None = None,
        target_retry_attempts: int = 8,
        target_max_event_age: Duration | None = None,
        existing_dead_letter_queue: sqs.IQueue | None = None,
        dead_letter_queue_props: sqs.QueueProps | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        errors = PropErrors(self)
        errors.check_exclusive(
            existing_dead_letter_queue=existing_dead_letter_queue, dead_letter_queue_props=dead_letter_queue_props
        )
        retention = archive_retention or Duration.days(30)
        max_age = target_max_event_age or Duration.hours(2)
        if not errors.check(
            is_unresolved(target_retry_attempts) or 0 <= target_retry_attempts <= 185,
            f"target_retry_attempts must be 0..185 (given {target_retry_attempts})",
        ):
            target_retry_attempts = 8
        age_seconds = None if max_age.is_unresolved() else max_age.to_seconds()
        if not errors.check(
            age_seconds is None or 60 <= age_seconds <= 86400,
            f"target_max_event_age must be 60 s..24 h (given {age_seconds} s)",
        ):
            max_age = Duration.hours(2)
        days = None if retention.is_unresolved() else retention.to_days()
        if not errors.check(
            days is None or 1 <= days <= 3650, f"archive_retention must be 1..3650 days (given {days})"
        ):
            retention = Duration.days(30)
        self._retry_attempts = target_retry_attempts
        self._max_event_age = max_age

        self.event_bus: events.EventBus = events.EventBus(
            self, "Resource", event_bus_name=event_bus_name, kms_key=encryption_key
        )
        # A custom bus accepts only its owner's events unless a policy says otherwise; the
        # explicit statement documents that and keeps it so if someone adds another statement.
        self.event_bus.add_to_resource_policy(
            iam.PolicyStatement(
                sid="OnlyThisAccountPuts",
                principals=[iam.AccountRootPrincipal()],
                actions=["events:PutEvents"],
                resources=[self.event_bus.event_bus_arn],
            )
        )
        # A key of its own: CDK names the bus in the archive key's policy, and the bus is encrypted
        # with ``encryption_key``, so one key for both would make a dependency cycle.
        self.archive_key: kms.IKey = (
            archive_encryption_key
            or EncryptionKey(self, "ArchiveKey", description="Event archive of a SecureEventBus").key
        )
        self.archive: events.Archive = events.Archive(
            self,
            "Archive",
            source_event_bus=self.event_bus,
            description="Every event on the bus, for replay",
            event_pattern=archive_pattern or events.EventPattern(account=[self.event_bus.stack.account]),
            retention=retention,
            kms_key=self.archive_key,
        )
        self.dead_letter_queue: sqs.IQueue = existing_dead_letter_queue or (
            SecureQueue(
                self,
                "TargetDeadLetterQueue",
                encryption_key=encryption_key,
                dead_letter_queue=False,
                queue_props=dead_letter_queue_props,
            ).queue
        )

    @property
    def event_bus_name(self) -> str:
        return self.event_bus.event_bus_name

    @property
    def event_bus_arn(self) -> str:
        return self.event_bus.event_bus_arn

    def grant_put_events_to(self, grantee: iam.IGrantable) -> iam.Grant:
        return self.event_bus.grant_put_events_to(grantee)

    def route_to_function(
        self, construct_id: str, *, event_pattern: events.EventPattern, function: lambda_.IFunction, description: str
    ) -> events.Rule:
        """A rule on this bus that invokes ``function``, with the bus's DLQ and retry policy."""
        target = targets.LambdaFunction(
            function,
            dead_letter_queue=self.dead_letter_queue,
            retry_attempts=self._retry_attempts,
            max_event_age=self._max_event_age,
        )
        return self._rule(construct_id, event_pattern, target, description)

    def route_to_queue(
        self, construct_id: str, *, event_pattern: events.EventPattern, queue: sqs.IQueue, description: str
    ) -> events.Rule:
        """A rule on this bus that sends the event to ``queue``, with the bus's DLQ and retry policy."""
        target = targets.SqsQueue(
            queue,
            dead_letter_queue=self.dead_letter_queue,
            retry_attempts=self._retry_attempts,
            max_event_age=self._max_event_age,
        )
        return self._rule(construct_id, event_pattern, target, description)

    def _rule(
        self, construct_id: str, pattern: events.EventPattern, target: events.IRuleTarget, description: str
    ) -> events.Rule:
        return events.Rule(
            self,
            construct_id,
            event_bus=self.event_bus,
            event_pattern=pattern,
            targets=[target],
            description=description,
        )
