"""The queryable trail on the embedded stage: the Glue tables read what the router and Firehose really write.

A short piece of the story (a session, turns, a summary, a handoff, status changes) runs on the
deployed stage; the test then reads every object the embedded Firehose delivered under the
tables' locations and checks each line against the catalog, each key against the partition
projection, and the saved queries against the tables.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from embedded import EmbeddedStage, embedded_stage
from embedded.services.athena import CatalogTable, locked_for, misfits, partition_date, resolve_query
from embedded.services.firehose import read_lines
from embedded.synth import StageAssembly
from local.story import Story
from local.story.stage import story_config

pytestmark = pytest.mark.slow

#: The piece of the story that writes every kind of line the trail holds.
STEPS = (
    "mint_tokens",
    "create_session",
    "connect",
    "chat",
    "summary",
    "request_handoff",
    "no_agent_free",
    "agent_accepts",
    "agent_replies",
    "agent_closes_handoff",
    "disconnect",
)

#: Values for the saved queries' ``?`` parameters, by query name.
PARAMETERS = {
    "session-change-history": lambda story: [f"'{story.session_id}'"],
    "sessions-per-day-by-status": lambda story: [str(datetime.now(UTC).year), str(datetime.now(UTC).month)],
    "handoffs-per-reason": lambda story: [str(datetime.now(UTC).year), str(datetime.now(UTC).month)],
}


@pytest.fixture(scope="module")
def played(synthesized: StageAssembly) -> Iterator[tuple[EmbeddedStage, Story]]:
    with embedded_stage(synthesized.assembly_dir) as stage:
        story = Story(stage, story_config())
        for name in STEPS:
            getattr(story, name)()
        stage.settle(timeout=30)
        yield stage, story


def _catalog(stage: EmbeddedStage) -> dict[str, CatalogTable]:
    glue = stage.client("glue")
    (database,) = glue.get_databases()["DatabaseList"]
    tables = glue.get_tables(DatabaseName=database["Name"])["TableList"]
    return {t["Name"]: CatalogTable.of(t) for t in tables}


def _delivered(stage: EmbeddedStage, stream_variable: str) -> tuple[str, str, list[tuple[str, dict[str, Any]]]]:
    """The bucket, the static prefix and every line the router's stream named ``stream_variable`` delivered."""
    stream = stage.function("lambdas.events.router.handler").environment[stream_variable]
    destination = stage.client("firehose").describe_delivery_stream(DeliveryStreamName=stream)[
        "DeliveryStreamDescription"
    ]["Destinations"][0]["ExtendedS3DestinationDescription"]
    bucket = destination["BucketARN"].split(":::", 1)[1]
    prefix = destination["Prefix"].split("!{", 1)[0]
    return bucket, prefix, read_lines(stage.client("s3"), bucket, prefix)


@pytest.mark.parametrize(
    ("table_name", "stream_variable"), [("audit", "AUDIT_STREAM_NAME"), ("analytics", "ANALYTICS_STREAM_NAME")]
)
def test_every_delivered_line_is_read_by_the_table_and_every_key_is_a_projected_partition(
    played: tuple[EmbeddedStage, Story], table_name: str, stream_variable: str
) -> None:
    # Given what the story's changes made the router and Firehose write
    stage, story = played
    table = _catalog(stage)[table_name]
    bucket, prefix, lines = _delivered(stage, stream_variable)
    assert table.location_template.startswith(f"s3://{bucket}/{prefix}"), (
        f"{table_name} reads {table.location_template}, the stream writes s3://{bucket}/{prefix}"
    )
    mine = [(key, line) for key, line in lines if story.session_id in str(line.get("pk", line.get("session_id")))]
    kinds = {line["item_type"] for _, line in lines}
    assert mine, f"no line of session {story.session_id} under s3://{bucket}/{prefix}"
    assert {"session", "turn", "summary", "handoff", "agent"} <= kinds, f"the story wrote {sorted(kinds)}"

    # Then every field of every line is a column of the table, of a type that holds its value
    wrong = {problem for _, line in lines for problem in misfits(line, table)}
    assert not wrong, f"{table_name}: {sorted(wrong)}"
    # And every object lies where the projection looks for its partition, and that partition is its day
    for key, line in lines:
        values = table.partition_values(bucket, key)
        refused = [r for name, value in values.items() if (r := table.projection_refuses(name, value))]
        assert not refused, f"{key}: {refused}"
        changed = datetime.fromtimestamp(int(line["approximate_time"]), UTC)
        assert abs(partition_date(values) - changed.replace(hour=0, minute=0, second=0)) <= timedelta(days=1), (
            f"{key} holds a change of {changed:%Y-%m-%d}"
        )


