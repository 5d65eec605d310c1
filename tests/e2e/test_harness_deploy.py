"""The harness on small hand-made templates: loaders, pumps, rule and topic delivery, workflows.

The templates carry no policies, so their stages are not strict (``strict=False``): these tests are
about the emulator's mechanics; IAM enforcement has its own tests in ``tests/embedded/iam``.
"""

from __future__ import annotations

import datetime
import gzip
import json
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from embedded import EmbeddedStage, embedded_stage
from embedded.cloudformation.deploy import DeploymentError
from embedded.services.dynamodb_streams import StreamRetriesForever
from tests.e2e import templates as t

HERE = __name__
SEEN: list[dict[str, Any]] = []


def stream_handler(event: dict[str, Any], context: object) -> dict[str, Any]:
    """Records each delivered record; a record with ``poison`` fails (as the env's MODE says)."""
    failures = []
    for record in event["Records"]:
        image = record["dynamodb"].get("NewImage", {})
        SEEN.append({"sk": image.get("SK", {}).get("S"), "seq": record["dynamodb"]["SequenceNumber"]})
        if "poison" in image:
            if os.environ["MODE"] == "raise":
                raise ValueError("poison record")
            failures.append({"itemIdentifier": record["dynamodb"]["SequenceNumber"]})
    return {"batchItemFailures": failures}


def queue_handler(event: dict[str, Any], context: object) -> dict[str, Any]:
    failures = []
    for record in event["Records"]:
        SEEN.append({"body": record["body"], "source": record["eventSourceARN"]})
        if "bad" in record["body"]:
            failures.append({"itemIdentifier": record["messageId"]})
    return {"batchItemFailures": failures}


def failing_handler(event: dict[str, Any], context: object) -> dict[str, Any]:
    SEEN.append({"failing": event})
    raise RuntimeError("always fails")


def event_handler(event: dict[str, Any], context: object) -> dict[str, Any]:
    SEEN.append({"event": event, "env": os.environ.get("QUEUE_ARN")})
    return {"ok": True}


@pytest.fixture(autouse=True)
def _clear_seen() -> Iterator[None]:
    SEEN.clear()
    yield
    SEEN.clear()


def _stream_stack(mode: str, **mapping_settings: Any) -> list[Any]:
    settings = {
        "BatchSize": 4,
        "StartingPosition": "TRIM_HORIZON",
        "MaximumRetryAttempts": 2,
        "FunctionResponseTypes": ["ReportBatchItemFailures"],
        "DestinationConfig": {"OnFailure": {"Destination": {"Fn::GetAtt": ["Dlq", "Arn"]}}},
        **mapping_settings,
    }
    return [
        t.stack(
            "T-Data",
            "Storage",
            {"Key": t.KEY, "Table": t.table()},
            outputs={"TableName": {"Value": {"Ref": "Table"}, "Export": {"Name": "T-Data:TableName"}}},
        ),
        t.stack(
            "T-Events",
            "Events",
            {
                "Role": t.role(),
                "Dlq": t.queue(),
                "Fn": t.function(f"{HERE}.stream_handler", environment={"MODE": mode}),
                "Map": t.mapping(
                    "Fn",
                    {
                        "Fn::Join": [
                            "",
                            [
                                "arn:aws:dynamodb:",
                                {"Ref": "AWS::Region"},
                                ":",
                                {"Ref": "AWS::AccountId"},
                                ":table/",
                                {"Fn::ImportValue": "T-Data:TableName"},
                                "/stream/x",
                            ],
                        ]
                    },
                    **settings,
                ),
            },
        ),
    ]


def _write(stage: EmbeddedStage, count: int, poison_at: int | None) -> None:
    client = stage.client("dynamodb")
    name = stage.only("AWS::DynamoDB::Table").ref
    for i in range(count):
        item: dict[str, Any] = {"PK": {"S": "P"}, "SK": {"S": f"{i:02d}"}, "owner": {"S": "o"}}
        if i == poison_at:
            item["poison"] = {"BOOL": True}
        client.put_item(TableName=name, Item=item)


