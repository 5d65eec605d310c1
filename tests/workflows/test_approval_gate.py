"""HumanApprovalGate executed on moto's state machine executor, links clicked like a reviewer would.

The definitions are the synthesized ones of a small test stack (Prepare -> gate -> Continue, the
rejection path NotifyRequester -> Fail); the gate's request and decision functions run in-process
through ``embedded.runtime``, from the gate's own code.
"""

from __future__ import annotations

import functools
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from unittest import mock

import boto3
import pytest
from aws_cdk import App, Duration, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk.assertions import Template
from moto import mock_aws

from constructs_lib.approval_gate import HumanApprovalGate
from constructs_lib.approval_gate.gate_runtime import signing
from embedded.runtime import in_process
from tests.workflows.gate_harness import (
    LINK_BASE_URL,
    REGION,
    GateMachine,
    deploy_gate_machine,
    links_of,
    logical_id_of,
    review_id_of,
    task_failure_cause,
)

SLOW_TIMEOUT = 120
QUICK_TIMEOUT = 3


def _machine(stack: Stack, name: str, table: dynamodb.ITable, timeout: int) -> None:
    gate = HumanApprovalGate(
        stack,
        name,
        existing_table=table,
        link_base_url=LINK_BASE_URL,
        reviewer_email="reviewer@example.com",
        timeout=Duration.seconds(timeout),
        requested_by=sfn.JsonPath.string_at("$.requested_by"),
        details=sfn.JsonPath.object_at("$.request"),
        subject="Export of customer data",
    )
    gate.on_rejected(
        sfn.Pass(stack, f"{name}NotifyRequester", result_path=sfn.JsonPath.DISCARD).next(
            sfn.Fail(stack, f"{name}Fail", error="ExportRejected")
        )
    )
    prepare = sfn.Pass(stack, f"{name}Prepare", result=sfn.Result.from_boolean(True), result_path="$.prepared")
    proceed = sfn.Pass(stack, f"{name}Continue", result=sfn.Result.from_boolean(True), result_path="$.continued")
    sfn.StateMachine(
        stack, f"{name}Machine", definition_body=sfn.DefinitionBody.from_chainable(prepare.next(gate).next(proceed))
    )


@functools.cache
def gate_template() -> dict[str, Any]:
    app = App(context={"aws:cdk:enable-path-metadata": True})
    stack = Stack(app, "GateTest")
    table = dynamodb.Table(
        stack,
        "Table",
        partition_key=dynamodb.Attribute(name="PK", type=dynamodb.AttributeType.STRING),
        sort_key=dynamodb.Attribute(name="SK", type=dynamodb.AttributeType.STRING),
    )
    _machine(stack, "Slow", table, SLOW_TIMEOUT)
    _machine(stack, "Quick", table, QUICK_TIMEOUT)
    return dict(Template.from_stack(stack).to_json())


@pytest.fixture
def cloud() -> Iterator[None]:
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}), in_process(), task_failure_cause():
        yield


@pytest.fixture
def slow(cloud: None) -> GateMachine:
    return deploy_gate_machine(
        gate_template(), gate_path="GateTest/Slow/", machine_path="GateTest/SlowMachine/", table_path="GateTest/Table/"
    )


@pytest.fixture
def quick(cloud: None) -> GateMachine:
    return deploy_gate_machine(
        gate_template(),
        gate_path="GateTest/Quick/",
        machine_path="GateTest/QuickMachine/",
        table_path="GateTest/Table/",
    )


STATE = {"requested_by": "admin-7", "request": {"what": "export", "table": "sessions"}, "n": 1}


def paused(gate: GateMachine) -> tuple[str, dict[str, str], str]:
    """Start an execution and wait for its reviewer e-mail: (execution arn, links, e-mail)."""
    execution = gate.start(STATE)
    email = gate.next_email()
    return execution, links_of(email), email


