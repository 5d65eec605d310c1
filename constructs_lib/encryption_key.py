"""A customer-managed KMS key with rotation, usable by the AWS services that encrypt the data."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

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
            with ``aws:SourceAccount``. Defaults to none: IAM principals of this account use
            the key through grants, which the default key policy already allows.
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
        # CloudWatch Logs sends no aws:SourceAccount; it is scoped by the log group ARN instead.
        if service == "logs":
            log_groups = f"arn:{stack.partition}:logs:{stack.region}:{stack.account}:*"
            condition = {"ArnLike": {"kms:EncryptionContext:aws:logs:arn": log_groups}}
        else:
            condition = {"StringEquals": {"aws:SourceAccount": stack.account}}
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
