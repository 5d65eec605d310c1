"""An S3 bucket hardened by default: encrypted, private, TLS-only, versioned, access-logged."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, cast

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from constructs_lib.nag_findings import acknowledge_grant, kms_grant_findings, resource_finding
from constructs_lib.validation import PropErrors, is_unresolved

ObjectLockMode = Literal["governance", "compliance"]


class SecureBucket(Construct):
    """A private bucket that refuses plain HTTP, encrypted with a customer key unless told otherwise.

    Example::

        logs = SecureBucket(self, "AccessLogs", access_log_target=True)
        archive = SecureBucket(self, "Archive", encryption_key=key, server_access_logs=logs.bucket,
                               lifecycle_rules=[s3.LifecycleRule(...)])

    Args:
        encryption_key: customer-managed KMS key for objects. Defaults to none, which gives
            S3-managed encryption (SSE-S3); only log-target buckets should use that, because
            S3 server access logging cannot write to a KMS-encrypted bucket.
        server_access_logs: bucket that receives this bucket's access logs, under the prefix
            ``<construct id>/``. Required unless ``access_log_target`` is set.
        access_log_target: this bucket receives other buckets' access logs (SSE-S3, no logs of
            its own, bucket-owner-enforced). Defaults to false.
        versioned: keep object versions. Defaults to true.
        object_lock: ``(mode, days)`` default retention; turns Object Lock on (implies
            versioning). S3 then refuses any upload without ``Content-MD5`` or an
            ``x-amz-checksum-*`` header, so every writer must send one. Defaults to no Object Lock.
        object_lock_enabled: turns Object Lock on (implies versioning) without a default
            retention: uploads need no checksum, and each object is locked by whoever follows
            the writes (``grant_object_retention``). For writers that cannot be made to send the
            checksum. Defaults to false (true whenever ``object_lock`` is given).
        event_bridge: send the bucket's object events (Object Created, ...) to EventBridge.
            Defaults to false.
        append_only: the bucket policy denies object deletion (``s3:DeleteObject``,
            ``s3:DeleteObjectVersion``) to every principal, so no role, not even one granted
            read-write (as Firehose's destination role is), can add a delete marker or remove a
            version whose lock has expired; lifecycle rules still expire objects (they are not
            subject to the bucket policy). Needs versioning. Defaults to false.
        lifecycle_rules: lifecycle rules. Defaults to one rule that aborts incomplete multipart
            uploads after 7 days and expires noncurrent versions after 90 days.
        removal_policy: defaults to RETAIN.
        auto_delete_objects: empty the bucket when the stack is deleted (only with DESTROY,
            never with Object Lock). Defaults to false.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        encryption_key: kms.IKey | None = None,
        server_access_logs: s3.IBucket | None = None,
        access_log_target: bool = False,
        versioned: bool = True,
        object_lock: tuple[ObjectLockMode, int] | None = None,
        object_lock_enabled: bool = False,
        event_bridge: bool = False,
        lifecycle_rules: Sequence[s3.LifecycleRule] | None = None,
        removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
        auto_delete_objects: bool = False,
        append_only: bool = False,
    ) -> None:
        super().__init__(scope, construct_id)
        errors = PropErrors(self)
        locked = object_lock is not None or object_lock_enabled
        errors.check(
            not (access_log_target and (encryption_key is not None or server_access_logs is not None)),
            "an access_log_target bucket uses SSE-S3 and logs nowhere: "
            "do not give it encryption_key or server_access_logs",
        )
        errors.check(
            access_log_target or server_access_logs is not None,
            f"{construct_id}: server_access_logs is required (or set access_log_target=True)",
        )
        auto_delete_objects = _checked_auto_delete(
            errors, auto_delete_objects, removal_policy, object_lock is not None, locked, append_only
        )
        errors.check(
            not (append_only and not versioned and not locked),
            "append_only needs a versioned bucket (given versioned=False): set versioned=True",
        )
        lock_retention = _lock_retention(errors, object_lock)
        rules = list(lifecycle_rules) if lifecycle_rules is not None else _default_lifecycle()

        self.bucket: s3.Bucket = s3.Bucket(
            self,
            "Resource",
            encryption=s3.BucketEncryption.KMS if encryption_key else s3.BucketEncryption.S3_MANAGED,
            encryption_key=encryption_key,
            bucket_key_enabled=encryption_key is not None,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            minimum_tls_version=1.2,
            versioned=versioned or locked,
            object_lock_enabled=locked or None,
            object_lock_default_retention=lock_retention,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            server_access_logs_bucket=server_access_logs,
            server_access_logs_prefix=f"{construct_id}/" if server_access_logs else None,
            lifecycle_rules=rules,
            removal_policy=removal_policy,
            auto_delete_objects=auto_delete_objects,
        )
        if event_bridge:
            # Set on the bucket itself: the L2's event_bridge_enabled deploys a custom-resource
            # function (with an AWS managed policy) to write the same setting.
            cfn_bucket = cast(s3.CfnBucket, self.bucket.node.default_child)
            cfn_bucket.notification_configuration = s3.CfnBucket.NotificationConfigurationProperty(
                event_bridge_configuration=s3.CfnBucket.EventBridgeConfigurationProperty(event_bridge_enabled=True)
            )
        self.encryption_key: kms.IKey | None = encryption_key
        if append_only:
            self.bucket.add_to_resource_policy(
                iam.PolicyStatement(
                    sid="DenyObjectDeletion",
                    effect=iam.Effect.DENY,
                    principals=[iam.AnyPrincipal()],
                    actions=["s3:DeleteObject", "s3:DeleteObjectVersion"],
                    resources=[self.bucket.arn_for_objects("*")],
                )
            )

    def grant_read(self, grantee: iam.IGrantable, objects_key_pattern: str = "*") -> iam.Grant:
        """Read objects (and decrypt them)."""
        grant = self.bucket.grant_read(grantee, objects_key_pattern)
        self._acknowledge(grantee, objects_key_pattern, read=True)
        return grant

    def grant_put(self, grantee: iam.IGrantable, objects_key_pattern: str = "*") -> iam.Grant:
        """Write objects (and encrypt them)."""
        grant = self.bucket.grant_put(grantee, objects_key_pattern)
        self._acknowledge(grantee, objects_key_pattern, write=True)
        return grant

    def grant_read_write(self, grantee: iam.IGrantable, objects_key_pattern: str = "*") -> iam.Grant:
        """Read and write objects."""
        grant = self.bucket.grant_read_write(grantee, objects_key_pattern)
        self._acknowledge(grantee, objects_key_pattern, read=True, write=True)
        return grant

    def _acknowledge(self, grantee: iam.IGrantable, pattern: str, *, read: bool = False, write: bool = False) -> None:
        """The cdk-nag findings of CDK's bucket grants, acknowledged on the grantee beside the grant.

        The action wildcards are the shape of CDK's grant on this one bucket; a grant limited to a
        key prefix is acknowledged for the objects under it. A grant on every object (``*``) is
        left for the caller to justify.
        """
        scope = f"this bucket ({pattern})"
        findings: dict[str, str] = {}
        if read:
            findings.update(
                dict.fromkeys(
                    ("Action::s3:GetObject*", "Action::s3:GetBucket*", "Action::s3:List*"),
                    f"CDK's read grant on {scope}: object reads and the bucket listing it needs.",
                )
            )
        if write:
            findings["Action::s3:Abort*"] = f"CDK's put grant on {scope}: aborting the grantee's own uploads."
            if read:
                findings["Action::s3:DeleteObject*"] = f"CDK's read-write grant on {scope}: deleting those objects."
        if write and self.encryption_key is not None:
            findings.update(kms_grant_findings("this bucket's objects"))
        principal = grantee.grant_principal
        if pattern != "*" and isinstance(principal, Construct):
            finding = resource_finding(principal, self.bucket.bucket_arn, f"/{pattern}", owner=self.bucket)
            findings[finding] = f"Objects under the key prefix the grant names ({pattern}) only."
        acknowledge_grant(grantee, findings)

    def grant_object_retention(self, grantee: iam.IGrantable, objects_key_pattern: str = "*") -> iam.Grant:
        """Set and read the Object Lock retention of objects: lock them, or lock them longer.

        Only ``s3:PutObjectRetention`` and ``s3:GetObjectRetention``: no governance bypass and
        no legal hold, so the grantee cannot shorten or lift a lock, nor read the objects.
        """
        return iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["s3:GetObjectRetention", "s3:PutObjectRetention"],
            resource_arns=[self.bucket.arn_for_objects(objects_key_pattern)],
        )


