"""An e-mail subscription that keeps what SNS could not deliver: a dead-letter queue of its own."""

from __future__ import annotations

from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from constructs_lib.secure_queue import SecureQueue


def subscribe_email(
    scope: Construct, construct_id: str, *, topic: sns.ITopic, address: str, encryption_key: kms.IKey
) -> SecureQueue:
    """Subscribe ``address`` to ``topic``; a notification SNS cannot deliver goes to a new dead-letter queue.

    Example::

        dlq = subscribe_email(self, "OnCallDeadLetterQueue", topic=ops, address="oncall@example.com",
                              encryption_key=queue_key)

    SNS retries an e-mail delivery (a mail server that refuses it, a throttled endpoint) and then
    drops it; with a redrive policy the message is kept in the queue for 14 days instead. The queue
    is a ``SecureQueue`` without a DLQ of its own, so a stack's ``watch_stack`` alarms on its depth.
    ``encryption_key`` must let ``sns.amazonaws.com`` use it for the topic
    (``EncryptionKey(service_principals=["sns"])``); CDK's subscription adds the queue policy that
    lets the topic, and only it, send to the queue.
    """
    dead_letters = SecureQueue(scope, construct_id, encryption_key=encryption_key, dead_letter_queue=False)
    topic.add_subscription(subscriptions.EmailSubscription(address, dead_letter_queue=dead_letters.queue))
    return dead_letters