def test_every_audit_object_is_locked_for_the_stages_retention_though_the_bucket_has_no_default(
    played: tuple[EmbeddedStage, Story],
) -> None:
    # Given the audit bucket, which locks nothing by itself (Firehose's uploads need no checksum)
    stage, _ = played
    config = story_config()
    bucket, _, _ = _delivered(stage, "AUDIT_STREAM_NAME")
    s3 = stage.client("s3")
    assert "Rule" not in s3.get_object_lock_configuration(Bucket=bucket)["ObjectLockConfiguration"]

    # Then the audit locker has locked every object version the stream wrote
    versions = s3.list_object_versions(Bucket=bucket).get("Versions", [])
    mode = config.audit_object_lock_mode.upper()
    unlocked = [v["Key"] for v in versions if not locked_for(s3, bucket, v, mode, config.audit_retention_days)]
    assert versions
    assert unlocked == []


def test_the_workgroup_enforces_encrypted_results_in_the_stage_and_the_scan_limit(
    played: tuple[EmbeddedStage, Story],
) -> None:
    stage, _ = played
    (workgroup,) = stage.all("AWS::Athena::WorkGroup")
    configuration = stage.client("athena").get_work_group(WorkGroup=workgroup.ref)["WorkGroup"]["Configuration"]
    results = configuration["ResultConfiguration"]
    buckets = {b.ref for b in stage.all("AWS::S3::Bucket", "Storage")}
    (key,) = stage.all("AWS::KMS::Key", "Storage")

    assert configuration["EnforceWorkGroupConfiguration"] is True
    assert configuration["BytesScannedCutoffPerQuery"] == story_config().trail_query_scan_limit_mb * 1024 * 1024
    assert results["EncryptionConfiguration"] == {"EncryptionOption": "SSE_KMS", "KmsKey": key.attributes["Arn"]}
    assert results["OutputLocation"].split("/")[2] in buckets


def test_the_saved_queries_read_only_columns_the_tables_have_and_run_in_the_workgroup(
    played: tuple[EmbeddedStage, Story],
) -> None:
    # Given the saved queries of the trail's workgroup, as the stage holds them
    stage, story = played
    athena = stage.client("athena")
    (workgroup,) = stage.all("AWS::Athena::WorkGroup")
    ids = athena.list_named_queries(WorkGroup=workgroup.ref)["NamedQueryIds"]
    queries = [athena.get_named_query(NamedQueryId=i)["NamedQuery"] for i in ids]
    catalog = list(_catalog(stage).values())
    assert sorted(q["Name"] for q in queries) == sorted(PARAMETERS)

    for query in queries:
        # Then each parses as Athena SQL and every table and column it names is in the catalog
        read, columns, placeholders = resolve_query(query["QueryString"], catalog)
        assert read, f"{query['Name']} reads no table"
        assert columns, f"{query['Name']} reads no column"
        parameters = PARAMETERS[query["Name"]](story)
        assert placeholders == len(parameters), f"{query['Name']} has {placeholders} parameters"
        # And the workgroup accepts it (moto's Athena answers without running the SQL)
        execution = athena.start_query_execution(
            QueryString=query["QueryString"],
            QueryExecutionContext={"Database": query["Database"]},
            WorkGroup=workgroup.ref,
            ExecutionParameters=parameters,
        )["QueryExecutionId"]
        state = athena.get_query_execution(QueryExecutionId=execution)["QueryExecution"]["Status"]["State"]
        assert state == "SUCCEEDED", f"{query['Name']}: {state}"
