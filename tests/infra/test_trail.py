"""The trail in the Events templates (dev, prod): tables over what the streams write, the workgroup, saved queries."""

from __future__ import annotations

from typing import Any

from embedded.services.athena import CatalogTable, resolve_query
from embedded.synth import SynthesizedStage
from lambdas.events import trail
from stacks.trail import SAVED_QUERIES


def _resources(stage: SynthesizedStage, part: str, type_: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in stage.templates[part]["Resources"].items() if v["Type"] == type_}


def _tables(stage: SynthesizedStage) -> dict[str, CatalogTable]:
    (database,) = _resources(stage, "Events", "AWS::Glue::Database").values()
    name = database["Properties"]["DatabaseInput"]["Name"]
    return {
        t["Properties"]["TableInput"]["Name"]: CatalogTable.of({**t["Properties"]["TableInput"], "DatabaseName": name})
        for t in _resources(stage, "Events", "AWS::Glue::Table").values()
    }


def _storage_output(stage: SynthesizedStage, value: Any) -> str:
    """The Storage logical id a weak cross-stack reference (Fn::GetStackOutput) in the Events template names."""
    output = stage.templates["Storage"]["Outputs"][value["Fn::GetStackOutput"]["OutputName"]]["Value"]
    reference = output.get("Ref") or output["Fn::GetAtt"][0]
    return str(reference)


def test_the_tables_have_one_column_per_field_of_the_router_and_project_the_streams_daily_folders(
    any_stage: SynthesizedStage,
) -> None:
    tables = _tables(any_stage)
    streams = {
        lid: r["Properties"]["ExtendedS3DestinationConfiguration"]
        for lid, r in _resources(any_stage, "Events", "AWS::KinesisFirehose::DeliveryStream").items()
    }

    assert sorted(tables) == ["analytics", "audit"]
    assert any_stage.stage.config.name in next(iter(tables.values())).database
    for name, fields, stream_id in (
        ("audit", trail.AUDIT_FIELDS, "AuditDeliveryStream"),
        ("analytics", trail.ANALYTICS_FIELDS, "AnalyticsDeliveryStream"),
    ):
        table = tables[name]
        assert table.columns == {**{f: t for f, (t, _) in fields.items()}, "year": "int", "month": "int", "day": "int"}
        assert table.partition_keys == ("year", "month", "day")
        (destination,) = [d for lid, d in streams.items() if lid.startswith(stream_id)]
        template = _template_text(table.parameters["storage.location.template"])
        # The stream writes <prefix>year=!{timestamp:yyyy}/month=!{timestamp:MM}/day=!{timestamp:dd}/;
        # the projection looks in <prefix>year=${year}/month=${month}/day=${day}/ of the same bucket.
        expected = (
            destination["Prefix"]
            .replace("!{timestamp:yyyy}", "${year}")
            .replace("!{timestamp:MM}", "${month}")
            .replace("!{timestamp:dd}", "${day}")
        )
        assert template == "s3://<bucket>/" + expected
        bucket = table.parameters["storage.location.template"]["Fn::Join"][1][1]
        assert _storage_output(any_stage, bucket) == _storage_output(any_stage, destination["BucketARN"])
        assert table.parameters["projection.enabled"] == "true"


def _template_text(value: Any) -> str:
    """A Fn::Join of literal text and one bucket reference, with the reference spelled <bucket>."""
    parts = value["Fn::Join"][1]
    return "".join(p if isinstance(p, str) else "<bucket>" for p in parts)


def test_the_workgroup_enforces_results_encrypted_with_the_stage_key_in_its_bucket_and_the_scan_limit(
    any_stage: SynthesizedStage,
) -> None:
    config = any_stage.stage.config
    (workgroup,) = _resources(any_stage, "Events", "AWS::Athena::WorkGroup").values()
    settings = workgroup["Properties"]["WorkGroupConfiguration"]
    results = settings["ResultConfiguration"]

    assert workgroup["Properties"]["Name"] == f"MangaAssist-{config.name}-trail"
    assert settings["EnforceWorkGroupConfiguration"] is True
    assert settings["BytesScannedCutoffPerQuery"] == config.trail_query_scan_limit_mb * 1024 * 1024
    assert results["EncryptionConfiguration"]["EncryptionOption"] == "SSE_KMS"
    assert _storage_output(any_stage, results["EncryptionConfiguration"]["KmsKey"]).startswith("DataKey")
    assert _template_text(results["OutputLocation"]) == "s3://<bucket>/trail/"
    bucket = results["OutputLocation"]["Fn::Join"][1][1]
    assert _storage_output(any_stage, bucket).startswith("QueryResultsBucket")
    # A disposable stage deletes the workgroup with its history; a retained one keeps it from deletion
    assert workgroup["Properties"]["RecursiveDeleteOption"] is config.disposable


def test_the_query_results_bucket_is_encrypted_logged_and_expires_results(any_stage: SynthesizedStage) -> None:
    (bucket,) = [
        r for lid, r in _resources(any_stage, "Storage", "AWS::S3::Bucket").items() if lid.startswith("QueryResults")
    ]
    props = bucket["Properties"]
    (rule,) = props["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert rule["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "aws:kms"
    assert "LoggingConfiguration" in props
    (lifecycle,) = props["LifecycleConfiguration"]["Rules"]
    assert lifecycle["ExpirationInDays"] == 30


def test_the_saved_queries_read_only_columns_of_the_trail_tables(any_stage: SynthesizedStage) -> None:
    tables = list(_tables(any_stage).values())
    queries = {
        q["Properties"]["Name"]: q["Properties"]
        for q in _resources(any_stage, "Events", "AWS::Athena::NamedQuery").values()
    }

    assert sorted(queries) == sorted(q.name for q in SAVED_QUERIES)
    for saved in SAVED_QUERIES:
        read, _, placeholders = resolve_query(queries[saved.name]["QueryString"], tables)
        assert read == {f"{tables[0].database}.{saved.table}"}
        assert placeholders >= 1, f"{saved.name} has no parameter: it would scan the whole trail"
    history = queries["session-change-history"]["QueryString"]
    assert "row_number() OVER (PARTITION BY event_id" in history  # Firehose may deliver a line twice
