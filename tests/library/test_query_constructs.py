"""CatalogDatabase, JsonTable and AthenaWorkgroup on their own, outside the app: defaults, grants, bad props."""

from __future__ import annotations

import re
from typing import Any

import pytest
from aws_cdk import App, Size, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Match, Template

from constructs_lib import AthenaWorkgroup, CatalogDatabase, Column, JsonTable, Partition


def _parts(stack: Stack) -> tuple[s3.Bucket, kms.Key, CatalogDatabase]:
    key = kms.Key(stack, "Key", enable_key_rotation=True)
    bucket = s3.Bucket(stack, "Bucket", encryption_key=key)
    return bucket, key, CatalogDatabase(stack, "Db", database_name="shop_trail")


def _statements(template: Template) -> list[dict[str, Any]]:
    policies = template.find_resources("AWS::IAM::Policy")
    return [s for p in policies.values() for s in p["Properties"]["PolicyDocument"]["Statement"]]


def test_a_table_reads_json_lines_with_projected_daily_partitions() -> None:
    stack = Stack(App(), "Table")
    bucket, _, database = _parts(stack)
    table = JsonTable(
        stack,
        "Events",
        database=database,
        table_name="events",
        bucket=bucket,
        prefix="events/",
        columns=[Column("order_id", "string", "the order"), Column("tags", "array<string>")],
        partitions=Partition.daily(2026, 2050),
    )

    template = Template.from_stack(stack)

    location = {"Fn::Join": ["", ["s3://", {"Ref": Match.any_value()}, "/events/"]]}
    template.has_resource_properties(
        "AWS::Glue::Table",
        {
            "DatabaseName": {"Ref": Match.string_like_regexp("Db")},
            "TableInput": {
                "Name": "events",
                "TableType": "EXTERNAL_TABLE",
                "Parameters": {
                    "classification": "json",
                    "EXTERNAL": "TRUE",
                    "projection.enabled": "true",
                    "storage.location.template": {
                        "Fn::Join": [
                            "",
                            ["s3://", {"Ref": Match.any_value()}, "/events/year=${year}/month=${month}/day=${day}/"],
                        ]
                    },
                    "projection.year.type": "integer",
                    "projection.year.range": "2026,2050",
                    "projection.year.digits": "4",
                    "projection.month.type": "integer",
                    "projection.month.range": "1,12",
                    "projection.month.digits": "2",
                    "projection.day.type": "integer",
                    "projection.day.range": "1,31",
                    "projection.day.digits": "2",
                },
                "PartitionKeys": [
                    {"Name": "year", "Type": "int"},
                    {"Name": "month", "Type": "int"},
                    {"Name": "day", "Type": "int"},
                ],
                "StorageDescriptor": {
                    "Columns": [
                        {"Name": "order_id", "Type": "string", "Comment": "the order"},
                        {"Name": "tags", "Type": "array<string>"},
                    ],
                    "Location": location,
                    "InputFormat": "org.apache.hadoop.mapred.TextInputFormat",
                    "OutputFormat": "org.apache.hadoop.hive.ql.io.HiveIgnoreKeyTextOutputFormat",
                    # a malformed line fails the query by default: a broken writer is noticed
                    "SerdeInfo": {
                        "SerializationLibrary": "org.openx.data.jsonserde.JsonSerDe",
                        "Parameters": {"ignore.malformed.json": "false"},
                    },
                },
            },
        },
    )
    template.has_resource_properties("AWS::Glue::Database", {"DatabaseInput": {"Name": "shop_trail"}})
    assert table.qualified_name == '"shop_trail"."events"'
    assert table.column_types == {
        "order_id": "string",
        "tags": "array<string>",
        "year": "int",
        "month": "int",
        "day": "int",
    }
    assert table.partition_keys == ("year", "month", "day")


def test_a_table_without_partitions_has_no_projection() -> None:
    stack = Stack(App(), "Flat")
    bucket, _, database = _parts(stack)
    JsonTable(
        stack, "T", database=database, table_name="flat", bucket=bucket, prefix="f/", columns=[Column("a", "bigint")]
    )

    parameters = next(iter(Template.from_stack(stack).find_resources("AWS::Glue::Table").values()))["Properties"][
        "TableInput"
    ]["Parameters"]
    assert parameters == {"classification": "json", "EXTERNAL": "TRUE"}