def test_approve_resumes_with_the_checkpointed_state(slow: GateMachine) -> None:
    # Given a paused execution and the e-mail its reviewer received
    execution, links, email = paused(slow)
    review_id = review_id_of(links["approve"])
    record = slow.review(review_id)
    assert record is not None
    assert record["status"] == "pending_review"
    assert "Export of customer data" in email
    assert "admin-7" in email
    assert '"what": "export"' in email
    assert record["review"].task_token
    assert record["review"].task_token not in email
    assert slow.describe(execution)["status"] == "RUNNING"

    # When the reviewer clicks approve
    status, body = slow.click(links["approve"])

    # Then the page says so and the chain continues with exactly the state the gate was given
    assert status == 200
    assert "Approved" in body
    assert body.lstrip().startswith("<!doctype html>")
    done = slow.wait_done(execution)
    assert done["status"] == "SUCCEEDED"
    assert json.loads(done["output"]) == {**STATE, "prepared": True, "continued": True}
    decided = slow.review(review_id)
    assert decided is not None
    assert decided["status"] == "approved"
    assert decided["review"].decided_by == "review-link from 203.0.113.9"
    assert slow.entered(execution, "SlowContinue") == 1


def test_reject_takes_the_rejection_path_and_never_continues(slow: GateMachine) -> None:
    execution, links, _ = paused(slow)

    status, body = slow.click(links["reject"])

    assert status == 200
    assert "Rejected" in body
    done = slow.wait_done(execution)
    assert done["status"] == "FAILED"
    assert done.get("error") == "ExportRejected"
    assert slow.entered(execution, "SlowNotifyRequester") == 1
    assert slow.entered(execution, "SlowContinue") == 0
    rejected = [
        e for e in slow.history(execution) if e.get("stateExitedEventDetails", {}).get("name") == "SlowRejected"
    ]
    outcome = json.loads(rejected[0]["stateExitedEventDetails"]["output"])["approval"]
    assert outcome == {"outcome": "rejected", "reason": "rejected", "review_id": review_id_of(links["reject"])}
    record = slow.review(review_id_of(links["reject"]))
    assert record is not None
    assert record["status"] == "rejected"


def test_a_review_that_cannot_be_requested_is_not_an_approval(slow: GateMachine) -> None:
    # Given a request step that fails with an error no retry covers
    def broken(event: dict[str, Any], context: object) -> dict[str, Any]:
        raise ValueError("reviewer topic unreachable")

    with mock.patch("constructs_lib.approval_gate.gate_runtime.request.handler", broken):
        # When an execution reaches the gate
        execution = slow.start(STATE)
        done = slow.wait_done(execution)
    # Then it takes the rejection path, says why, and never continues
    assert done["status"] == "FAILED"
    assert done.get("error") == "ExportRejected"
    assert slow.entered(execution, "SlowContinue") == 0
    failed = [e for e in slow.history(execution) if e.get("stateExitedEventDetails", {}).get("name") == "SlowFailed"]
    outcome = json.loads(failed[0]["stateExitedEventDetails"]["output"])["approval"]
    assert outcome == {"outcome": "rejected", "reason": "failed", "error": "ValueError"}


def test_no_decision_expires_like_a_rejection_and_the_link_stops_working(quick: GateMachine) -> None:
    # Given a gate with a 3 s timeout and nobody clicking
    execution, links, _ = paused(quick)

    # When the timeout passes
    done = quick.wait_done(execution, timeout=QUICK_TIMEOUT + 10)

    # Then the execution took the rejection path with reason expired
    assert done["status"] == "FAILED"
    assert done.get("error") == "ExportRejected"
    expired = [
        e for e in quick.history(execution) if e.get("stateExitedEventDetails", {}).get("name") == "QuickExpired"
    ]
    assert json.loads(expired[0]["stateExitedEventDetails"]["output"])["approval"] == {
        "outcome": "rejected",
        "reason": "expired",
    }
    assert quick.entered(execution, "QuickContinue") == 0
    # and the e-mailed link answers "expired", changing nothing
    status, body = quick.click(links["approve"])
    assert status == 410
    assert "expired" in body
    record = quick.review(review_id_of(links["approve"]))
    assert record is not None
    assert record["status"] == "pending_review"


