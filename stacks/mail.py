"""The stage's notice mail: an SES sender identity, its configuration set, and who may send.

One per stage, in the Events stack (``EventsStack.notice_mail``); the functions that mail
(customer notifier, export notifier) take its ``environment`` and ``grant_send``. A stage without
``notice_sender`` creates nothing and its functions report ``disabled`` (lambdas/shared/mail.py).

Sending for real needs what a template cannot do: the sender address confirms the verification
mail SES sends it after the first deploy, and an account leaves the SES sandbox by request
(docs/operations.md); until then SES mails only verified recipients, which is why a stage that is
not production lists the domains it may mail.
"""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_ses as ses
from constructs import Construct

from stacks.config import StageConfig


class NoticeMail(Construct):
    """The sender identity and configuration set of ``config.notice_sender`` (nothing when unset)."""

    def __init__(self, scope: Construct, construct_id: str, *, config: StageConfig) -> None:
        super().__init__(scope, construct_id)
        self.sender = config.notice_sender
        self.environment: dict[str, str] = {}
        self._resources: list[str] = []
        if self.sender is None:
            return
        self.configuration_set = ses.ConfigurationSet(
            self,
            "ConfigurationSet",
            reputation_metrics=True,
            sending_enabled=True,
            suppression_reasons=ses.SuppressionReasons.BOUNCES_AND_COMPLAINTS,
            tls_policy=ses.ConfigurationSetTlsPolicy.REQUIRE,
        )
        self.identity = ses.EmailIdentity(
            self,
            "Sender",
            identity=ses.Identity.email(self.sender),
            configuration_set=self.configuration_set,
        )
        stack = Stack.of(self)
        self._resources = [
            stack.format_arn(service="ses", resource="identity", resource_name=self.sender),
            stack.format_arn(
                service="ses", resource="configuration-set", resource_name=self.configuration_set.configuration_set_name
            ),
        ]
        self.environment = {
            "NOTICE_SENDER": self.sender,
            "NOTICE_CONFIGURATION_SET": self.configuration_set.configuration_set_name,
            "NOTICE_RECIPIENT_DOMAINS": ",".join(config.notice_recipient_domains),
        }

    def grant_send(self, grantee: iam.IGrantable) -> None:
        """``ses:SendEmail`` from this sender with this configuration set, and nothing else."""
        if not self._resources:
            return
        grantee.grant_principal.add_to_principal_policy(
            iam.PolicyStatement(actions=["ses:SendEmail"], resources=self._resources)
        )
