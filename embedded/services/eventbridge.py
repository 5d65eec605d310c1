"""EventBridge rule delivery on moto, completed for the targets moto does not deliver.

moto's ``put_events`` evaluates every rule's pattern with its own matcher and delivers to SQS,
CloudWatch Logs, archives and other buses; for a Lambda, Step Functions or SNS target it raises
``NotImplementedError``. Inside ``delivering(cloud)`` the harness lets moto deliver what it
supports and delivers the rest itself, after the same pattern check and the target's
``Input`` / ``InputPath`` / ``InputTransformer``: Lambda targets are invoked asynchronously,
state machines get a ``StartExecution``, topics a ``Publish``. Disabled rules deliver nothing,
and scheduled rules never match events (``fire_schedule`` runs one on demand).
"""

from __future__ import annotations

import copy
import datetime
import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

from moto.events.models import Rule

from embedded.cloudformation.loaders import Cloud
from embedded.iam.access import Access
from embedded.services.lambda_invoke import invoke

_MOTO_TARGETS = ("sqs", "logs", "events")


@dataclass
class EventDelivery:
    """One event handed by the harness to a target moto cannot deliver to."""

    rule: str
    target_arn: str
    payload: Any
    result: Any = None


@dataclass
class EventLog:
    """Every event the harness delivered, in order."""

    deliveries: list[EventDelivery] = field(default_factory=list)


def _target_input(target: dict[str, Any], event: dict[str, Any]) -> Any:
    if "Input" in target:
        return json.loads(target["Input"])
    if "InputPath" in target:
        from jsonpath_ng.ext import parse  # type: ignore[attr-defined]

        matches = [m.value for m in parse(target["InputPath"]).find(event)]
        return matches[0] if matches else None
    if "InputTransformer" in target:
        transformer = target["InputTransformer"]
        text = transform(str(transformer.get("InputTemplate", "")), transformer.get("InputPathsMap", {}), event)
        try:
            return json.loads(text)
        except ValueError:
            return text  # a plain-text template: the target receives the string
    return event


def transform(template: str, paths: dict[str, str], event: dict[str, Any]) -> str:
    """EventBridge's InputTransformer: ``<name>`` gets the JSON value of its path, raw inside quotes."""
    from jsonpath_ng.ext import parse  # type: ignore[attr-defined]

    values = {}
    for name, path in paths.items():
        matches = [m.value for m in parse(path).find(event)]
        values[name] = matches[0] if matches else None
    values.setdefault("aws.events.event", event)
    values.setdefault("aws.events.event.json", event)
    out: list[str] = []
    in_string = False
    i = 0
    while i < len(template):
        char = template[i]
        if char == "\\" and in_string:
            out.append(template[i : i + 2])
            i += 2
            continue
        if char == '"':
            in_string = not in_string
        if char == "<":
            end = template.find(">", i)
            name = template[i + 1 : end] if end > 0 else ""
            if name in values:
                value = values[name]
                if in_string:
                    raw = value if isinstance(value, str) else json.dumps(value)
                    out.append(json.dumps(raw)[1:-1])
                else:
                    out.append(json.dumps(value))
                i = end + 1
                continue
        out.append(char)
        i += 1
    return "".join(out)


#: The action EventBridge performs on each kind of target.
_TARGET_ACTIONS = {
    "lambda": ("lambda:InvokeFunction",),
    "states": ("states:StartExecution",),
    "sns": ("sns:Publish",),
    "sqs": ("sqs:SendMessage",),
    "logs": ("logs:CreateLogStream", "logs:PutLogEvents"),
    "events": ("events:PutEvents",),
}


