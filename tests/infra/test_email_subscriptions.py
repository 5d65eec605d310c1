"""Every e-mail subscription keeps what SNS could not deliver: an encrypted dead-letter queue, watched by an alarm."""

from __future__ import annotations

from typing import Any

import pytest

from embedded.synth import SynthesizedStage


def _email_subscriptions(stage: SynthesizedStage) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    return [
        (part, template, resource["Properties"])
        for part, template in stage.templates.items()
        for resource in template["Resources"].values()
        if resource["Type"] == "AWS::SNS::Subscription" and resource["Properties"]["Protocol"] == "email"
    ]


@pytest.mark.parametrize(
    ("stage_name", "expected"),
    [
        ("dev", {("Orchestration", "reviewer@dev.mangaassist.example")}),
        (
            "prod",
            {
                ("Storage", "oncall@mangaassist.example"),
                ("Events", "support-managers@mangaassist.example"),
                ("Orchestration", "data-protection@mangaassist.example"),
            },
        ),
    ],
)
def test_each_email_subscription_has_an_encrypted_watched_dead_letter_queue(
    dev: SynthesizedStage, prod: SynthesizedStage, stage_name: str, expected: set[tuple[str, str]]
) -> None:
    stage = {"dev": dev, "prod": prod}[stage_name]
    found = _email_subscriptions(stage)
    assert {(part, props["Endpoint"]) for part, _, props in found} == expected
    queues = set()
    for part, template, props in found:
        resources = template["Resources"]
        queue_id = props["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0]
        queues.add((part, queue_id))
        queue = resources[queue_id]
        assert queue["Type"] == "AWS::SQS::Queue"
        assert "KmsMasterKeyId" in queue["Properties"], queue_id
        assert queue["Properties"]["MessageRetentionPeriod"] == 14 * 24 * 3600
        # Only the subscription's topic may send to it.
        policies = [
            r["Properties"]["PolicyDocument"]["Statement"]
            for r in resources.values()
            if r["Type"] == "AWS::SQS::QueuePolicy" and {"Ref": queue_id} in r["Properties"]["Queues"]
        ]
        sends = [s for statements in policies for s in statements if s["Action"] == "sqs:SendMessage"]
        assert sends == [
            {
                "Action": "sqs:SendMessage",
                "Condition": {"ArnEquals": {"aws:SourceArn": props["TopicArn"]}},
                "Effect": "Allow",
                "Principal": {"Service": "sns.amazonaws.com"},
                "Resource": {"Fn::GetAtt": [queue_id, "Arn"]},
            }
        ]
        alarms = [
            r["Properties"]
            for r in resources.values()
            if r["Type"] == "AWS::CloudWatch::Alarm"
            and r["Properties"].get("MetricName") == "ApproximateNumberOfMessagesVisible"
            and r["Properties"]["Dimensions"]
            == [{"Name": "QueueName", "Value": {"Fn::GetAtt": [queue_id, "QueueName"]}}]
        ]
        assert len(alarms) == 1, queue_id
        assert alarms[0]["Threshold"] == 0
    assert len(queues) == len(expected)  # one queue each
