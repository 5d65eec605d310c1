"""BASELINE for `make bench` only, never deployed: the stream router written the obvious way.

One call per record and per effect: Firehose ``PutRecord`` for every
record, an async ``Invoke`` of the summary function for EVERY turn insert (letting the
summary function decide), one ``PutEvents`` per status change, one SNS ``Publish`` per handoff.
Its record loop reports a failing record alone, but nothing is batched or
retried. It writes no audit trail (it has no audit code), which favours it in the count.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import boto3


@dataclass(frozen=True)
class BaselineTargets:
    summary_function: str
    topic_arn: str
    stream_name: str
    bus_name: str


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """The seed's Lambda entry point: clients and targets from the environment the stage gives the router."""
    clients = {service: boto3.client(service) for service in ("lambda", "events", "sns", "firehose")}
    targets = BaselineTargets(
        summary_function=os.environ["SUMMARY_FUNCTION_NAME"],
        topic_arn=os.environ["HANDOFF_TOPIC_ARN"],
        stream_name=os.environ["ANALYTICS_STREAM_NAME"],
        bus_name=os.environ["EVENT_BUS_NAME"],
    )
    return route(event, clients, targets)


def route(event: dict[str, Any], clients: dict[str, Any], targets: BaselineTargets) -> dict[str, Any]:
    """Process a batch one call per record; returns the partial batch response."""
    failures = []
    for record in event["Records"]:
        try:
            _process(record, clients, targets)
        except Exception:  # report the record, carry on
            failures.append({"itemIdentifier": record["dynamodb"]["SequenceNumber"]})
    return {"batchItemFailures": failures}


def _process(record: dict[str, Any], clients: dict[str, Any], targets: BaselineTargets) -> None:
    event_name = record["eventName"]
    ddb = record["dynamodb"]
    new_image, old_image = ddb.get("NewImage", {}), ddb.get("OldImage", {})
    sk = ddb["Keys"]["SK"]["S"]
    session_id = ddb["Keys"]["PK"]["S"].replace("SESSION#", "")
    if sk.startswith("TURN#") and event_name == "INSERT":
        clients["lambda"].invoke(
            FunctionName=targets.summary_function,
            InvocationType="Event",
            Payload=json.dumps({"session_id": session_id, "trigger": "stream", "turn_sk": sk}),
        )
    elif sk == "META" and event_name == "MODIFY":
        old_status = old_image.get("status", {}).get("S", "unknown")
        new_status = new_image.get("status", {}).get("S", "unknown")
        if old_status != new_status:
            clients["events"].put_events(
                Entries=[
                    {
                        "Source": "mangaassist.sessions",
                        "DetailType": "SessionStatusChanged",
                        "Detail": json.dumps(
                            {"session_id": session_id, "old_status": old_status, "new_status": new_status}
                        ),
                        "EventBusName": targets.bus_name,
                    }
                ]
            )
    elif sk.startswith("HANDOFF#"):
        agent_id = new_image.get("agent_id", {}).get("S", "unassigned")
        clients["sns"].publish(
            TopicArn=targets.topic_arn,
            Subject=f"Chat Handoff: {session_id}",
            Message=json.dumps({"session_id": session_id, "agent_id": agent_id}),
            MessageAttributes={
                "event_type": {"DataType": "String", "StringValue": "handoff"},
                "agent_id": {"DataType": "String", "StringValue": agent_id},
            },
        )
    clients["firehose"].put_record(
        DeliveryStreamName=targets.stream_name,
        Record={
            "Data": json.dumps(
                {
                    "event_name": event_name,
                    "keys": ddb["Keys"],
                    "approximate_timestamp": ddb.get("ApproximateCreationDateTime"),
                    "size_bytes": ddb.get("SizeBytes"),
                }
            )
            + "\n"
        },
    )