def _dlq(stage: EmbeddedStage) -> list[dict[str, Any]]:
    return [json.loads(m["Body"]) for m in stage.queue_messages(stage.only("AWS::SQS::Queue", "Events"))]


@pytest.fixture
def stream_stage(request: pytest.FixtureRequest) -> Iterator[EmbeddedStage]:
    mode, settings = request.param
    stacks = _stream_stack(mode, **settings)
    # the mapping's stream ARN is the table's real one (the template above only shows the import)
    stacks[1].template["Resources"]["Map"]["Properties"]["EventSourceArn"] = {"Fn::ImportValue": "T-Data:StreamArn"}
    stacks[0].template["Outputs"]["StreamArn"] = {
        "Value": {"Fn::GetAtt": ["Table", "StreamArn"]},
        "Export": {"Name": "T-Data:StreamArn"},
    }
    with embedded_stage(stacks, strict=False) as stage:
        yield stage


def test_deploys_table_with_stream_indexes_ttl_and_key() -> None:
    with embedded_stage(_stream_stack("report")[:1], strict=False) as stage:
        name = stage.only("AWS::DynamoDB::Table").ref
        table = stage.client("dynamodb").describe_table(TableName=name)["Table"]
        assert table["StreamSpecification"] == {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"}
        assert [i["IndexName"] for i in table["GlobalSecondaryIndexes"]] == ["ByOwner"]
        ttl = stage.client("dynamodb").describe_time_to_live(TableName=name)["TimeToLiveDescription"]
        assert ttl == {"TimeToLiveStatus": "ENABLED", "AttributeName": "ttl"}
        assert table["SSEDescription"]["KMSMasterKeyArn"] == stage.only("AWS::KMS::Key").attributes["Arn"]
        assert name.startswith("T-Data-Table-")


def test_a_key_gets_the_same_id_at_every_deploy_and_each_key_its_own() -> None:
    # Given a stack of two keys, deployed twice (each time on a fresh account)
    def key_ids() -> dict[str, str]:
        with embedded_stage([t.stack("T-Keys", "Storage", {"One": t.KEY, "Two": t.KEY})], strict=False) as stage:
            kms = stage.client("kms")
            ids = {lid: stage.stack("Storage").resources[lid].ref for lid in ("One", "Two")}
            # Then each is the id KMS reports for that key, and a UUID
            for key_id in ids.values():
                assert kms.describe_key(KeyId=key_id)["KeyMetadata"]["KeyId"] == key_id
                assert str(uuid.UUID(key_id)) == key_id
            return ids

    first, second = key_ids(), key_ids()
    # And the same key has the same id both times, while the two keys differ
    assert first == second
    assert first["One"] != first["Two"]


@pytest.mark.parametrize("stream_stage", [("report", {})], indirect=True)
def test_stream_partial_failures_retry_from_the_failed_record_then_dlq(stream_stage: EmbeddedStage) -> None:
    # Given 10 writes, the 6th poisonous, batches of 4, 2 retries
    _write(stream_stage, 10, poison_at=5)
    # When the pump delivers
    stream_stage.streams.pump()
    # Then every good record was delivered, the poison 1 + 2 times, and its batch went to the DLQ
    delivered = {s["sk"] for s in SEEN}
    assert delivered == {f"{i:02d}" for i in range(10)}
    assert [s["sk"] for s in SEEN].count("05") == 3
    batch_sizes = [len(d.item_ids) for d in stream_stage.streams.deliveries]
    assert batch_sizes == [4, 4, 3, 3, 2]  # 00-03, 04-07, retry 05-07 twice, then 08-09
    (failure,) = _dlq(stream_stage)
    info = failure["DDBStreamBatchInfo"]
    poison_seq = next(s["seq"] for s in SEEN if s["sk"] == "05")
    assert info["startSequenceNumber"] == poison_seq
    assert info["batchSize"] == 3
    assert failure["requestContext"]["condition"] == "RetryAttemptsExhausted"
    assert failure["requestContext"]["approximateInvokeCount"] == 3


@pytest.mark.parametrize("stream_stage", [("raise", {"BisectBatchOnFunctionError": True})], indirect=True)
def test_stream_errors_bisect_down_to_the_poison_record(stream_stage: EmbeddedStage) -> None:
    _write(stream_stage, 8, poison_at=2)
    stream_stage.streams.pump()
    (failure,) = _dlq(stream_stage)
    info = failure["DDBStreamBatchInfo"]
    poison_seq = next(s["seq"] for s in SEEN if s["sk"] == "02")
    assert info["startSequenceNumber"] == info["endSequenceNumber"] == poison_seq
    assert {s["sk"] for s in SEEN} == {f"{i:02d}" for i in range(8)}


@pytest.mark.parametrize(
    "stream_stage",
    [("report", {"FilterCriteria": {"Filters": [{"Pattern": json.dumps({"eventName": ["INSERT"]})}]}})],
    indirect=True,
)
def test_stream_filter_criteria_drop_records(stream_stage: EmbeddedStage) -> None:
    _write(stream_stage, 2, poison_at=None)
    _write(stream_stage, 2, poison_at=None)  # MODIFY records: filtered out
    stream_stage.streams.pump()
    assert [s["sk"] for s in SEEN] == ["00", "01"]


@pytest.mark.parametrize("stream_stage", [("raise", {"MaximumRetryAttempts": -1})], indirect=True)
def test_stream_mapping_without_retry_limit_fails_loudly(stream_stage: EmbeddedStage) -> None:
    _write(stream_stage, 1, poison_at=0)
    with pytest.raises(StreamRetriesForever):
        stream_stage.streams.pump()


def _requests(stage: EmbeddedStage, service: str) -> list[str]:
    """The operations the pumps' client of ``service`` sends from now on."""
    sent: list[str] = []
    stage.client(service).meta.events.register("before-call", lambda model, **_: sent.append(model.name))
    return sent


@pytest.mark.parametrize("stream_stage", [("report", {})], indirect=True)
def test_an_idle_stream_pump_sends_no_request_and_then_delivers_what_is_written(stream_stage: EmbeddedStage) -> None:
    sent = _requests(stream_stage, "dynamodbstreams")
    _write(stream_stage, 1, poison_at=None)
    stream_stage.streams.pump()
    sent.clear()

    # When nothing was written since, a pump reads nothing
    assert stream_stage.streams.pump() == 0
    assert sent == []

    # Then what is written next is delivered once
    _write(stream_stage, 2, poison_at=None)
    assert stream_stage.streams.pump() == 1
    assert [s["sk"] for s in SEEN] == ["00", "00", "01"]


def test_sqs_mapping_partial_failures_and_redrive_to_dlq() -> None:
    stacks = [
        t.stack(
            "T-Queues",
            "Events",
            {
                "Role": t.role(),
                "Dlq": t.queue(),
                "Work": t.queue(dlq="Dlq", max_receives=2),
                "Fn": t.function(f"{HERE}.queue_handler"),
                "Map": t.mapping(
                    "Fn",
                    {"Fn::GetAtt": ["Work", "Arn"]},
                    BatchSize=10,
                    FunctionResponseTypes=["ReportBatchItemFailures"],
                ),
            },
        )
    ]
    with embedded_stage(stacks, strict=False) as stage:
        work = stage.stack("Events").resources["Work"]
        sent = _requests(stage, "sqs")
        assert stage.queues.pump() == 0
        assert sent == []  # an empty queue is not asked
        for body in ("good-1", "bad-1", "good-2"):
            stage.client("sqs").send_message(QueueUrl=work.ref, MessageBody=body)
        stage.queues.pump()
        bodies = [s["body"] for s in SEEN]
        assert bodies.count("good-1") == 1
        assert bodies.count("good-2") == 1
        assert bodies.count("bad-1") == 2  # maxReceiveCount
        dlq = stage.stack("Events").resources["Dlq"]
        assert [m["Body"] for m in stage.queue_messages(dlq)] == ["bad-1"]


def _events_stacks() -> list[Any]:
    pattern = {"source": ["app.sessions"], "detail": {"new_status": ["disconnected"]}}
    return [
        t.stack(
            "T-Bus",
            "Events",
            {
                "Bus": {"Type": "AWS::Events::EventBus", "Properties": {"Name": "t-bus"}},
                "Role": t.role(),
                "SfnRole": t.role("states.amazonaws.com"),
                "Sink": t.queue(),
                "Fn": t.function(f"{HERE}.event_handler", environment={"QUEUE_ARN": {"Fn::GetAtt": ["Sink", "Arn"]}}),
                "Machine": t.state_machine(
                    {
                        "StartAt": "Call",
                        "States": {
                            "Call": {
                                "Type": "Task",
                                "Resource": "arn:aws:states:::lambda:invoke",
                                "Parameters": {"FunctionName": "${Fn}", "Payload.$": "$"},
                                "End": True,
                            }
                        },
                    },
                    {"Fn": {"Fn::GetAtt": ["Fn", "Arn"]}},
                ),
                "Rule": {
                    "Type": "AWS::Events::Rule",
                    "Properties": {
                        "EventBusName": {"Ref": "Bus"},
                        "EventPattern": pattern,
                        "State": "ENABLED",
                        "Targets": [
                            {"Id": "Q", "Arn": {"Fn::GetAtt": ["Sink", "Arn"]}},
                            {"Id": "L", "Arn": {"Fn::GetAtt": ["Fn", "Arn"]}, "InputPath": "$.detail"},
                            {
                                "Id": "S",
                                "Arn": {"Ref": "Machine"},
                                "RoleArn": {"Fn::GetAtt": ["SfnRole", "Arn"]},
                                "InputTransformer": {
                                    "InputPathsMap": {"sid": "$.detail.session_id"},
                                    "InputTemplate": '{"session_id": <sid>}',
                                },
                            },
                        ],
                    },
                },
                "Topic": {"Type": "AWS::SNS::Topic", "Properties": {}},
                "AgentQ": t.queue(),
                "CustomerQ": t.queue(),
                "AgentSub": {
                    "Type": "AWS::SNS::Subscription",
                    "Properties": {
                        "Protocol": "sqs",
                        "TopicArn": {"Ref": "Topic"},
                        "Endpoint": {"Fn::GetAtt": ["AgentQ", "Arn"]},
                        "FilterPolicy": {"event_type": ["handoff_requested"]},
                        "RawMessageDelivery": True,
                    },
                },
                "CustomerSub": {
                    "Type": "AWS::SNS::Subscription",
                    "Properties": {
                        "Protocol": "sqs",
                        "TopicArn": {"Ref": "Topic"},
                        "Endpoint": {"Fn::GetAtt": ["CustomerQ", "Arn"]},
                        "FilterPolicy": {"event_type": ["agent_assigned"]},
                    },
                },
            },
        )
    ]


def test_rules_deliver_to_sqs_lambda_and_state_machine_targets() -> None:
    with embedded_stage(_events_stacks(), strict=False) as stage:
        events = stage.client("events")
        for status in ("disconnected", "active"):
            events.put_events(
                Entries=[
                    {
                        "Source": "app.sessions",
                        "DetailType": "SessionStatusChanged",
                        "Detail": json.dumps({"session_id": "s-1", "new_status": status}),
                        "EventBusName": "t-bus",
                    }
                ]
            )
        resources = stage.stack("Events").resources
        (message,) = stage.queue_messages(resources["Sink"])
        assert json.loads(message["Body"])["detail"]["new_status"] == "disconnected"
        direct = [s for s in SEEN if s["event"] == {"session_id": "s-1", "new_status": "disconnected"}]
        assert len(direct) == 1
        assert direct[0]["env"] == resources["Sink"].attributes["Arn"]
        executions = stage.client("stepfunctions").list_executions(stateMachineArn=resources["Machine"].ref)
        (execution,) = executions["executions"]
        done = stage.wait_execution(execution["executionArn"], timeout=10)
        assert done["status"] == "SUCCEEDED"
        assert json.loads(done["input"]) == {"session_id": "s-1"}
        assert {"event": {"session_id": "s-1"}, "env": resources["Sink"].attributes["Arn"]} in SEEN


def test_topic_filter_policies_select_the_queues() -> None:
    with embedded_stage(_events_stacks(), strict=False) as stage:
        resources = stage.stack("Events").resources
        stage.client("sns").publish(
            TopicArn=resources["Topic"].ref,
            Message=json.dumps({"session_id": "s-1"}),
            MessageAttributes={"event_type": {"DataType": "String", "StringValue": "handoff_requested"}},
        )
        (raw,) = stage.queue_messages(resources["AgentQ"])
        assert json.loads(raw["Body"]) == {"session_id": "s-1"}  # raw delivery
        assert stage.queue_messages(resources["CustomerQ"]) == []


def test_fails_naming_a_resource_type_without_loader() -> None:
    stacks = [t.stack("T-X", "Events", {"Pipe": {"Type": "AWS::Pipes::Pipe", "Properties": {}}})]
    with (
        pytest.raises(DeploymentError, match=r"T-X/Pipe \(AWS::Pipes::Pipe\): no loader"),
        embedded_stage(stacks, strict=False),
    ):
        pass


def test_failed_async_invocations_retry_then_reach_the_on_failure_destination() -> None:
    stacks = [
        t.stack(
            "T-Async",
            "Events",
            {
                "Role": t.role(),
                "Dlq": t.queue(),
                "Fn": t.function(f"{HERE}.failing_handler"),
                "Config": {
                    "Type": "AWS::Lambda::EventInvokeConfig",
                    "Properties": {
                        "FunctionName": {"Ref": "Fn"},
                        "Qualifier": "$LATEST",
                        "MaximumRetryAttempts": 1,
                        "DestinationConfig": {"OnFailure": {"Destination": {"Fn::GetAtt": ["Dlq", "Arn"]}}},
                    },
                },
            },
        )
    ]
    with embedded_stage(stacks, strict=False) as stage:
        resources = stage.stack("Events").resources
        response = stage.client("lambda").invoke(
            FunctionName=resources["Fn"].ref, InvocationType="Event", Payload=b'{"n": 1}'
        )
        assert response["StatusCode"] == 202
        assert SEEN == [{"failing": {"n": 1}}, {"failing": {"n": 1}}]  # 1 + MaximumRetryAttempts
        (record,) = [json.loads(m["Body"]) for m in stage.queue_messages(resources["Dlq"])]
        assert record["requestPayload"] == {"n": 1}
        assert record["requestContext"]["condition"] == "RetriesExhausted"
        assert record["responsePayload"]["errorType"] == "RuntimeError"


def test_catalog_tables_workgroups_and_saved_queries_deploy_as_declared() -> None:
    # Given a Glue database and table, a workgroup and a saved query referring to them (as CDK writes them)
    table_input = {
        "Name": "events",
        "TableType": "EXTERNAL_TABLE",
        "Parameters": {"projection.enabled": "true", "projection.day.type": "integer", "projection.day.range": "1,31"},
        "PartitionKeys": [{"Name": "day", "Type": "int"}],
        "StorageDescriptor": {
            "Columns": [{"Name": "event_id", "Type": "string"}],
            "Location": "s3://bucket/events/",
            "SerdeInfo": {"SerializationLibrary": "org.openx.data.jsonserde.JsonSerDe"},
        },
    }
    resources = {
        "Db": {
            "Type": "AWS::Glue::Database",
            "Properties": {"CatalogId": {"Ref": "AWS::AccountId"}, "DatabaseInput": {"Name": "trail"}},
        },
        "Events": {
            "Type": "AWS::Glue::Table",
            "Properties": {"DatabaseName": {"Ref": "Db"}, "TableInput": table_input},
        },
        "Wg": {
            "Type": "AWS::Athena::WorkGroup",
            "Properties": {
                "Name": "trail-wg",
                "WorkGroupConfiguration": {
                    "EnforceWorkGroupConfiguration": True,
                    "BytesScannedCutoffPerQuery": 10_485_760,
                },
            },
        },
        "Daily": {
            "Type": "AWS::Athena::NamedQuery",
            "Properties": {
                "Name": "daily",
                "Database": {"Ref": "Db"},
                "WorkGroup": {"Ref": "Wg"},
                "QueryString": "SELECT 1",
            },
        },
    }

    with embedded_stage([t.stack("T-Trail", "Events", resources)], strict=False) as stage:
        # Then the catalog, the workgroup and the saved query hold what the template says
        stored = stage.client("glue").get_table(DatabaseName="trail", Name="events")["Table"]
        assert stored["Parameters"]["projection.enabled"] == "true"
        assert stored["PartitionKeys"] == [{"Name": "day", "Type": "int"}]
        athena = stage.client("athena")
        workgroup = athena.get_work_group(WorkGroup="trail-wg")["WorkGroup"]["Configuration"]
        assert workgroup["BytesScannedCutoffPerQuery"] == 10_485_760
        (query_id,) = athena.list_named_queries(WorkGroup="trail-wg")["NamedQueryIds"]
        assert stage.only("AWS::Athena::NamedQuery").ref == query_id
        assert athena.get_named_query(NamedQueryId=query_id)["NamedQuery"]["Database"] == "trail"


def test_firehose_evaluates_the_prefix_and_writes_gzip_objects_as_firehose_does() -> None:
    # Given a direct-put stream whose prefix holds Hive-style date partitions, GZIP objects
    destination = {
        "BucketARN": {"Fn::GetAtt": ["Bucket", "Arn"]},
        "RoleARN": {"Fn::GetAtt": ["Role", "Arn"]},
        "Prefix": "audit/year=!{timestamp:yyyy}/month=!{timestamp:MM}/day=!{timestamp:dd}/",
        "ErrorOutputPrefix": "errors/!{firehose:error-output-type}/",
        "CompressionFormat": "GZIP",
    }
    resources = {
        "Role": t.role("firehose.amazonaws.com"),
        "Bucket": {"Type": "AWS::S3::Bucket", "Properties": {}},
        "Stream": {
            "Type": "AWS::KinesisFirehose::DeliveryStream",
            "Properties": {"DeliveryStreamType": "DirectPut", "ExtendedS3DestinationConfiguration": destination},
        },
    }
    with embedded_stage([t.stack("T-Hose", "Events", resources)], strict=False) as stage:
        # When a batch is put
        stream = stage.only("AWS::KinesisFirehose::DeliveryStream").ref
        stage.client("firehose").put_record_batch(
            DeliveryStreamName=stream, Records=[{"Data": b'{"a":1}\n'}, {"Data": b'{"a":2}\n'}]
        )

        # Then one .gz object lands under the evaluated prefix, today's date in UTC
        s3 = stage.client("s3")
        bucket = stage.only("AWS::S3::Bucket").ref
        (obj,) = s3.list_objects_v2(Bucket=bucket)["Contents"]
        today = datetime.datetime.fromtimestamp(stage.clock(), datetime.UTC)
        assert obj["Key"].startswith(f"audit/year={today:%Y}/month={today:%m}/day={today:%d}/{stream}-")
        assert obj["Key"].endswith(".gz")
        body = gzip.decompress(s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read())
        assert body == b'{"a":1}\n{"a":2}\n'
