"""A DynamoDB single table: string PK/SK, GSIs, TTL, stream, PITR and a customer-managed key."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from constructs_lib.validation import PropErrors

_TYPES = {"S": dynamodb.AttributeType.STRING, "N": dynamodb.AttributeType.NUMBER}

_ITEM_READ = (
    "dynamodb:GetItem",
    "dynamodb:BatchGetItem",
    "dynamodb:Query",
    "dynamodb:ConditionCheckItem",
    "dynamodb:DescribeTable",
)
_ITEM_WRITE = (
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:BatchWriteItem",
    "dynamodb:ConditionCheckItem",  # a ConditionCheck in a TransactWriteItems is authorized as this action
)
_KEY_READ = ("kms:Decrypt", "kms:DescribeKey")
_KEY_WRITE = ("kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey", "kms:DescribeKey")


@dataclass(frozen=True)
class GlobalIndex:
    """A global secondary index on the table.

    ``include`` of None projects every attribute; a tuple projects the keys plus those names.
    """

    name: str
    partition_key: str
    partition_type: Literal["S", "N"]
    sort_key: str
    sort_type: Literal["S", "N"]
    include: tuple[str, ...] | None = None


class SingleTable(Construct):
    """An on-demand single table with a stream, TTL and customer-key encryption.

    Example::

        table = SingleTable(self, "Orders", encryption_key=key,
                            indexes=[GlobalIndex("ByOwner", "owner_id", "S", "updated_at", "N")])
        table.grant_read_write_data(my_function)   # the table, its named indexes, its key

    Args:
        encryption_key: the customer-managed key for the table and its stream. Required: a table
            that holds personal data is never left on an AWS-owned key.
        partition_key / sort_key: key attribute names (strings). Default to ``PK`` / ``SK``.
        indexes: global secondary indexes. Defaults to none.
        ttl_attribute: attribute holding the expiry epoch second. Defaults to ``ttl``.
        stream: stream view type. Defaults to NEW_AND_OLD_IMAGES, which change detection and audit
            need; pass None to turn the stream off.
        point_in_time_recovery: continuous backups. Defaults to on.
        deletion_protection: refuse DeleteTable. Defaults to off.
        removal_policy: defaults to RETAIN; a caller opts into DESTROY for throwaway stages.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        encryption_key: kms.IKey,
        partition_key: str = "PK",
        sort_key: str = "SK",
        indexes: Sequence[GlobalIndex] = (),
        ttl_attribute: str | None = "ttl",
        stream: dynamodb.StreamViewType | None = dynamodb.StreamViewType.NEW_AND_OLD_IMAGES,
        point_in_time_recovery: bool = True,
        deletion_protection: bool = False,
        removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
    ) -> None:
        super().__init__(scope, construct_id)
        errors = PropErrors(self)
        names = [i.name for i in indexes]
        errors.check(len(set(names)) == len(names), f"index names must be unique (given {names})")
        errors.check(len(names) <= 20, f"a table has at most 20 global secondary indexes (given {len(names)})")
        # Only the indexes CDK can build are added; the others are reported at synthesis.
        valid: list[GlobalIndex] = []
        for index in indexes:
            if (
                errors.check(
                    index.partition_type in _TYPES and index.sort_type in _TYPES,
                    f"index {index.name}: key types must be 'S' or 'N' (given {index})",
                )
                and index.name not in {i.name for i in valid}
                and len(valid) < 20
            ):
                valid.append(index)
        indexes = valid
        names = [i.name for i in indexes]

        self.table: dynamodb.Table = dynamodb.Table(
            self,
            "Resource",
            partition_key=dynamodb.Attribute(name=partition_key, type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name=sort_key, type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            encryption=dynamodb.TableEncryption.CUSTOMER_MANAGED,
            encryption_key=encryption_key,
            time_to_live_attribute=ttl_attribute,
            stream=stream,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=point_in_time_recovery
            ),
            deletion_protection=deletion_protection,
            removal_policy=removal_policy,
        )
        for index in indexes:
            self.table.add_global_secondary_index(
                index_name=index.name,
                partition_key=dynamodb.Attribute(name=index.partition_key, type=_TYPES[index.partition_type]),
                sort_key=dynamodb.Attribute(name=index.sort_key, type=_TYPES[index.sort_type]),
                projection_type=dynamodb.ProjectionType.ALL
                if index.include is None
                else dynamodb.ProjectionType.INCLUDE,
                non_key_attributes=list(index.include) if index.include else None,
            )
        self.encryption_key: kms.IKey = encryption_key
        #: Names of the global secondary indexes, in the order given.
        self.index_names: tuple[str, ...] = tuple(names)

    def grant_read_data(self, grantee: iam.IGrantable) -> iam.Grant:
        """Read items and query the table's indexes; decrypt with its key."""
        return self._grant(grantee, _ITEM_READ, _KEY_READ)

    def grant_write_data(self, grantee: iam.IGrantable) -> iam.Grant:
        """Put, update and delete items (also in batches); encrypt and decrypt with its key."""
        return self._grant(grantee, (*_ITEM_WRITE, "dynamodb:DescribeTable"), _KEY_WRITE)

    def grant_read_update_data(self, grantee: iam.IGrantable) -> iam.Grant:
        """Read items, put and update them, never delete; for a function that only keeps counters or slots."""
        return self._grant(grantee, (*_ITEM_READ, "dynamodb:PutItem", "dynamodb:UpdateItem"), _KEY_WRITE)

    def grant_read_write_data(self, grantee: iam.IGrantable) -> iam.Grant:
        """Read, write and delete items, query the table's indexes; use its key."""
        return self._grant(grantee, (*_ITEM_READ, *_ITEM_WRITE), _KEY_WRITE)

    def grant_index_query(self, grantee: iam.IGrantable, index_name: str) -> iam.Grant:
        """Query one of the table's indexes and nothing else (no item reads, no other index); decrypt with its key.

        For a reader that needs one access pattern, such as a count of one sparse index.
        """
        if index_name not in self.index_names:
            raise ValueError(
                f"index_name must be one of the table's indexes {list(self.index_names)} (given {index_name!r})"
            )
        self.encryption_key.grant(grantee, *_KEY_READ)
        return iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["dynamodb:Query"],
            resource_arns=[f"{self.table.table_arn}/index/{index_name}"],
        )

    def _grant(self, grantee: iam.IGrantable, actions: Sequence[str], key_actions: Sequence[str]) -> iam.Grant:
        """Item ``actions`` on the table and each of its named indexes, ``key_actions`` on its key.

        ``Table.grant_*`` would name ``<table>/index/*`` and ``kms:GenerateDataKey*``/``ReEncrypt*``,
        wildcards that cdk-nag reports on every grantee; naming the table's own indexes and the
        key actions DynamoDB uses is tighter and leaves nothing to acknowledge.
        """
        arn = self.table.table_arn
        self.encryption_key.grant(grantee, *key_actions)
        return iam.Grant.add_to_principal(
            grantee=grantee,
            actions=list(actions),
            resource_arns=[arn, *(f"{arn}/index/{name}" for name in self.index_names)],
        )

    def grant_stream_read(self, grantee: iam.IGrantable) -> iam.Grant:
        """Read the table's stream (and decrypt it)."""
        return self.table.grant_stream_read(grantee)
