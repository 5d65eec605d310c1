"""SNS on moto: deliveries authorized as AWS authorizes them, and what a topic published where.

moto keeps every message a topic published; the subscriptions come from the template. For each
message, ``expected_queues`` are the SQS subscriptions whose filter policy (evaluated by moto's
own matcher, scope included) accepts its attributes or body: the set a test compares with where
the message actually arrived.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from unittest import mock

from moto.sns.models import Subscription, sns_backends
from moto.sns.utils import FilterPolicyMatcher
from moto.sqs.models import sqs_backends

from embedded.cloudformation.intrinsics import Deployed
from embedded.cloudformation.loaders import Cloud
from embedded.iam.access import Access


@dataclass(frozen=True)
class Published:
    """One message a topic published, and the queues its subscriptions' policies select."""

    message: str
    attributes: dict[str, Any]
    expected_queues: frozenset[str]

    @property
    def event_type(self) -> str | None:
        value = self.attributes.get("event_type", {})
        return str(value.get("Value") or value.get("StringValue") or "") or None


def published(cloud: Cloud, topic: Deployed, subscriptions: list[Deployed]) -> list[Published]:
    """Every message ``topic`` published so far, with the SQS queues its filter policies select."""
    backend = sns_backends[cloud.account][cloud.region]
    mine = [
        s for s in subscriptions if s.properties.get("TopicArn") == topic.ref and s.properties.get("Protocol") == "sqs"
    ]
    result = []
    for _message_id, message, _subject, attributes, _group in backend.topics[topic.ref].sent_notifications:
        selected = set()
        for subscription in mine:
            policy = subscription.properties.get("FilterPolicy")
            policy = json.loads(policy) if isinstance(policy, str) else policy
            matcher = FilterPolicyMatcher(policy or {}, subscription.properties.get("FilterPolicyScope"))
            if matcher.matches(attributes or {}, message):
                selected.add(str(subscription.properties["Endpoint"]))
        result.append(Published(message, dict(attributes or {}), frozenset(selected)))
    return result


@contextmanager
def deliveries_authorized(cloud: Cloud) -> Iterator[None]:
    """Deliver a topic's messages to a queue or function only when AWS would let SNS do it.

    SNS sends to an SQS subscription as ``sns.amazonaws.com``: the queue's policy must allow it
    ``sqs:SendMessage`` (with the topic as ``aws:SourceArn``) and the queue's key policy must
    allow it ``kms:GenerateDataKey`` and ``kms:Decrypt``; a Lambda subscription needs a Lambda
    permission for SNS. A refused delivery is kept in the stage's report and goes to the
    subscription's dead-letter queue when it has one that lets SNS in; otherwise it is lost, as
    SNS loses it once its retries are spent. Messages a subscription's filter policy rejects are
    never attempted.
    """
    original = Subscription.publish

    def publish(self: Subscription, message: str, message_id: str, *args: Any, **kwargs: Any) -> None:
        guard = cloud.guard
        if guard is None or self.protocol not in ("sqs", "lambda"):
            return original(self, message, message_id, *args, **kwargs)
        attributes = kwargs.get("message_attributes", args[1] if len(args) > 1 else None)
        matcher = self._filter_policy_matcher
        if matcher is not None and not matcher.matches(attributes, message):
            return None
        source = {"aws:SourceArn": self.topic.arn, "aws:SourceAccount": cloud.account}
        action = "sqs:SendMessage" if self.protocol == "sqs" else "lambda:InvokeFunction"
        made_by = f"SNS delivery from {self.topic.arn.rsplit(':', 1)[-1]}"
        if guard.deliver("sns.amazonaws.com", [Access(action, self.endpoint, source)], made_by) is None:
            return original(self, message, message_id, *args, **kwargs)
        redrive = json.loads(self.attributes.get("RedrivePolicy") or "{}")
        dead_letters = redrive.get("deadLetterTargetArn")
        if (
            dead_letters
            and guard.deliver(
                "sns.amazonaws.com", [Access("sqs:SendMessage", str(dead_letters), source)], f"{made_by} (dead letters)"
            )
            is None
        ):
            queue = str(dead_letters)
            sqs_backends[cloud.account][queue.split(":")[3]].send_message(queue.split(":")[5], message)
        return None

    with mock.patch.object(Subscription, "publish", publish):
        yield
