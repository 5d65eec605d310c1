"""The export state machine, as synthesized (with the HumanApprovalGate in front), executed on moto.

The reviewer's e-mail is read from an SQS queue subscribed to the gate's topic and its links are
clicked through the gate's decision function (from the template), as a person would; the
requester's notification is read from a queue subscribed to the export topic.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import boto3
import pytest
from moto import mock_aws

from embedded.runtime import in_process
from embedded.services.dynamodb import atomic_requests
from embedded.synth import stage_config
from lambdas.orchestration import export_notifier
from lambdas.shared import env as lambda_env
from stacks.config import with_overrides
from tests.workflows.gate_harness import api_gateway_event, confirmation_form, links_of
from tests.workflows.orchestration_harness import (
    LINK_BASE_URL,
    REGION,
    Deployed,
    deploy,
    synthesize_orchestration,
)

CONFIG = with_overrides(
    stage_config("dev"),
    name="test",
    export_poll_seconds=1,
    export_max_polls=3,
    workflow_timeout_minutes=2,
    review_ttl_days=1,
)


@pytest.fixture(scope="module")
def templates() -> dict[str, Any]:
    return synthesize_orchestration(CONFIG)


class World:
    def __init__(self, deployed: Deployed) -> None:
        self.d = deployed
        self.machine = deployed.state_machine("Export")
        sqs = boto3.client("sqs", region_name=REGION)
        sns = boto3.client("sns", region_name=REGION)
        self.inboxes: dict[str, str] = {}
        for name, topic in (
            ("reviewer", deployed.topic("Orchestration", "ExportApprovalTopic")),
            ("requester", deployed.topic("Orchestration", "ExportNotificationTopic")),
        ):
            url = sqs.create_queue(QueueName=f"{name}-inbox")["QueueUrl"]
            arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
            sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn, Attributes={"RawMessageDelivery": "true"})
            self.inboxes[name] = url
        # The gate's own decision function, deployed from the template like every other function.
        self.review_function = deployed.function("ExportApprovalDecisionFunction")

    def next_message(self, inbox: str, timeout: float = 15.0) -> str:
        sqs = boto3.client("sqs", region_name=REGION)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            messages = sqs.receive_message(QueueUrl=self.inboxes[inbox], MaxNumberOfMessages=1).get("Messages", [])
            if messages:
                sqs.delete_message(QueueUrl=self.inboxes[inbox], ReceiptHandle=messages[0]["ReceiptHandle"])
                return str(messages[0]["Body"])
            time.sleep(0.1)
        raise AssertionError(f"nothing in the {inbox} inbox within {timeout} s")

    def click(self, url: str) -> int:
        """Open the link, then press the confirmation page's button; the final status."""
        parts = urlsplit(url)
        base_path = urlsplit(LINK_BASE_URL).path
        path = parts.path[len(base_path) :] if parts.path.startswith(base_path) else parts.path
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        status, body = self._invoke(api_gateway_event(path, query))
        form = confirmation_form(body) if status == 200 else None
        if form is None:
            return status
        return self._invoke(api_gateway_event(path, query, form=form))[0]

    def _invoke(self, event: dict[str, Any]) -> tuple[int, str]:
        response = boto3.client("lambda", region_name=REGION).invoke(
            FunctionName=self.review_function, Payload=json.dumps(event).encode()
        )
        payload = json.loads(response["Payload"].read())
        assert "FunctionError" not in response, payload
        return int(payload["statusCode"]), str(payload["body"])


def _exports(world: World) -> list[dict[str, Any]]:
    table_arn = f"arn:aws:dynamodb:{REGION}:123456789012:table/{world.d.table_name}"
    client = boto3.client("dynamodb", region_name=REGION)
    return list(client.list_exports(TableArn=table_arn)["ExportSummaries"])


@pytest.fixture
def world(templates: dict[str, Any]) -> Iterator[World]:
    with (
        mock_aws(config={"stepfunctions": {"execute_state_machine": True}}),
        atomic_requests(),
        in_process(),
    ):
        yield World(deploy(templates))
        lambda_env.reset()


