"""A Glue Data Catalog database: the namespace whose tables Athena queries by name."""

from __future__ import annotations

import re

from aws_cdk import Stack
from aws_cdk import aws_glue as glue
from aws_cdk import aws_iam as iam
from constructs import Construct

from constructs_lib.validation import PropErrors, is_unresolved

#: Names Athena reads without quoting (Glue lowercases names; Athena refuses hyphens unquoted).
CATALOG_NAME = re.compile(r"[a-z][a-z0-9_]{0,254}")


class CatalogDatabase(Construct):
    """A Glue database that holds tables described in code (no crawler).

    Example::

        trail = CatalogDatabase(self, "Trail", database_name="orders_trail")
        JsonTable(self, "Events", database=trail, table_name="events", bucket=bucket, prefix="events/",
                  columns=[Column("order_id", "string")])

    Args:
        database_name: the name queries use: lowercase letters, digits and ``_``, starting with a
            letter, at most 255 characters. Required: Athena SQL names a database by its name,
            so it cannot be left to CloudFormation.
        description: what the database holds. Defaults to none.
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, database_name: str, description: str | None = None
    ) -> None:
        super().__init__(scope, construct_id)
        errors = PropErrors(self)
        errors.check(
            is_unresolved(database_name) or bool(CATALOG_NAME.fullmatch(database_name)),
            "database_name must be 1..255 lowercase letters, digits or '_', starting with a letter "
            f"(given {database_name!r})",
        )
        stack = Stack.of(self)
        self.database: glue.CfnDatabase = glue.CfnDatabase(
            self,
            "Resource",
            catalog_id=stack.account,
            database_input=glue.CfnDatabase.DatabaseInputProperty(name=database_name, description=description),
        )
        #: The database's name, as queries spell it.
        self.database_name: str = database_name
        #: The account's Data Catalog, which every Glue database and table call also names.
        self.catalog_arn: str = stack.format_arn(service="glue", resource="catalog")
        self.database_arn: str = stack.format_arn(service="glue", resource="database", resource_name=database_name)

    def table_arn(self, table_name: str) -> str:
        """The ARN of a table of this database."""
        return Stack.of(self).format_arn(
            service="glue", resource="table", resource_name=f"{self.database_name}/{table_name}"
        )

    def grant_read_metadata(self, grantee: iam.IGrantable) -> iam.Grant:
        """Read the database's definition (what Athena needs before it reads any of its tables)."""
        return iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["glue:GetDatabase", "glue:GetDatabases"],
            resource_arns=[self.catalog_arn, self.database_arn],
        )