def test_grant_read_covers_the_catalog_entries_the_objects_under_the_prefix_and_their_key() -> None:
    stack = Stack(App(), "Grants")
    bucket, _, database = _parts(stack)
    table = JsonTable(
        stack, "T", database=database, table_name="t", bucket=bucket, prefix="p/", columns=[Column("a", "string")]
    )
    role = iam.Role(stack, "Reader", assumed_by=iam.AccountRootPrincipal())

    table.grant_read(role)

    statements = _statements(Template.from_stack(stack))
    actions = {a for s in statements for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    assert {"glue:GetTable", "glue:GetPartitions", "glue:GetDatabase", "s3:GetObject*", "kms:Decrypt"} <= actions
    assert not {a for a in actions if a.startswith(("s3:Put", "s3:Delete", "glue:Update", "glue:Delete"))}
    table_arns = [s["Resource"] for s in statements if "glue:GetTable" in s["Action"]]
    assert any(":table/shop_trail/t" in str(resources) for resources in table_arns)


def test_a_workgroup_enforces_encrypted_results_a_scan_limit_and_metrics() -> None:
    stack = Stack(App(), "Workgroup")
    bucket, key, database = _parts(stack)
    workgroup = AthenaWorkgroup(
        stack, "Analysts", workgroup_name="shop-analysts", results_bucket=bucket, encryption_key=key
    )
    workgroup.add_named_query("Daily", name="daily", database=database, query="SELECT 1")

    template = Template.from_stack(stack)

    template.has_resource_properties(
        "AWS::Athena::WorkGroup",
        {
            "Name": "shop-analysts",
            "RecursiveDeleteOption": False,
            "WorkGroupConfiguration": {
                "EnforceWorkGroupConfiguration": True,
                "PublishCloudWatchMetricsEnabled": True,
                "RequesterPaysEnabled": False,
                "BytesScannedCutoffPerQuery": 1024**3,  # 1 GiB unless the caller says otherwise
                "ResultConfiguration": {
                    "OutputLocation": {"Fn::Join": ["", ["s3://", {"Ref": Match.any_value()}, "/shop-analysts/"]]},
                    "EncryptionConfiguration": {
                        "EncryptionOption": "SSE_KMS",
                        "KmsKey": {"Fn::GetAtt": [Match.string_like_regexp("Key"), "Arn"]},
                    },
                },
            },
        },
    )
    template.has_resource_properties(
        "AWS::Athena::NamedQuery",
        {
            "Name": "daily",
            "QueryString": "SELECT 1",
            "Database": {"Ref": Match.string_like_regexp("Db")},
            "WorkGroup": {"Ref": Match.string_like_regexp("Analysts")},
        },
    )


def test_grant_query_runs_queries_in_the_workgroup_and_reads_its_results_only() -> None:
    stack = Stack(App(), "QueryGrant")
    bucket, key, _ = _parts(stack)
    workgroup = AthenaWorkgroup(
        stack, "Wg", workgroup_name="wg", results_bucket=bucket, encryption_key=key, results_prefix="results/"
    )
    role = iam.Role(stack, "Analyst", assumed_by=iam.AccountRootPrincipal())

    workgroup.grant_query(role)

    statements = _statements(Template.from_stack(stack))
    athena = [s for s in statements if any(str(a).startswith("athena:") for a in s["Action"])]
    assert len(athena) == 1
    assert "athena:StartQueryExecution" in athena[0]["Action"]
    assert ":workgroup/wg" in str(athena[0]["Resource"])
    objects = [s for s in statements if "s3:PutObject" in s["Action"]]
    assert objects
    assert all("/results/*" in str(s["Resource"]) for s in objects)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda s, b, k, d: CatalogDatabase(s, "Bad", database_name="Shop-Trail"), "database_name must be"),
        (
            lambda s, b, k, d: JsonTable(
                s, "Bad", database=d, table_name="t", bucket=b, prefix="/p", columns=[Column("a", "string")]
            ),
            r"prefix must be a relative prefix ending in '/' \(given '/p'\)",
        ),
        (
            lambda s, b, k, d: JsonTable(s, "Bad", database=d, table_name="t", bucket=b, prefix="p/", columns=[]),
            "columns must name at least one field",
        ),
        (
            lambda s, b, k, d: JsonTable(
                s,
                "Bad",
                database=d,
                table_name="t",
                bucket=b,
                prefix="p/",
                columns=[Column("a", "string"), Column("a", "bigint")],
            ),
            r"column and partition names must be unique \(given \['a'\] twice\)",
        ),
        (
            lambda s, b, k, d: JsonTable(
                s, "Bad", database=d, table_name="t", bucket=b, prefix="p/", columns=[Column("a", "number")]
            ),
            "a: type 'number' is not a Hive type",
        ),
        (
            lambda s, b, k, d: JsonTable(
                s,
                "Bad",
                database=d,
                table_name="t",
                bucket=b,
                prefix="p/",
                columns=[Column("a", "string")],
                partitions=[Partition.integer("year", 2050, 2026)],
            ),
            r"partition year: integer range must be 'low,high' with low <= high \(given '2050,2026'\)",
        ),
        (
            lambda s, b, k, d: AthenaWorkgroup(
                s,
                "Bad",
                workgroup_name="wg",
                results_bucket=b,
                encryption_key=k,
                bytes_scanned_cutoff=Size.mebibytes(1),
            ),
            r"bytes_scanned_cutoff must be at least 10000000 bytes \(10 MB\) \(given 1048576\)",
        ),
        (
            lambda s, b, k, d: AthenaWorkgroup(s, "Bad", workgroup_name="wg one", results_bucket=b, encryption_key=k),
            "workgroup_name must be",
        ),
    ],
)
def test_fails_on_bad_props(build: Any, message: str) -> None:
    stack = Stack(App(), "S")
    bucket, key, database = _parts(stack)
    build(stack, bucket, key, database)
    with pytest.raises(RuntimeError, match=r"\[S/Bad\] " + message):
        Template.from_stack(stack)


def test_partition_helpers_spell_the_projection_settings() -> None:
    assert Partition.integer("hour", 0, 23, digits=2) == Partition(
        "hour", "int", {"type": "integer", "range": "0,23", "digits": "2"}
    )
    assert Partition.enum("region", ["eu", "us"]) == Partition("region", "string", {"type": "enum", "values": "eu,us"})
    assert [p.name for p in Partition.daily(2026, 2030)] == ["year", "month", "day"]
    assert re.fullmatch(r"\d{4},\d{4}", Partition.daily(2026, 2030)[0].projection["range"])
