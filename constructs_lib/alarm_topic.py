"""The topic alarms notify: KMS-encrypted, TLS-only, optionally mailed to an on-call address."""

from __future__ import annotations

from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from constructs import Construct

from constructs_lib.email_subscription import subscribe_email
from constructs_lib.secure_queue import SecureQueue
from constructs_lib.validation import PropErrors, is_unresolved


class AlarmTopic(Construct):
    """An SNS topic for CloudWatch alarm and OK notifications.

    Example::

        ops = AlarmTopic(self, "OpsTopic", encryption_key=key, email="oncall@example.com")
        ServiceAlarms(self, "Alarms", topic=ops.topic, prefix="App-dev")

    Args:
        encryption_key: customer-managed key of the topic. Its key policy must let
            ``cloudwatch.amazonaws.com`` use it (``EncryptionKey(service_principals=["cloudwatch"])``),
            or alarms cannot publish.
        email: address subscribed to every notification, with a dead-letter queue (``email_dead_letters``,
            on the same key, which must then also let ``sns.amazonaws.com`` use it) for what SNS
            cannot deliver. Defaults to none (subscribe a pager or chat integration yourself).
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, encryption_key: kms.IKey, email: str | None = None
    ) -> None:
        super().__init__(scope, construct_id)
        errors = PropErrors(self)
        if not errors.check(
            email is None or is_unresolved(email) or ("@" in email and email.strip() == email),
            f"email must be an e-mail address (given {email!r})",
        ):
            email = None
        self.topic: sns.Topic = sns.Topic(self, "Resource", master_key=encryption_key, enforce_ssl=True)
        self.topic.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AllowCloudWatchAlarms",
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["sns:Publish"],
                resources=[self.topic.topic_arn],
            )
        )
        #: Notifications SNS could not mail (None without an e-mail subscription).
        self.email_dead_letters: SecureQueue | None = (
            subscribe_email(
                self, "EmailDeadLetterQueue", topic=self.topic, address=email, encryption_key=encryption_key
            )
            if email is not None
            else None
        )
