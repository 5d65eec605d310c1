"""A customer-managed KMS key with rotation, usable by the AWS services that encrypt the data."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Aspects, Duration, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from constructs_lib.key_policy import GRANT_FOR_AWS_RESOURCE, ServiceStatementGuard, source_arn_patterns
from constructs_lib.validation import PropErrors


class EncryptionKey(Construct):
    """Customer-managed symmetric KMS key, rotated yearly, that named AWS services may use.

    Example::

        key = EncryptionKey(self, "DataKey", alias="alias/app-data",
                            service_principals=["logs", "sns"])
        table = SingleTable(self, "Table", encryption_key=key.key, ...)

    Args:
        alias: alias of the key. Defaults to no alias.
        description: key description. Defaults to "Customer-managed data key".
        service_principals: short service names (``logs``, ``sns``, ``events``, ``firehose``...)
            whose service principals may encrypt and decrypt with the key, scoped to this account
            with ``aws:SourceAccount`` (CloudWatch Logs: by the log group in the encryption
            context). Defaults to none: IAM principals of this account use the key through
            grants, which the default key policy already allows.
        source_prefix: the name prefix of the resources (topics, queues, rules, buses, delivery
            streams, state machines, alarms, log groups) the services act for, e.g.
            ``Orders-prod``: each service statement then also requires ``aws:SourceArn`` (for
            CloudWatch Logs, the log group ARN) to name such a resource. Defaults to none: the
            account alone.
        log_group_patterns: further log group names (``*`` wildcards) CloudWatch Logs may encrypt
            for, for groups whose names AWS prescribes. Only with ``source_prefix``. Defaults to none.

    Whatever statement a service or a CDK grant adds to the policy, the key lets no one create a
    grant except for an AWS service acting on a resource (``kms:GrantIsForAWSResource``), and a
    service principal CDK adds without a condition is limited to this account.
        removal_policy: what happens to the key when the stack is deleted. Defaults to RETAIN,
            because a deleted key makes every object encrypted with it unreadable.
        pending_window: waiting period before deletion. Defaults to 30 days.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        alias: str | None = None,
        description: str = "Customer-managed data key",
        service_principals: Sequence[str] = (),
        removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
        pending_window: Duration | None = None,
        source_prefix: str | None = None,
        log_group_patterns: Sequence[str] = (),
    ) -> None:
        super().__init__(scope, construct_id)
        errors = self._errors = PropErrors(self)
        window = pending_window or Duration.days(30)
        days = None if window.is_unresolved() else window.to_days()
        if not errors.check(days is None or 7 <= days <= 30, f"pending_window must be 7..30 days (given {days})"):
            window = Duration.days(30)
        self.key: kms.Key = kms.Key(
            self,
            "Resource",
            description=description,
            enable_key_rotation=True,
            removal_policy=removal_policy,
            pending_window=window,
            alias=alias,
        )
        errors.check(source_prefix is not None or not log_group_patterns, "log_group_patterns needs source_prefix")
        self._source_prefix = source_prefix
        self._log_groups = tuple(log_group_patterns)
        # CreateGrant only for an AWS service acting on a resource (DynamoDB, Secrets Manager, AWS
        # Backup...): the account's own statement (kms:*) and CDK's grants would otherwise let any
        # principal with kms:CreateGrant in its IAM policy hand the key to anyone.
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="DenyGrantsNotForAwsResources",
                effect=iam.Effect.DENY,
                principals=[iam.AnyPrincipal()],
                actions=["kms:CreateGrant"],
                resources=["*"],
                conditions={"BoolIfExists": {GRANT_FOR_AWS_RESOURCE: "false"}},
            )
        )
        Aspects.of(self).add(ServiceStatementGuard())
        for service in service_principals:
            self.allow_service(service)

    def allow_service(self, service: str) -> None:
        """Let one AWS service (e.g. ``logs``) use the key on behalf of this account."""
        if not self._errors.check(
            service.isalnum(), f"service must be a short service name like 'sns' (given {service!r})"
        ):
            return  # no principal can be built from it; synthesis fails on the recorded error
        stack = Stack.of(self)
        principal = (
            iam.ServicePrincipal(f"logs.{stack.region}.amazonaws.com")
            if service == "logs"
            else iam.ServicePrincipal(f"{service}.amazonaws.com")
        )
        patterns = source_arn_patterns(stack, service, self._source_prefix, self._log_groups)
        # CloudWatch Logs sends no aws:SourceAccount; it is scoped by the log group ARN instead.
        condition: dict[str, dict[str, object]]
        if service == "logs":
            condition = {"ArnLike": {"kms:EncryptionContext:aws:logs:arn": patterns}}
        else:
            condition = {"StringEquals": {"aws:SourceAccount": stack.account}}
            if self._source_prefix is not None:
                condition["ArnLike"] = {"aws:SourceArn": patterns}
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid=f"Allow{service.capitalize()}Service",
                principals=[principal],
                actions=["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"],
                resources=["*"],
                conditions=condition,
            )
        )

    def grant_encrypt_decrypt(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let a principal encrypt and decrypt with the key."""
        return self.key.grant_encrypt_decrypt(grantee)
