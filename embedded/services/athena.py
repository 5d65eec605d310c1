"""Checks of the trail's Glue tables and saved queries: JSON values against Hive types, keys against the
partition projection, and SQL against the tables' columns (moto's Athena runs no SQL, so sqlglot parses it
in Athena's dialect and resolves every column against the catalog).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import OptimizeError
from sqlglot.optimizer.qualify import qualify

_INTEGER_RANGES = {"tinyint": 2**7, "smallint": 2**15, "int": 2**31, "bigint": 2**63}


@dataclass(frozen=True)
class CatalogTable:
    """A Glue table as a reader sees it: its columns with their types, partition keys, properties."""

    database: str
    name: str
    columns: dict[str, str]
    partition_keys: tuple[str, ...]
    parameters: dict[str, Any]  # as the catalog holds them (a template's may hold references)

    @classmethod
    def of(cls, table: Mapping[str, Any]) -> CatalogTable:
        """From a ``glue.get_table`` answer's ``Table`` (or a template's ``TableInput`` with its database)."""
        storage = table["StorageDescriptor"]
        partitions = list(table.get("PartitionKeys", []))
        return cls(
            database=str(table.get("DatabaseName", "")),
            name=str(table["Name"]),
            columns={str(c["Name"]): str(c["Type"]) for c in [*storage["Columns"], *partitions]},
            partition_keys=tuple(str(p["Name"]) for p in partitions),
            parameters=dict(table.get("Parameters", {})),
        )

    @property
    def location_template(self) -> str:
        return str(self.parameters["storage.location.template"])

    def partition_values(self, bucket: str, key: str) -> dict[str, str]:
        """The partition values an object's key holds, read with the projection's location template.

        Raises ``ValueError`` when the key is not under the template.
        """
        pattern = re.escape(self.location_template)
        for name in self.partition_keys:
            pattern = pattern.replace(re.escape("${" + name + "}"), f"(?P<{name}>[^/]+)")
        match = re.match(pattern, f"s3://{bucket}/{key}")
        if match is None:
            raise ValueError(f"s3://{bucket}/{key} is not under {self.location_template}")
        return match.groupdict()

    def projection_refuses(self, name: str, value: str) -> str | None:
        """Why the projection of partition key ``name`` would never produce ``value`` (None: it would)."""
        kind = self.parameters.get(f"projection.{name}.type")
        if kind == "integer":
            low, high = (int(v) for v in self.parameters[f"projection.{name}.range"].split(","))
            digits = int(self.parameters.get(f"projection.{name}.digits", "1"))
            if not value.isdigit() or not low <= int(value) <= high:
                return f"{name}={value} is outside {low}..{high}"
            if value != f"{int(value):0{digits}d}":
                return f"{name}={value} is not padded to {digits} digits"
            return None
        if kind == "enum":
            values = self.parameters[f"projection.{name}.values"].split(",")
            return None if value in values else f"{name}={value} is not one of {values}"
        return f"{name}: projection type {kind!r} is not checked here"


def fits(value: Any, hive_type: str) -> bool:
    """Whether the JSON SerDe reads ``value`` (a parsed JSON value) as a column of ``hive_type`` without loss."""
    t = hive_type.strip().lower()
    if value is None:
        return True
    if isinstance(value, bool):
        return t == "boolean"
    if isinstance(value, int):
        if t in _INTEGER_RANGES:
            return -_INTEGER_RANGES[t] <= value < _INTEGER_RANGES[t]
        return t in ("double", "float") or t.startswith("decimal")
    if isinstance(value, float):
        return t in ("double", "float") or t.startswith("decimal")
    if isinstance(value, str):
        return t == "string" or t.startswith(("varchar", "char"))
    if isinstance(value, list):
        inner = re.fullmatch(r"array<(.+)>", t)
        return inner is not None and all(fits(v, inner.group(1)) for v in value)
    if isinstance(value, dict):
        return t.startswith(("struct<", "map<"))
    return False


def misfits(line: Mapping[str, Any], table: CatalogTable) -> list[str]:
    """The fields of one JSON line that are no column of ``table``, or whose value the column's type cannot hold."""
    found = []
    for field_name, value in line.items():
        column_type = table.columns.get(field_name.lower())
        if column_type is None:
            found.append(f"{field_name} is no column of {table.name}")
        elif field_name.lower() in table.partition_keys:
            found.append(f"{field_name} is a partition key of {table.name}: the line's value would be ignored")
        elif not fits(value, column_type):
            found.append(f"{field_name}={value!r} does not fit {table.name}.{field_name} {column_type}")
    return found


def partition_date(values: Mapping[str, str]) -> datetime:
    return datetime(int(values["year"]), int(values["month"]), int(values["day"]), tzinfo=UTC)


def resolve_query(sql: str, tables: list[CatalogTable]) -> tuple[set[str], set[str], int]:
    """Parse ``sql`` as Athena does and resolve it against ``tables``.

    Returns the tables it reads (``database.table``), the columns it reads and the number of
    ``?`` parameters. Raises ``AssertionError`` naming what does not resolve: a table that is not
    one of ``tables``, a column no table has.
    """
    expression = sqlglot.parse_one(sql, dialect="athena")
    known = {f"{t.database}.{t.name}": t for t in tables}
    read = {f"{t.db}.{t.name}" for t in expression.find_all(exp.Table)}
    unknown = sorted(read - set(known))
    if unknown:
        raise ValueError(f"the query reads tables the catalog does not have: {unknown}")
    by_database: dict[str, dict[str, dict[str, str]]] = {}
    for table in tables:
        by_database.setdefault(table.database, {})[table.name] = table.columns
    schema: dict[str, object] = dict(by_database)
    try:
        qualified = qualify(expression, schema=schema, dialect="athena", validate_qualify_columns=True)
    except OptimizeError as error:
        raise AssertionError(f"the query does not resolve against the catalog: {error}") from None
    columns = {
        column.name
        for column in qualified.find_all(exp.Column)
        if column.table and any(column.name in t.columns for t in tables)
    }
    return read, columns, len(list(expression.find_all(exp.Placeholder)))


def locked_for(s3: Any, bucket: str, version: dict[str, Any], mode: str, days: int) -> bool:
    """Whether an object version holds ``mode`` retention of ``days`` from its creation (within a day)."""
    head = s3.head_object(Bucket=bucket, Key=version["Key"], VersionId=version["VersionId"])
    until = head.get("ObjectLockRetainUntilDate")
    return (
        head.get("ObjectLockMode") == mode
        and until is not None
        and abs(until - version["LastModified"] - timedelta(days=days)) <= timedelta(days=1)
    )
