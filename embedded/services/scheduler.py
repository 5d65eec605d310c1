"""EventBridge Scheduler on moto: schedule groups from the template, one-time schedules fired by the clock.

moto stores schedules but never runs them. :func:`fire_due` does what the service does once an
``at(...)`` schedule's time has come on the harness's clock: it hands the target its ``Input``
(a Step Functions ``StartExecution``, an asynchronous Lambda invoke or an SQS message), then
deletes the schedule when its ``ActionAfterCompletion`` is ``DELETE``. Recurring (``rate``/``cron``)
schedules are not emulated: asking to fire one is an error, never a silent skip.
"""

from __future__ import annotations

import datetime
import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

from embedded.cloudformation.intrinsics import Deployed, Pseudo
from embedded.cloudformation.loaders import Cloud, loader, physical_name
from embedded.iam.access import Access
from embedded.services.lambda_invoke import invoke

_AT = re.compile(r"^at\((\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})\)$")


@dataclass(frozen=True)
class FiredSchedule:
    """One schedule the harness ran: where it lives, what it started, and whether it is gone."""

    group: str
    name: str
    target_arn: str
    input: Any
    result: Any
    deleted: bool


@loader("AWS::Scheduler::ScheduleGroup")
def _schedule_group(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    name = str(props.get("Name") or physical_name(pseudo.stack_name, lid, max_length=64))
    arn = cloud.client("scheduler").create_schedule_group(Name=name)["ScheduleGroupArn"]
    return Deployed(lid, "AWS::Scheduler::ScheduleGroup", name, {"Arn": arn})


def due_at(schedule: dict[str, Any]) -> float:
    """Epoch seconds at which a one-time schedule fires (``at(...)`` in its time zone, UTC by default)."""
    expression = str(schedule["ScheduleExpression"])
    match = _AT.match(expression)
    if match is None:
        raise NotImplementedError(f"schedule {schedule['Name']}: only one-time at(...) schedules are emulated")
    zone = str(schedule.get("ScheduleExpressionTimezone") or "UTC")
    if zone != "UTC":
        raise NotImplementedError(f"schedule {schedule['Name']}: time zone {zone} is not emulated (use UTC)")
    when = datetime.datetime.strptime(match.group(1), "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.UTC)
    return when.timestamp()


def schedules(cloud: Cloud) -> list[dict[str, Any]]:
    """Every schedule of every group, as ``GetSchedule`` describes it."""
    scheduler = cloud.client("scheduler")
    found = []
    for group in scheduler.list_schedule_groups()["ScheduleGroups"]:
        for summary in scheduler.list_schedules(GroupName=group["Name"])["Schedules"]:
            found.append(scheduler.get_schedule(Name=summary["Name"], GroupName=group["Name"]))
    return found


def _start(cloud: Cloud, target: dict[str, Any]) -> Any:
    arn = str(target["Arn"])
    payload = target.get("Input", "{}")
    service = arn.split(":")[2]
    if service == "states":
        return cloud.client("stepfunctions").start_execution(
            stateMachineArn=arn, name=str(uuid.uuid4()), input=payload
        )["executionArn"]
    if service == "lambda":
        return invoke(cloud.client("lambda"), arn.split(":")[6], json.loads(payload), asynchronous=True)
    if service == "sqs":
        url = cloud.client("sqs").get_queue_url(QueueName=arn.split(":")[5])["QueueUrl"]
        return cloud.client("sqs").send_message(QueueUrl=url, MessageBody=payload)["MessageId"]
    raise NotImplementedError(f"schedule target {arn} is not emulated by the harness")


_TARGET_ACTIONS = {"states": "states:StartExecution", "lambda": "lambda:InvokeFunction", "sqs": "sqs:SendMessage"}


def _authorized(cloud: Cloud, schedule: dict[str, Any], target: dict[str, Any]) -> bool:
    """Whether the Scheduler may assume the schedule's role and reach its target with it.

    A schedule whose role cannot do it fails its invocation in AWS (retried, then sent to its
    dead-letter queue when it has one); here the refusal is kept in the stage's report and the
    schedule stays, as the service keeps it until its retries are spent.
    """
    if cloud.guard is None:
        return True
    arn = str(target["Arn"])
    group = f"arn:aws:scheduler:{cloud.region}:{cloud.account}:schedule-group/{schedule['GroupName']}"
    source = {"aws:SourceAccount": cloud.account, "aws:SourceArn": group}
    wanted = [Access(_TARGET_ACTIONS.get(arn.split(":")[2], "unknown:" + arn), arn)]
    made_by = f"schedule {schedule['GroupName']}/{schedule['Name']}"
    return cloud.guard.with_role("scheduler.amazonaws.com", str(target["RoleArn"]), wanted, made_by, source) is None


def fire_due(cloud: Cloud, now: float) -> list[FiredSchedule]:
    """Run every enabled one-time schedule due at ``now``; delete those that ask for it."""
    scheduler = cloud.client("scheduler")
    fired = []
    for schedule in schedules(cloud):
        if schedule.get("State", "ENABLED") != "ENABLED" or due_at(schedule) > now:
            continue
        target = dict(schedule["Target"])
        if not _authorized(cloud, schedule, target):
            continue
        result = _start(cloud, target)
        deleted = schedule.get("ActionAfterCompletion") == "DELETE"
        if deleted:
            scheduler.delete_schedule(Name=schedule["Name"], GroupName=schedule["GroupName"])
        fired.append(
            FiredSchedule(
                schedule["GroupName"],
                schedule["Name"],
                str(target["Arn"]),
                json.loads(target.get("Input", "null")),
                result,
                deleted,
            )
        )
    return fired