def authorized(cloud: Cloud, rule_arn: str, target: dict[str, Any], event: dict[str, Any]) -> bool:
    """Whether EventBridge may deliver to ``target``: with the target's role, or by the target's policy.

    A refused delivery is kept in the stage's report; EventBridge retries it and then sends the
    event to the target's dead-letter queue when it has one (which must let EventBridge in too),
    so the event goes there at once (time compressed) or is dropped.
    """
    guard = cloud.guard
    if guard is None:
        return True
    arn = str(target["Arn"])
    service = arn.split(":")[2]
    if service == "events" and not arn.split(":")[4]:
        return True  # the managed rule of an archive: EventBridge archiving its own bus
    source = {"aws:SourceArn": rule_arn, "aws:SourceAccount": cloud.account}
    resource = arn.removesuffix(":*") if service == "logs" else arn
    actions = _TARGET_ACTIONS.get(service)
    if actions is None:
        raise NotImplementedError(f"rule {rule_arn}: EventBridge target {arn} is not emulated by the harness")
    made_by = f"EventBridge rule {rule_arn.rsplit('/', 1)[-1]}"
    if target.get("RoleArn"):
        wanted = [Access(action, resource) for action in actions]
        refusal = guard.with_role("events.amazonaws.com", str(target["RoleArn"]), wanted, made_by, source)
    else:
        refusal = guard.deliver("events.amazonaws.com", [Access(a, resource, source) for a in actions], made_by)
    if refusal is None:
        return True
    dead_letters = (target.get("DeadLetterConfig") or {}).get("Arn")
    if (
        dead_letters
        and guard.deliver(
            "events.amazonaws.com", [Access("sqs:SendMessage", str(dead_letters), source)], f"{made_by} (dead letters)"
        )
        is None
    ):
        queue = str(dead_letters)
        url = cloud.client("sqs").get_queue_url(
            QueueName=queue.split(":")[5], QueueOwnerAWSAccountId=queue.split(":")[4]
        )
        cloud.client("sqs").send_message(QueueUrl=url["QueueUrl"], MessageBody=json.dumps(event, default=str))
    return False


def _deliver(cloud: Cloud, rule: str, target: dict[str, Any], event: dict[str, Any], log: EventLog) -> None:
    arn = str(target["Arn"])
    service = arn.split(":")[2]
    payload = _target_input(target, event)
    delivery = EventDelivery(rule, arn, payload)
    log.deliveries.append(delivery)
    if service == "lambda":
        delivery.result = invoke(cloud.client("lambda"), arn.split(":")[6], payload, asynchronous=True)
    elif service == "states":
        delivery.result = cloud.client("stepfunctions").start_execution(
            stateMachineArn=arn, name=str(uuid.uuid4()), input=json.dumps(payload)
        )["executionArn"]
    elif service == "sns":
        delivery.result = cloud.client("sns").publish(TopicArn=arn, Message=json.dumps(payload))["MessageId"]
    else:
        raise NotImplementedError(f"rule {rule}: EventBridge target {arn} is not emulated by the harness")


@contextmanager
def delivering(cloud: Cloud) -> Iterator[EventLog]:
    """Patch moto's rule delivery for the block's duration (see module docstring)."""
    log = EventLog()
    original = Rule.send_to_targets

    def send_to_targets(self: Rule, original_event: Any, transform_input: bool = True) -> None:
        if self.state != "ENABLED" or self.scheduled_expression:
            return
        if not self.event_pattern.matches_event(original_event):
            return
        event = copy.deepcopy(original_event)
        if isinstance(event.get("time"), (int, float)):
            event["time"] = datetime.datetime.fromtimestamp(event["time"], datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        allowed = [t for t in self.targets if authorized(cloud, self.arn, t, event)]
        supported = [t for t in allowed if t["Arn"].split(":")[2] in _MOTO_TARGETS]
        others = [t for t in allowed if t["Arn"].split(":")[2] not in _MOTO_TARGETS]
        if supported:
            targets, self.targets = self.targets, supported
            try:
                original(self, original_event, transform_input)
            finally:
                self.targets = targets
        for target in others:
            _deliver(cloud, self.name, target, event, log)

    with mock.patch.object(Rule, "send_to_targets", send_to_targets):
        yield log


def fire_schedule(cloud: Cloud, rule_name: str, *, log: EventLog, now: float, bus: str = "default") -> None:
    """Deliver one "Scheduled Event" of a scheduled rule to its targets, as EventBridge would."""
    events = cloud.client("events")
    rule = events.describe_rule(Name=rule_name, EventBusName=bus)
    if not rule.get("ScheduleExpression"):
        raise ValueError(f"rule {rule_name} has no ScheduleExpression")
    event = {
        "version": "0",
        "id": f"schedule-{int(now)}",
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": cloud.account,
        "time": datetime.datetime.fromtimestamp(now, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": cloud.region,
        "resources": [rule["Arn"]],
        "detail": {},
    }
    for target in events.list_targets_by_rule(Rule=rule_name, EventBusName=bus)["Targets"]:
        if not authorized(cloud, str(rule["Arn"]), target, event):
            continue
        if target["Arn"].split(":")[2] == "sqs":
            url = cloud.client("sqs").get_queue_url(QueueName=target["Arn"].split(":")[5])["QueueUrl"]
            cloud.client("sqs").send_message(QueueUrl=url, MessageBody=json.dumps(_target_input(target, event)))
        else:
            _deliver(cloud, rule_name, target, event, log)
