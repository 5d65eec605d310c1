"""A Glue table over JSON lines under an S3 prefix, partitioned by projection (no crawler, no MSCK REPAIR)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from aws_cdk import Stack
from aws_cdk import aws_glue as glue
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from constructs_lib.catalog_database import CATALOG_NAME, CatalogDatabase
from constructs_lib.validation import PropErrors, is_unresolved

#: The SerDe that reads one JSON object per line (Athena's OpenX JSON SerDe).
JSON_SERDE = "org.openx.data.jsonserde.JsonSerDe"
_INPUT_FORMAT = "org.apache.hadoop.mapred.TextInputFormat"
_OUTPUT_FORMAT = "org.apache.hadoop.hive.ql.io.HiveIgnoreKeyTextOutputFormat"
_PRIMITIVE = (
    r"string|boolean|tinyint|smallint|int|bigint|float|double|date|timestamp|binary"
    r"|decimal\(\d+,\s*\d+\)|varchar\(\d+\)|char\(\d+\)"
)
_TYPE = re.compile(rf"(?:{_PRIMITIVE})|(?:array|map|struct)<.+>")
_PROJECTION_TYPES = ("integer", "enum", "date", "injected")


@dataclass(frozen=True)
class Column:
    """One column of a table: its name, its Hive type as Athena DDL spells it, and what it means.

    ``type`` is a Hive type: ``string``, ``bigint``, ``double``, ``boolean``, ``array<string>``,
    ``struct<...>``; a JSON number that may carry a fraction is a ``double``.
    """

    name: str
    type: str
    comment: str | None = None


@dataclass(frozen=True)
class Partition:
    """A partition key whose values Athena computes from the table's projection settings.

    ``projection`` holds the ``projection.<name>.<setting>`` table properties without the prefix,
    e.g. ``{"type": "integer", "range": "1,12", "digits": "2"}``. Objects are expected under
    Hive-style folders, ``<name>=<value>/``, one per key in order.
    """

    name: str
    type: str
    projection: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def integer(cls, name: str, low: int, high: int, *, digits: int | None = None) -> Partition:
        """Whole numbers ``low..high``, left-padded with zeros to ``digits`` (``month=03``)."""
        projection = {"type": "integer", "range": f"{low},{high}"}
        if digits is not None:
            projection["digits"] = str(digits)
        return cls(name, "int", projection)

    @classmethod
    def enum(cls, name: str, values: Sequence[str]) -> Partition:
        """One of the given strings."""
        return cls(name, "string", {"type": "enum", "values": ",".join(values)})

    @staticmethod
    def daily(first_year: int, last_year: int) -> tuple[Partition, Partition, Partition]:
        """``year=YYYY/month=MM/day=DD/``: the date layout ``S3DeliveryStream`` writes."""
        return (
            Partition.integer("year", first_year, last_year, digits=4),
            Partition.integer("month", 1, 12, digits=2),
            Partition.integer("day", 1, 31, digits=2),
        )


class JsonTable(Construct):
    """An external Glue table over objects of JSON lines (GZIP or plain) under one S3 prefix.

    Example::

        table = JsonTable(self, "Clicks", database=db, table_name="clicks", bucket=bucket, prefix="clicks/",
                          columns=[Column("page", "string"), Column("at", "bigint")],
                          partitions=Partition.daily(2026, 2050))
        table.grant_read(analyst_role)

    Partitions are projected: Athena computes them from the table properties, so new days are
    queryable the moment they are written, with no crawler and no ``MSCK REPAIR TABLE``. A query
    that restricts the partition keys reads only those folders.

    Args:
        database: the Glue database of the table. Required.
        table_name: the name queries use (lowercase letters, digits, ``_``). Required: SQL names it.
        bucket: the bucket holding the objects. Required.
        prefix: the key prefix of the objects, relative, ending in ``/``. Required.
        columns: the fields of each JSON line. Required, at least one; names unique and not a
            partition key's.
        partitions: partition keys, as Hive-style folders below ``prefix`` in this order.
            Defaults to none: every query reads the whole prefix.
        ignore_malformed_json: skip lines that are not JSON instead of failing the query.
            Defaults to false, so a writer that breaks the format is noticed.
        description: what the table holds. Defaults to none.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        database: CatalogDatabase,
        table_name: str,
        bucket: s3.IBucket,
        prefix: str,
        columns: Sequence[Column],
        partitions: Sequence[Partition] = (),
        ignore_malformed_json: bool = False,
        description: str | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        errors = PropErrors(self)
        errors.check(
            is_unresolved(table_name) or bool(CATALOG_NAME.fullmatch(table_name)),
            "table_name must be 1..255 lowercase letters, digits or '_', starting with a letter "
            f"(given {table_name!r})",
        )
        errors.check(
            is_unresolved(prefix) or bool(prefix and not prefix.startswith("/") and prefix.endswith("/")),
            f"prefix must be a relative prefix ending in '/' (given {prefix!r})",
        )
        errors.check(bool(columns), "columns must name at least one field (given none)")
        names = [c.name for c in columns] + [p.name for p in partitions]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        errors.check(not duplicates, f"column and partition names must be unique (given {duplicates} twice)")
        described: list[Column | Partition] = [*columns, *partitions]
        for item in described:
            errors.check(
                bool(CATALOG_NAME.fullmatch(item.name)),
                f"column names must be lowercase letters, digits or '_' (given {item.name!r})",
            )
            errors.check(bool(_TYPE.fullmatch(item.type)), f"{item.name}: type {item.type!r} is not a Hive type")
        for partition in partitions:
            self._check_projection(errors, partition)

        self.database = database
        self.bucket = bucket
        self.prefix = prefix
        self.table_name: str = table_name
        #: Every column and partition key with its type, in table order (partition keys last).
        self.column_types: dict[str, str] = {c.name: c.type for c in described}
        self.partition_keys: tuple[str, ...] = tuple(p.name for p in partitions)
        #: ``s3://bucket/prefix/``, the table's location.
        self.location: str = f"s3://{bucket.bucket_name}/{prefix}"
        #: Where the objects of one partition are: ``storage.location.template`` of the projection.
        self.location_template: str = self.location + "".join(f"{p.name}=${{{p.name}}}/" for p in partitions)
        parameters = self._parameters(partitions)
        self.table: glue.CfnTable = glue.CfnTable(
            self,
            "Resource",
            catalog_id=Stack.of(self).account,
            database_name=database.database.ref,
            table_input=glue.CfnTable.TableInputProperty(
                name=table_name,
                description=description,
                table_type="EXTERNAL_TABLE",
                parameters=parameters,
                partition_keys=[_column(p.name, p.type, None) for p in partitions],
                storage_descriptor=glue.CfnTable.StorageDescriptorProperty(
                    columns=[_column(c.name, c.type, c.comment) for c in columns],
                    location=self.location,
                    input_format=_INPUT_FORMAT,
                    output_format=_OUTPUT_FORMAT,
                    serde_info=glue.CfnTable.SerdeInfoProperty(
                        serialization_library=JSON_SERDE,
                        parameters={"ignore.malformed.json": str(ignore_malformed_json).lower()},
                    ),
                ),
            ),
        )
        self.table_arn: str = database.table_arn(table_name)

    def _parameters(self, partitions: Sequence[Partition]) -> dict[str, str]:
        """The table's properties: JSON, external, and the projection of each partition key."""
        parameters: dict[str, str] = {"classification": "json", "EXTERNAL": "TRUE"}
        if partitions:
            parameters["projection.enabled"] = "true"
            parameters["storage.location.template"] = self.location_template
            for partition in partitions:
                for setting, value in partition.projection.items():
                    parameters[f"projection.{partition.name}.{setting}"] = value
        return parameters

    @property
    def qualified_name(self) -> str:
        """``"database"."table"``, as a query names the table."""
        return f'"{self.database.database_name}"."{self.table_name}"'

    def grant_read(self, grantee: iam.IGrantable) -> iam.Grant:
        """Query the table: its catalog entries, and read (and decrypt) the objects under its prefix."""
        self.database.grant_read_metadata(grantee)
        self.bucket.grant_read(grantee, f"{self.prefix}*")
        return iam.Grant.add_to_principal(
            grantee=grantee,
            actions=[
                "glue:GetTable",
                "glue:GetTables",
                "glue:GetPartition",
                "glue:GetPartitions",
                "glue:BatchGetPartition",
            ],
            resource_arns=[self.database.catalog_arn, self.database.database_arn, self.table_arn],
        )

    @staticmethod
    def _check_projection(errors: PropErrors, partition: Partition) -> None:
        kind = partition.projection.get("type")
        if not errors.check(
            kind in _PROJECTION_TYPES,
            f"partition {partition.name}: projection type must be one of {list(_PROJECTION_TYPES)} (given {kind!r})",
        ):
            return
        if kind == "integer":
            low, _, high = partition.projection.get("range", "").partition(",")
            errors.check(
                low.strip().lstrip("-").isdigit() and high.strip().lstrip("-").isdigit() and int(low) <= int(high),
                f"partition {partition.name}: integer range must be 'low,high' with low <= high "
                f"(given {partition.projection.get('range')!r})",
            )
        if kind == "enum":
            errors.check(
                bool(partition.projection.get("values")),
                f"partition {partition.name}: an enum projection needs its values (given none)",
            )


def _column(name: str, type_: str, comment: str | None) -> glue.CfnTable.ColumnProperty:
    return glue.CfnTable.ColumnProperty(name=name, type=type_, comment=comment)
