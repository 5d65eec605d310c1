"""An Athena workgroup whose settings clients cannot override: encrypted results in one place, a scan limit."""

from __future__ import annotations

import re

from aws_cdk import Size, Stack
from aws_cdk import aws_athena as athena
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from constructs_lib.catalog_database import CatalogDatabase
from constructs_lib.validation import PropErrors, is_unresolved

#: Athena's smallest per-query scan limit (BytesScannedCutoffPerQuery), 10 MB.
MIN_BYTES_SCANNED_CUTOFF = 10_000_000
_WORKGROUP_NAME = re.compile(r"[A-Za-z0-9._-]{1,128}")


class AthenaWorkgroup(Construct):
    """An Athena workgroup: query results encrypted with a customer key under one prefix, a scan limit per query.

    Example::

        analysts = AthenaWorkgroup(self, "Analysts", workgroup_name="orders-analysts",
                                   results_bucket=results.bucket, encryption_key=key,
                                   bytes_scanned_cutoff=Size.gibibytes(1))
        analysts.add_named_query("ClicksPerPage", name="clicks per page", database=db,
                                 query="SELECT page, count(*) FROM clicks GROUP BY page")
        analysts.grant_query(analyst_role)

    The workgroup's configuration is enforced: a client cannot send results elsewhere or
    unencrypted, nor lift the scan limit. A query that would scan more than the limit is
    cancelled (and billed for what it scanned until then).

    Args:
        workgroup_name: the name clients choose the workgroup by. Required: Athena names
            workgroups, and queries run in one by its name.
        results_bucket: where query results go. Required.
        encryption_key: customer key the results are encrypted with (SSE-KMS). Required.
        results_prefix: key prefix of the results, relative, ending in ``/``. Defaults to
            ``<workgroup_name>/``.
        bytes_scanned_cutoff: the most one query may scan, at least 10 MB. Defaults to 1 GiB.
        recursive_delete: deleting the workgroup deletes its saved queries and history with it.
            Defaults to false, so CloudFormation refuses to delete a workgroup still in use.
        description: what the workgroup is for. Defaults to none.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        workgroup_name: str,
        results_bucket: s3.IBucket,
        encryption_key: kms.IKey,
        results_prefix: str | None = None,
        bytes_scanned_cutoff: Size | None = None,
        recursive_delete: bool = False,
        description: str | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        errors = PropErrors(self)
        errors.check(
            is_unresolved(workgroup_name) or bool(_WORKGROUP_NAME.fullmatch(workgroup_name)),
            f"workgroup_name must be 1..128 letters, digits, '.', '_' or '-' (given {workgroup_name!r})",
        )
        prefix = results_prefix if results_prefix is not None else f"{workgroup_name}/"
        errors.check(
            is_unresolved(prefix) or bool(prefix and not prefix.startswith("/") and prefix.endswith("/")),
            f"results_prefix must be a relative prefix ending in '/' (given {prefix!r})",
        )
        cutoff = bytes_scanned_cutoff or Size.gibibytes(1)
        cutoff_bytes = None if cutoff.is_unresolved() else cutoff.to_bytes()
        errors.check(
            cutoff_bytes is None or cutoff_bytes >= MIN_BYTES_SCANNED_CUTOFF,
            f"bytes_scanned_cutoff must be at least {MIN_BYTES_SCANNED_CUTOFF} bytes (10 MB) (given {cutoff_bytes})",
        )

        self.results_bucket = results_bucket
        self.results_prefix = prefix
        self.encryption_key = encryption_key
        #: ``s3://bucket/prefix``, where every query of the workgroup writes its results.
        self.results_location: str = f"s3://{results_bucket.bucket_name}/{prefix}"
        self.workgroup: athena.CfnWorkGroup = athena.CfnWorkGroup(
            self,
            "Resource",
            name=workgroup_name,
            description=description,
            recursive_delete_option=recursive_delete,
            work_group_configuration=athena.CfnWorkGroup.WorkGroupConfigurationProperty(
                enforce_work_group_configuration=True,
                publish_cloud_watch_metrics_enabled=True,
                bytes_scanned_cutoff_per_query=cutoff_bytes,
                requester_pays_enabled=False,
                result_configuration=athena.CfnWorkGroup.ResultConfigurationProperty(
                    output_location=self.results_location,
                    encryption_configuration=athena.CfnWorkGroup.EncryptionConfigurationProperty(
                        encryption_option="SSE_KMS", kms_key=encryption_key.key_arn
                    ),
                ),
            ),
        )
        self.workgroup_name: str = workgroup_name
        self.workgroup_arn: str = Stack.of(self).format_arn(
            service="athena", resource="workgroup", resource_name=workgroup_name
        )
        #: The saved queries added with :meth:`add_named_query`, by construct id.
        self.named_queries: dict[str, athena.CfnNamedQuery] = {}

    def add_named_query(
        self, construct_id: str, *, name: str, query: str, database: CatalogDatabase, description: str | None = None
    ) -> athena.CfnNamedQuery:
        """Save a query in this workgroup, run against ``database`` (``?`` marks a parameter Athena asks for)."""
        named = athena.CfnNamedQuery(
            self,
            construct_id,
            name=name,
            description=description,
            database=database.database.ref,
            query_string=query,
            work_group=self.workgroup.ref,
        )
        self.named_queries[construct_id] = named
        return named

    def grant_query(self, grantee: iam.IGrantable) -> iam.Grant:
        """Run queries in this workgroup and read their results (and the saved queries).

        The tables a query reads need their own grant (``JsonTable.grant_read``).
        """
        self.results_bucket.grant_read_write(grantee, f"{self.results_prefix}*")
        self.encryption_key.grant_encrypt_decrypt(grantee)
        return iam.Grant.add_to_principal(
            grantee=grantee,
            actions=[
                "athena:StartQueryExecution",
                "athena:StopQueryExecution",
                "athena:GetQueryExecution",
                "athena:GetQueryResults",
                "athena:GetQueryResultsStream",
                "athena:BatchGetQueryExecution",
                "athena:ListQueryExecutions",
                "athena:GetWorkGroup",
                "athena:GetNamedQuery",
                "athena:BatchGetNamedQuery",
                "athena:ListNamedQueries",
            ],
            resource_arns=[self.workgroup_arn],
        )