def test_an_expired_review_is_refused_by_the_store_even_with_a_fresh_link_expiry(quick: GateMachine) -> None:
    # Given a review whose expires_at has passed (TTL has not removed it: deletion lags)
    execution, links, _ = paused(quick)
    review_id = review_id_of(links["approve"])
    quick.wait_done(execution, timeout=QUICK_TIMEOUT + 10)
    record = quick.review(review_id)
    assert record is not None
    expires_at = record["review"].expires_at

    # When the clock is still before the link's exp but the record says expired
    # (the link check passes; only the store's conditional write can refuse)
    with mock.patch("constructs_lib.approval_gate.gate_runtime.decide.time.time", return_value=expires_at - 1):
        status, body = quick.click(links["approve"])

    # Then the store refuses (410) and marks the review expired
    assert status == 410
    assert "expired" in body
    after = quick.review(review_id)
    assert after is not None
    assert after["status"] == "expired"


def test_double_click_is_409_and_the_workflow_resumes_once(slow: GateMachine) -> None:
    execution, links, _ = paused(slow)

    first = slow.click(links["approve"])
    second = slow.click(links["approve"])
    other = slow.click(links["reject"])

    assert first[0] == 200
    assert second[0] == 409
    assert "already approved" in second[1]
    assert other[0] == 409
    assert "already approved" in other[1]
    done = slow.wait_done(execution)
    assert done["status"] == "SUCCEEDED"
    assert slow.entered(execution, "SlowContinue") == 1
    record = slow.review(review_id_of(links["approve"]))
    assert record is not None
    assert record["status"] == "approved"


def test_a_recorded_decision_whose_delivery_failed_is_delivered_by_the_next_click(slow: GateMachine) -> None:
    # Given a first click whose SendTaskSuccess failed after the decision was recorded
    execution, links, _ = paused(slow)
    with mock.patch("constructs_lib.approval_gate.gate_runtime.decide.complete", side_effect=RuntimeError("throttled")):
        status, _ = slow.click(links["approve"])
    assert status == 500
    record = slow.review(review_id_of(links["approve"]))
    assert record is not None
    assert record["status"] == "approved"
    time.sleep(0.5)
    assert slow.describe(execution)["status"] == "RUNNING"

    # When the reviewer clicks again
    status, body = slow.click(links["approve"])

    # Then the page says "already approved" and the workflow continues, once
    assert status == 409
    assert "already approved" in body
    assert slow.wait_done(execution)["status"] == "SUCCEEDED"
    assert slow.entered(execution, "SlowContinue") == 1


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(lambda url: url.replace("sig=", "sig=A"), id="forged-signature"),
        pytest.param(lambda url: url[: url.index("sig=") + 4] + "x" * 43, id="made-up-signature"),
        pytest.param(lambda url: url[: url.index("&sig=")], id="no-signature"),
        pytest.param(lambda url: url.replace("exp=", "exp=9"), id="extended-expiry"),
        pytest.param(lambda url: url.replace("/reject?", "/approve?"), id="altered-decision"),
    ],
)
def test_tampered_links_are_refused_and_change_nothing(slow: GateMachine, tamper: Any) -> None:
    execution, links, _ = paused(slow)

    status, body = slow.click(tamper(links["reject"]))

    assert status == 403
    assert "Invalid link" in body
    record = slow.review(review_id_of(links["reject"]))
    assert record is not None
    assert record["status"] == "pending_review"
    assert slow.describe(execution)["status"] == "RUNNING"
    # the genuine link still works afterwards
    assert slow.click(links["approve"])[0] == 200
    assert slow.wait_done(execution)["status"] == "SUCCEEDED"


def test_a_link_for_another_review_is_refused(slow: GateMachine) -> None:
    _first, links_a, _ = paused(slow)
    second, links_b, _ = paused(slow)
    query = links_a["approve"].split("?", 1)[1]
    other_id = review_id_of(links_b["approve"])

    status, _ = slow.click(f"{LINK_BASE_URL}/reviews/{other_id}/approve?{query}")

    assert status == 403
    assert slow.describe(second)["status"] == "RUNNING"
    record = slow.review(other_id)
    assert record is not None
    assert record["status"] == "pending_review"


