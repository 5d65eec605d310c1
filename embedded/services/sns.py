"""What an SNS topic published and which subscribed queues its filter policies select.

moto keeps every message a topic published; the subscriptions come from the template. For each
message, ``expected_queues`` are the SQS subscriptions whose filter policy (evaluated by moto's
own matcher, scope included) accepts its attributes or body: the set a test compares with where
the message actually arrived.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from moto.sns.models import sns_backends
from moto.sns.utils import FilterPolicyMatcher

from embedded.cloudformation.intrinsics import Deployed
from embedded.cloudformation.loaders import Cloud


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