def test_approved_export_runs_the_native_export_and_notifies_the_requester(world: World) -> None:
    # Given an export request waiting for approval
    request = {"requested_by": "admin-1", "reason": "quarterly audit", "requested_by_email": "a1@example.com"}
    execution = world.d.start(world.machine, request, name="exp-1")
    links = links_of(world.next_message("reviewer"))
    assert "StartExport" not in world.d.states_entered(execution)

    # When the reviewer approves
    assert world.click(links["approve"]) == 200
    done = world.d.wait_done(execution)

    # Then the table was exported under exports/<execution name>/ and the requester told where
    assert done["status"] == "SUCCEEDED", done
    states = world.d.states_entered(execution)
    assert states.index("StartExport") < states.index("DescribeExport") < states.index("NotifyRequester")
    notice = json.loads(world.next_message("requester"))
    bucket = world.d.ref("Storage", "AWS::S3::Bucket", "ArchiveBucket")
    assert notice["event_type"] == "export_completed"
    assert notice["requested_by"] == "admin-1"
    assert notice["s3_location"] == f"s3://{bucket}/exports/exp-1/"
    # what the export notifier needs to mail the requester: the execution and its input
    parsed = export_notifier.parse(json.dumps(notice))
    assert (parsed.execution, parsed.email) == (execution, "a1@example.com")
    assert len(_exports(world)) == 1


def test_rejected_export_never_starts_and_tells_the_requester(world: World) -> None:
    execution = world.d.start(world.machine, {"requested_by": "admin-2", "reason": "curiosity"}, name="exp-2")
    links = links_of(world.next_message("reviewer"))

    assert world.click(links["reject"]) == 200
    done = world.d.wait_done(execution)

    assert done["status"] == "FAILED"
    assert done["error"] == "ExportRejected"
    assert "StartExport" not in world.d.states_entered(execution)
    notice = json.loads(world.next_message("requester"))
    assert notice["event_type"] == "export_rejected"
    assert notice["requested_by"] == "admin-2"
    parsed = export_notifier.parse(json.dumps(notice))
    assert (parsed.execution, parsed.email) == (execution, None)  # started without an address
    assert _exports(world) == []


def test_a_failed_export_ends_in_export_failed_with_the_reason(world: World) -> None:
    # Given an approved export whose destination bucket is gone (DynamoDB then fails the export)
    execution = world.d.start(world.machine, {"requested_by": "admin-3", "reason": "audit"}, name="exp-3")
    links = links_of(world.next_message("reviewer"))
    boto3.client("s3", region_name=REGION).delete_bucket(
        Bucket=world.d.ref("Storage", "AWS::S3::Bucket", "ArchiveBucket")
    )

    assert world.click(links["approve"]) == 200
    done = world.d.wait_done(execution)

    # Then the workflow polled, saw FAILED and failed with the export's own reason; nobody was told "ready"
    assert done["status"] == "FAILED"
    assert done["error"] == "ExportFailed"
    assert "S3NoSuchBucket" in done["cause"]
    assert "NotifyRequester" not in world.d.states_entered(execution)


def test_a_low_risk_export_is_approved_automatically_with_its_reason_recorded(world: World) -> None:
    # Given a table without customer records, and an admin with a verified e-mail asking
    request = {"requested_by": "admin-4", "reason": "catalogue", "role": "admin", "requested_by_email": "a@example.com"}
    # When the export runs
    execution = world.d.start(world.machine, request, name="exp-4")
    done = world.d.wait_done(execution)
    # Then it completed without the gate, and the decision is in the table with its reason
    assert done["status"] == "SUCCEEDED", done
    states = world.d.states_entered(execution)
    assert states.index("NeedsReview") < states.index("RecordAutomaticApproval") < states.index("StartExport")
    assert "ExportApprovalRequestReview" not in states
    item = boto3.client("dynamodb", region_name=REGION).get_item(
        TableName=world.d.table_name, Key={"PK": {"S": "REVIEW#export-exp-4"}, "SK": {"S": "META"}}
    )["Item"]
    assert (item["status"]["S"], item["decided_by"]["S"], item["risk_score"]["N"]) == ("approved", "automatic", "0")
    assert item["decision_reason"]["S"].startswith("risk score 0: scope 0 (no customer records)")
    assert item["review_threshold"]["N"] == str(CONFIG.export_review_min_score)
    assert int(item["ttl"]["N"]) - int(item["decided_at"]["N"]) == CONFIG.review_ttl_days * 86400
    assert json.loads(world.next_message("requester"))["event_type"] == "export_completed"
