"""The stage's operations wiring: the ops topic, alarms over every stack, one dashboard."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aws_cdk import App, Stack
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sqs as sqs

from constructs_lib import SecureQueue, SharedFunction
from embedded.synth import SynthesizedStage
from stacks.operations import dead_letter_queues


def _of_type(stage: SynthesizedStage, part: str, type_: str) -> dict[str, dict[str, Any]]:
    return stage.template(part).find_resources(type_)


def test_ops_topic_is_encrypted_and_mails_the_on_call_in_prod(dev: SynthesizedStage, prod: SynthesizedStage) -> None:
    for stage in (dev, prod):
        (topic,) = [
            t for name, t in _of_type(stage, "Storage", "AWS::SNS::Topic").items() if name.startswith("OpsTopic")
        ]
        assert "KmsMasterKeyId" in topic["Properties"]
    assert _of_type(dev, "Storage", "AWS::SNS::Subscription") == {}, "dev has no alarm e-mail"
    (subscription,) = _of_type(prod, "Storage", "AWS::SNS::Subscription").values()
    assert subscription["Properties"]["Protocol"] == "email"
    assert subscription["Properties"]["Endpoint"] == prod.stage.config.alarm_email


def test_the_key_lets_cloudwatch_alarms_publish_to_the_encrypted_topic(any_stage: SynthesizedStage) -> None:
    (key,) = _of_type(any_stage, "Storage", "AWS::KMS::Key").values()
    principals = [s.get("Principal", {}).get("Service") for s in key["Properties"]["KeyPolicy"]["Statement"]]
    assert "cloudwatch.amazonaws.com" in principals


def _alarm_names(stage: SynthesizedStage) -> set[str]:
    return {
        alarm["Properties"]["AlarmName"]
        for part in ("Storage", "Events", "Orchestration", "Api")
        for alarm in _of_type(stage, part, "AWS::CloudWatch::Alarm").values()
    }


def test_the_alarms_the_issue_lists_exist(any_stage: SynthesizedStage) -> None:
    prefix = f"MangaAssist-{any_stage.stage.config.name}"
    expected = {
        "Events-StreamRouterSourceIteratorAge",  # stream IteratorAge > 60 s: the router is falling behind
        "Events-StreamRouterErrors",  # router errors
        "Events-StreamRouterSourceDeadLetters",  # a DLQ's visible messages
        "Events-SummaryDeadLetterQueueMessages",
        "Orchestration-HandoffExecutionsFailed",  # per workflow
        "Orchestration-HandoffExecutionsTimedOut",
        "Orchestration-CleanupExecutionsFailed",
        "Orchestration-ExportExecutionsFailed",
        "Api-ChatApiOnboardingDefaultExecutionsFailed",
        "Api-RestApiServerErrorRate",  # API 5xx rate and p99 latency
        "Api-RestApiLatencyP99",
        "Api-WebSocketIntegrationErrors",
        "Api-ChatApiWsMessageThrottles",  # Lambda throttles
        "Events-AnalyticsDeliveryStreamDeliveryFailures",  # Firehose delivery failures
        "Storage-SessionsTableThrottledRequests",  # DynamoDB throttled requests
        "Api-ResponderBedrockFailures",  # Bedrock errors in the responder
        "Events-SummaryGeneratorErrors",  # ... and in the summarizer
    }
    assert {f"{prefix}-{name}" for name in expected} <= _alarm_names(any_stage)


def test_iterator_age_alarm_is_sixty_seconds(any_stage: SynthesizedStage) -> None:
    (alarm,) = [
        a
        for a in _of_type(any_stage, "Events", "AWS::CloudWatch::Alarm").values()
        if a["Properties"]["AlarmName"].endswith("IteratorAge")
    ]
    assert alarm["Properties"]["Threshold"] == 60000


def test_one_dashboard_per_stage_shows_the_system(any_stage: SynthesizedStage) -> None:
    (dashboard,) = _of_type(any_stage, "Api", "AWS::CloudWatch::Dashboard").values()
    assert dashboard["Properties"]["DashboardName"] == f"MangaAssist-{any_stage.stage.config.name}"
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    for row in (
        "API traffic and errors",
        "Chat and handoffs",
        "Stream and dead-letter queues",
        "Workflow outcomes",
        "Cost drivers",
    ):
        assert f"## {row}" in body, row
    for metric in ("ChatTurns", "IteratorAge", "ApproximateNumberOfMessagesVisible", "ExecutionsFailed", "Duration"):
        assert metric in body, metric


def test_dead_letter_queues_are_found_by_what_they_are_not_by_their_names() -> None:
    # Given queues whose names say nothing, and one whose name lies
    stack = Stack(App(), "Probe")
    key = kms.Key(stack, "Key")
    work = SecureQueue(stack, "Work", encryption_key=key)  # its redrive target is a DLQ
    failures = SecureQueue(stack, "Failures", encryption_key=key, dead_letter_queue=False)
    destination = sqs.Queue(stack, "Parked")  # a plain queue, used as an on-failure destination
    SharedFunction(
        stack,
        "Fn",
        code_root=Path(__file__).resolve().parents[1] / "fixtures" / "probe_pkg",
        handler="probe_pkg.handler.handler",
        on_failure=destination,
    )
    sqs.Queue(stack, "NotADlq")  # a work queue with a misleading id
    # When the stack's DLQs are collected
    found = [q.node.path for q in dead_letter_queues(stack)]
    # Then exactly the failure paths are, redrive targets first
    assert found == [work.dead_letter_queue.node.path, failures.queue.node.path, destination.node.path]  # type: ignore[union-attr]