def _checked_auto_delete(
    errors: PropErrors,
    auto_delete_objects: bool,
    removal_policy: RemovalPolicy,
    has_default_retention: bool,
    locked: bool,
    append_only: bool,
) -> bool:
    """``auto_delete_objects`` where it is allowed; each conflict recorded, and the setting dropped.

    A failed check records its message and builds without the offending setting, so that CDK
    reports every message at synthesis instead of failing on the first one here.
    """
    for ok, message in (
        (removal_policy == RemovalPolicy.DESTROY, "auto_delete_objects needs removal_policy=DESTROY"),
        (
            not has_default_retention,
            "auto_delete_objects cannot be combined with object_lock: locked objects cannot be deleted",
        ),
        (not append_only, "append_only cannot be combined with auto_delete_objects: the policy denies every delete"),
        (
            not locked,
            "auto_delete_objects cannot be combined with object_lock_enabled: locked objects cannot be deleted",
        ),
    ):
        if auto_delete_objects and not errors.check(ok, message):
            auto_delete_objects = False
    return auto_delete_objects


def _lock_retention(
    errors: PropErrors, object_lock: tuple[ObjectLockMode, int] | None
) -> s3.ObjectLockRetention | None:
    """The default Object Lock retention of ``object_lock`` (mode, days), or none."""
    if object_lock is None:
        return None
    mode, days = object_lock
    if not errors.check(
        mode in ("governance", "compliance") and (is_unresolved(days) or 1 <= days <= 36500),
        f"object_lock must be ('governance'|'compliance', 1..36500 days) (given {object_lock})",
    ):
        mode, days = "governance", 1
    if mode == "governance":
        return s3.ObjectLockRetention.governance(Duration.days(days))
    return s3.ObjectLockRetention.compliance(Duration.days(days))


def _default_lifecycle() -> list[s3.LifecycleRule]:
    """Abort incomplete multipart uploads after 7 days, expire noncurrent versions after 90."""
    return [
        s3.LifecycleRule(
            id="AbortIncompleteUploads",
            abort_incomplete_multipart_upload_after=Duration.days(7),
            noncurrent_version_expiration=Duration.days(90),
        )
    ]