def test_an_expired_link_is_410_without_touching_the_review(slow: GateMachine) -> None:
    # Given a correctly signed link whose expiry has passed
    execution, links, _ = paused(slow)
    review_id = review_id_of(links["approve"])
    past = int(time.time()) - 1
    url = signing.review_link(LINK_BASE_URL, review_id, "approve", past, slow.key)

    status, body = slow.click(url)

    assert status == 410
    assert "Link expired" in body
    record = slow.review(review_id)
    assert record is not None
    assert record["status"] == "pending_review"
    assert slow.describe(execution)["status"] == "RUNNING"


def test_an_unknown_review_is_404(slow: GateMachine) -> None:
    url = signing.review_link(LINK_BASE_URL, "no-such-review", "approve", int(time.time()) + 600, slow.key)

    status, body = slow.click(url)

    assert status == 404
    assert "Unknown review" in body


def test_unknown_paths_answer_html_not_json(slow: GateMachine) -> None:
    status, body = slow.click(f"{LINK_BASE_URL}/reviews/x/maybe?exp=1&sig=x")

    assert status == 404
    assert body.lstrip().startswith("<!doctype html>")


# ---------------------------------------------------------------------------- the export workflow


@functools.cache
def export_template() -> dict[str, Any]:
    """ExportWorkflow with the gate as its approval, as OrchestrationStack wires it."""
    from aws_cdk import aws_kms as kms
    from aws_cdk import aws_s3 as s3

    from constructs_lib.workflow_defaults import WorkflowOptions
    from stacks.workflows.export import ExportWorkflow

    app = App(context={"aws:cdk:enable-path-metadata": True})
    stack = Stack(app, "ExportTest")
    table = dynamodb.Table(
        stack,
        "Table",
        partition_key=dynamodb.Attribute(name="PK", type=dynamodb.AttributeType.STRING),
        sort_key=dynamodb.Attribute(name="SK", type=dynamodb.AttributeType.STRING),
        point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
            point_in_time_recovery_enabled=True
        ),
    )
    key = kms.Key(stack, "Key")
    bucket = s3.Bucket(stack, "Archive", encryption_key=key)
    gate = HumanApprovalGate(
        stack,
        "ExportApproval",
        existing_table=table,
        link_base_url=LINK_BASE_URL,
        encryption_key=key,
        timeout=Duration.seconds(SLOW_TIMEOUT),
        requested_by=sfn.JsonPath.string_at("$.requested_by"),
        details="$.reason",
    )
    ExportWorkflow(
        stack,
        "Export",
        table=table,
        bucket=bucket,
        options=WorkflowOptions(encryption_key=key),
        approval=gate,
        poll_interval=Duration.seconds(1),
        max_polls=10,
    )
    return dict(Template.from_stack(stack).to_json())


@dataclass
class ExportCloud:
    gate: GateMachine
    bucket: str
    notifications: str


@pytest.fixture
def export_manifest() -> Iterator[None]:
    """Give a COMPLETED moto export the ``ExportManifest`` AWS reports (moto 5.2.5 omits it).

    DynamoDB's DescribeExport names the manifest of a completed export
    (``<prefix>/AWSDynamoDB/<export id>/manifest-summary.json``); the workflow's requester
    notification quotes it. moto writes the data files but reports no manifest.
    """
    from moto.dynamodb.models.table_export import TableExport

    original = TableExport.response

    def response(self: TableExport) -> dict[str, Any]:
        described = original(self)
        if described["ExportStatus"] == "COMPLETED":
            export_id = self.arn.rsplit("/", 1)[1]
            described["ExportManifest"] = f"{self.s3_prefix}/AWSDynamoDB/{export_id}/manifest-summary.json"
        return described

    with mock.patch.object(TableExport, "response", response):
        yield


