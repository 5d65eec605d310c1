"""An encrypted SNS topic fanned out to filtered SQS queues, each with a DLQ and optionally a consumer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from aws_cdk import Duration
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from constructs_lib.nag_findings import acknowledge_policy
from constructs_lib.secure_queue import SecureQueue
from constructs_lib.validation import PropErrors, is_unresolved, struct_values

#: AWS's advice for a queue that triggers a function: visibility >= 6x the function timeout.
VISIBILITY_FACTOR = 6


@dataclass(frozen=True)
class Subscriber:
    """One fan-out branch: the queue, its DLQ and the subscription (with its filter policy)."""

    queue: sqs.Queue
    dead_letter_queue: sqs.IQueue
    subscription: sns.Subscription


class FanoutTopic(Construct):
    """KMS-encrypted, SSL-only topic; ``add_queue_subscriber`` adds a filtered queue branch.

    Example::

        topic = FanoutTopic(self, "Orders", encryption_key=topic_key, queue_encryption_key=queue_key)
        topic.add_queue_subscriber("Shipping", consumer=fn, consumer_timeout=Duration.seconds(30),
                                   filter_policy={"carrier": sns.SubscriptionFilter.exists_filter()})

    Every branch queue is KMS-encrypted, SSL-only, moves a message to its DLQ after
    ``max_receive_count`` receives (the subscription sends what SNS cannot deliver to the same
    DLQ), and has a visibility timeout of at least 6x its consumer's timeout. A consumer reads
    with partial batch responses.

    Args:
        encryption_key: customer key of the topic. Required.
        queue_encryption_key: customer key of the branch queues and their DLQs. Required, and it
            must not be ``encryption_key``: the SNS -> SQS subscription adds a statement naming
            the topic to the queue key's policy, and a topic encrypted with that same key would
            make a CloudFormation dependency cycle (key -> topic -> key).
        existing_topic: a topic to fan out instead of a new one. Defaults to a new topic (the
            customer key, SSL only).
        topic_props: further properties of the new topic (e.g. ``display_name``); they override
            its defaults. Defaults to none.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        encryption_key: kms.IKey,
        queue_encryption_key: kms.IKey,
        existing_topic: sns.ITopic | None = None,
        topic_props: sns.TopicProps | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self._errors = PropErrors(self)
        self._errors.check_exclusive(existing_topic=existing_topic, topic_props=topic_props)
        self._errors.check(
            queue_encryption_key.node.path != encryption_key.node.path,
            "queue_encryption_key must differ from encryption_key: the queue key's policy names the "
            "topic, so one key for both makes a dependency cycle; give the queues their own key",
        )
        self._key = queue_encryption_key
        self.topic: sns.ITopic = existing_topic or sns.Topic(
            self, "Resource", **{"master_key": encryption_key, "enforce_ssl": True, **struct_values(topic_props)}
        )
        self.subscribers: dict[str, Subscriber] = {}

    @property
    def topic_arn(self) -> str:
        return self.topic.topic_arn

    def grant_publish(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let ``grantee`` publish: ``sns:Publish`` on the topic and data keys of its customer key.

        CDK's topic grant names ``kms:GenerateDataKey*``; the finding that wildcard raises in
        cdk-nag is acknowledged here, on the grantee's role, because it covers only this topic's key.
        """
        grant = self.topic.grant_publish(grantee)
        role = grantee.grant_principal
        if isinstance(role, iam.Role) and role.node.try_find_child("DefaultPolicy") is not None:
            acknowledge_policy(
                role,
                {
                    "Action::kms:GenerateDataKey*": "Publishing to an SNS topic encrypted with a customer key needs "
                    "data keys of that one key (the topic's grant)."
                },
            )
        return grant

    def add_queue_subscriber(
        self,
        construct_id: str,
        *,
        filter_policy: Mapping[str, sns.SubscriptionFilter] | None = None,
        any_of: Sequence[Mapping[str, Any]] | None = None,
        raw_message_delivery: bool = True,
        consumer: lambda_.IFunction | None = None,
        consumer_timeout: Duration | None = None,
        batch_size: int = 10,
        max_receive_count: int = 3,
    ) -> Subscriber:
        """Subscribe a new queue (with DLQ) to the topic; attach ``consumer`` when given.

        Args:
            filter_policy: message-attribute filter. Defaults to none: every message.
            any_of: message-attribute filter matching when ANY of these SNS filter-policy
                objects matches (SNS ``$or``), for rules ``filter_policy`` cannot express, e.g.
                ``[{"carrier": [{"exists": True}]}, {"event_type": ["order_waiting"]}]``.
                Not together with ``filter_policy``. Defaults to none.
            raw_message_delivery: deliver the message body without the SNS envelope (message
                attributes become SQS attributes). Defaults to true.
            consumer: function reading the queue with partial batch responses. Defaults to none
                (another stack attaches its consumer; size ``consumer_timeout`` for it).
            consumer_timeout: the consumer's timeout; the queue's visibility timeout is 6x it.
                Defaults to the consumer's timeout, or 30 seconds.
            batch_size: messages per invocation, 1..10. Defaults to 10.
            max_receive_count: receives before the DLQ. Defaults to 3.
        """
        errors = self._errors
        if not errors.check(
            construct_id not in self.subscribers,
            f"a subscriber {construct_id!r} exists already: give each subscriber its own id",
        ):
            return self.subscribers[construct_id]  # a second construct with this id cannot be built
        if not errors.check(
            is_unresolved(batch_size) or 1 <= batch_size <= 10, f"batch_size must be 1..10 (given {batch_size})"
        ):
            batch_size = 10
        if not errors.check(not (filter_policy and any_of), f"{construct_id}: give filter_policy or any_of, not both"):
            any_of = None
        if not errors.check(
            any_of is None or len(any_of) >= 2,
            f"{construct_id}: any_of needs at least two alternatives (given {len(any_of or ())})",
        ):
            any_of = None
        timeout = consumer_timeout or getattr(consumer, "timeout", None) or Duration.seconds(30)
        branch = SecureQueue(
            self,
            construct_id,
            encryption_key=self._key,
            visibility_timeout=Duration.seconds(int(timeout.to_seconds()) * VISIBILITY_FACTOR),
            max_receive_count=max_receive_count,
        )
        assert branch.dead_letter_queue is not None  # noqa: S101 - SecureQueue made one
        subscription = subscriptions.SqsSubscription(
            branch.queue,
            raw_message_delivery=raw_message_delivery,
            filter_policy=dict(filter_policy or {}) or None,
            # Messages SNS cannot deliver to the queue (after its own retries) land in the DLQ too.
            dead_letter_queue=branch.dead_letter_queue,
        )
        self.topic.add_subscription(subscription)
        sub_construct = _find_subscription(branch.queue, self.topic)
        if any_of:
            cfn = cast(sns.CfnSubscription, sub_construct.node.default_child)
            cfn.filter_policy = {"$or": [dict(alternative) for alternative in any_of]}
            cfn.filter_policy_scope = "MessageAttributes"
        if consumer is not None:
            consumer.add_event_source(
                sources.SqsEventSource(branch.queue, batch_size=batch_size, report_batch_item_failures=True)
            )
        subscriber = Subscriber(branch.queue, branch.dead_letter_queue, sub_construct)
        self.subscribers[construct_id] = subscriber
        return subscriber


def _find_subscription(queue: sqs.Queue, topic: sns.ITopic) -> sns.Subscription:
    """The Subscription CDK created for ``queue`` (SqsSubscription puts it under the queue)."""
    for child in queue.node.find_all():
        if isinstance(child, sns.Subscription):
            return child
    raise LookupError(f"no subscription of {queue.node.path} to {topic.node.path}")
