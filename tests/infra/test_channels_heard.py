"""Every channel in the templates has a reader: no SQS queue without a consumer, no SNS topic without a subscription.

A message that lands where nothing reads it is lost as surely as one never sent, so each queue
and topic of both stages must name who hears it, in the template or below with the reason.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from embedded.synth import PARTS, SynthesizedStage
from tests.infra.test_invariants import _dead_letter_queues, _fail_if, _of_type, _props, _refs, _resolve

# Queues a reader outside the templates polls; each names that reader.
EXTERNAL_QUEUE_READERS: dict[str, str] = {}

# Topics whose only reader is a person whose address is a stage setting: a stage that leaves the
# setting unset (dev) has nobody to tell, so the topic needs no subscription there.
TOPIC_RECIPIENT_SETTING: dict[str, str] = {
    "OpsTopic": "alarm_email",
    "ExportApprovalTopic": "reviewer_email",
    "ManagersTopic": "managers_email",
}


def _stack_outputs(stage: SynthesizedStage) -> dict[str, str]:
    """Each output name of every stack mapped to the one logical id its value refers to."""
    outputs: dict[str, str] = {}
    for part in PARTS:
        for name, output in stage.templates[part].get("Outputs", {}).items():
            refs = _refs(output.get("Value"))
            if len(refs) == 1:
                outputs[name] = next(iter(refs))
    return outputs


def _source(stage: SynthesizedStage, value: Any) -> set[str]:
    """The logical id an ARN value names, in this stack or another (Fn::GetStackOutput, Fn::ImportValue)."""
    if isinstance(value, dict) and "Fn::GetStackOutput" in value:
        name = _stack_outputs(stage).get(value["Fn::GetStackOutput"]["OutputName"])
        return {name} if name else set()
    return _resolve(stage, _refs(value))


def _consumed_queues(stage: SynthesizedStage) -> set[str]:
    """Queues an event source mapping reads, or that hold failures (read by ops through their alarm)."""
    read: set[str] = set()
    for _, _, mapping in _of_type(stage, "AWS::Lambda::EventSourceMapping"):
        read |= _source(stage, _props(mapping).get("EventSourceArn"))
    return read | _dead_letter_queues(stage)


def check_every_queue_has_a_consumer(stage: SynthesizedStage) -> list[str]:
    read = _consumed_queues(stage)
    return [
        f"{part}/{logical_id}: SQS queue that no event source mapping reads and no documented reader polls"
        for part, logical_id, _ in _of_type(stage, "AWS::SQS::Queue")
        if logical_id not in read and not any(logical_id.startswith(q) for q in EXTERNAL_QUEUE_READERS)
    ]


def check_every_topic_has_a_subscription(stage: SynthesizedStage) -> list[str]:
    subscribed: set[str] = set()
    for _, _, subscription in _of_type(stage, "AWS::SNS::Subscription"):
        subscribed |= _source(stage, _props(subscription).get("TopicArn"))
    return [
        f"{part}/{logical_id}: SNS topic without a subscription"
        for part, logical_id, _ in _of_type(stage, "AWS::SNS::Topic")
        if logical_id not in subscribed and not _nobody_to_tell(stage, logical_id)
    ]


def _nobody_to_tell(stage: SynthesizedStage, logical_id: str) -> bool:
    config = getattr(getattr(stage, "stage", None), "config", None)
    for prefix, setting in TOPIC_RECIPIENT_SETTING.items():
        if logical_id.startswith(prefix):
            return config is not None and getattr(config, setting) is None
    return False


def test_every_queue_has_a_consumer(any_stage: SynthesizedStage) -> None:
    _fail_if(check_every_queue_has_a_consumer(any_stage), "every queue is read by something real")


def test_every_topic_has_a_subscription(any_stage: SynthesizedStage) -> None:
    _fail_if(check_every_topic_has_a_subscription(any_stage), "every topic reaches someone")


def _template_with(resources: dict[str, Any]) -> Any:
    templates: dict[str, dict[str, Any]] = {part: {"Resources": {}} for part in PARTS}
    templates["Events"] = {"Resources": resources}
    return SimpleNamespace(templates=templates, stage=None)


def test_fails_on_a_queue_nothing_reads() -> None:
    stage = _template_with({"Orphan": {"Type": "AWS::SQS::Queue", "Properties": {}}})
    assert check_every_queue_has_a_consumer(stage) == [
        "Events/Orphan: SQS queue that no event source mapping reads and no documented reader polls"
    ]


def test_fails_on_a_topic_nobody_subscribes() -> None:
    stage = _template_with(
        {
            "Heard": {"Type": "AWS::SNS::Topic"},
            "Unheard": {"Type": "AWS::SNS::Topic"},
            "Sub": {"Type": "AWS::SNS::Subscription", "Properties": {"TopicArn": {"Ref": "Heard"}}},
        }
    )
    assert check_every_topic_has_a_subscription(stage) == ["Events/Unheard: SNS topic without a subscription"]


def test_escalations_page_the_managers_by_email_where_the_stage_names_them(
    dev: SynthesizedStage, prod: SynthesizedStage
) -> None:
    def managers_subscriptions(stage: SynthesizedStage) -> list[dict[str, Any]]:
        return [
            _props(s)
            for _, _, s in _of_type(stage, "AWS::SNS::Subscription")
            if any(r.startswith("ManagersTopic") for r in _refs(_props(s).get("TopicArn")))
        ]

    assert managers_subscriptions(dev) == []
    (subscription,) = managers_subscriptions(prod)
    assert subscription["Protocol"] == "email"
    assert subscription["Endpoint"] == prod.stage.config.managers_email