@pytest.fixture
def export(cloud: None, export_manifest: None) -> ExportCloud:
    s3 = boto3.client("s3", region_name=REGION)
    sns = boto3.client("sns", region_name=REGION)
    sqs = boto3.client("sqs", region_name=REGION)
    bucket = f"archive-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    topic = sns.create_topic(Name=f"export-notifications-{uuid.uuid4().hex[:8]}")["TopicArn"]
    queue = sqs.create_queue(QueueName=f"requester-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn, Attributes={"RawMessageDelivery": "true"})
    template = export_template()

    def more_refs(refs: dict[str, str]) -> None:
        table_id = logical_id_of(template, "AWS::DynamoDB::Table", "ExportTest/Table/")
        refs[f"{table_id}.Arn"] = f"arn:aws:dynamodb:{REGION}:123456789012:table/{refs[table_id]}"
        refs[logical_id_of(template, "AWS::S3::Bucket", "ExportTest/Archive/")] = bucket
        key_id = logical_id_of(template, "AWS::KMS::Key", "ExportTest/Key/")
        refs[f"{key_id}.Arn"] = f"arn:aws:kms:{REGION}:123456789012:key/{uuid.uuid4()}"
        refs[logical_id_of(template, "AWS::SNS::Topic", "ExportTest/Export/")] = topic

    gate = deploy_gate_machine(
        template,
        gate_path="ExportTest/ExportApproval/",
        machine_path="ExportTest/Export/",
        table_path="ExportTest/Table/",
        extra_refs=more_refs,
        topic_path="ExportTest/ExportApproval/",
    )
    boto3.client("dynamodb", region_name=REGION).update_continuous_backups(
        TableName=gate.table_name,
        PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True},
    )
    return ExportCloud(gate=gate, bucket=bucket, notifications=queue)


def _exported_objects(bucket: str) -> list[str]:
    listing = boto3.client("s3", region_name=REGION).list_objects_v2(Bucket=bucket, Prefix="exports/")
    return [obj["Key"] for obj in listing.get("Contents", [])]


def _requester_messages(queue: str) -> list[dict[str, Any]]:
    sqs = boto3.client("sqs", region_name=REGION)
    messages = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10).get("Messages", [])
    return [json.loads(m["Body"]) for m in messages]


EXPORT_REQUEST = {"requested_by": "admin-7", "reason": "customer asked for their data (ticket 42)"}


def test_an_approved_export_runs(export: ExportCloud) -> None:
    # Given an export waiting for approval, with nothing exported yet
    gate = export.gate
    execution = gate.start(EXPORT_REQUEST)
    email = gate.next_email()
    assert "customer asked for their data (ticket 42)" in email
    assert _exported_objects(export.bucket) == []

    # When the reviewer approves
    status, _ = gate.click(links_of(email)["approve"])

    # Then the table is exported under exports/<execution name>/ and the requester is told where
    assert status == 200
    done = gate.wait_done(execution, timeout=30)
    assert done["status"] == "SUCCEEDED", done
    name = execution.rsplit(":", 1)[1]
    objects = _exported_objects(export.bucket)
    assert objects
    assert all(key.startswith(f"exports/{name}/") for key in objects)
    notes = _requester_messages(export.notifications)
    assert [n["event_type"] for n in notes] == ["export_completed"]
    assert notes[0]["requested_by"] == "admin-7"


def test_a_rejected_export_ends_without_exporting(export: ExportCloud) -> None:
    gate = export.gate
    execution = gate.start(EXPORT_REQUEST)
    email = gate.next_email()

    status, _ = gate.click(links_of(email)["reject"])

    assert status == 200
    done = gate.wait_done(execution, timeout=30)
    assert done["status"] == "FAILED"
    assert done.get("error") == "ExportRejected"
    assert gate.entered(execution, "StartExport") == 0
    assert _exported_objects(export.bucket) == []
    notes = _requester_messages(export.notifications)
    assert [n["event_type"] for n in notes] == ["export_rejected"]
