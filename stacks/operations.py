"""Operations wiring: every stack watches what it holds, and every alarm reaches the ops topic.

`watch_stack` walks a stack's construct tree, so a function, dead-letter queue or workflow added
later is alarmed without anyone remembering to: each `SharedFunction` gets error and throttle
alarms, each dead-letter queue an alarm on any visible message, each state machine alarms on
failed and timed-out executions. Alarms our constructs already create (stream lag, workflow
outcomes) are adopted: named, given a runbook line and the ops topic's actions. Workflows are
found by type: every ``WorkflowStateMachine``, Standard or Express, whatever construct holds it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

from aws_cdk import Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn

from constructs_lib import (
    SecureEventBus,
    SecureQueue,
    ServiceAlarms,
    SharedFunction,
    StreamConsumer,
    WorkflowStateMachine,
)
from constructs_lib.delivery_stream import S3DeliveryStream

RUNBOOK_FUNCTION = (
    "Open the function's log group (JSON logs, filter level=ERROR) and its X-Ray traces; "
    "the request id in an error response leads to the log line."
)
RUNBOOK_DLQ = (
    "make redrive QUEUE=<this queue> shows what failed and where it would go; fix the cause, then redrive "
    "it (APPLY=1) or, for failure records, replay what they name (docs/operations.md, Redriving a dead-letter queue)."
)
RUNBOOK_WORKFLOW = (
    "Open the failed execution in the Step Functions console: the failing state's error and cause say why."
)


def dead_letter_queues(stack: Stack) -> list[sqs.IQueue]:
    """Queues of ``stack`` that hold what failed, found by what the constructs say they are.

    Redrive targets (a queue's ``dead_letter_queue``) come first, then failure destinations: a
    ``SecureQueue`` built without a DLQ of its own (its contract: it *is* one), a function's
    on-failure destination, a stream consumer's on-failure queue, an event bus's target DLQ.
    Queues of another stack are left to that stack.
    """
    constructs = stack.node.find_all()
    found: dict[int, sqs.IQueue] = {}
    stack_path = stack.node.path

    def add(queue: sqs.IQueue | None) -> None:
        if queue is not None and Stack.of(queue).node.path == stack_path:
            found.setdefault(id(queue), queue)

    for construct in constructs:
        if isinstance(construct, sqs.Queue) and construct.dead_letter_queue is not None:
            add(construct.dead_letter_queue.queue)
    for construct in constructs:
        if isinstance(construct, SecureQueue) and construct.dead_letter_queue is None:
            add(construct.queue)
        elif isinstance(construct, SharedFunction):
            add(construct.on_failure)
        elif isinstance(construct, (StreamConsumer, SecureEventBus)):
            add(construct.dead_letter_queue)
    return list(found.values())


def _adopt(alarms: ServiceAlarms, alarm: cloudwatch.Alarm, name: str, runbook: str, topic: sns.ITopic) -> None:
    """Give an alarm a construct created the stage's naming, a runbook line and the ops actions."""
    cfn = cast(cloudwatch.CfnAlarm, alarm.node.default_child)
    cfn.alarm_name = f"{alarms.prefix}-{name}"
    cfn.alarm_description = f"{cfn.alarm_description or name}\nRunbook: {runbook}"
    alarm.add_alarm_action(actions.SnsAction(topic))
    alarm.add_ok_action(actions.SnsAction(topic))
    alarms.alarms.append(alarm)


def watch_stack(
    stack: Stack,
    *,
    topic: sns.ITopic,
    prefix: str,
    deliberate_errors: Mapping[str, cloudwatch.IMetric] | None = None,
) -> ServiceAlarms:
    """Alarms for everything ``stack`` holds, all notifying ``topic``; returns them (for dashboards).

    ``deliberate_errors``: by a function construct's path, the count of its invocations that fail
    on purpose, which its errors alarm leaves out (see ``ServiceAlarms.watch_function``).
    """
    deliberate = dict(deliberate_errors or {})
    alarms = ServiceAlarms(stack, "Alarms", topic=topic, prefix=prefix)
    covered_queues: set[int] = set()
    covered_machines: set[int] = set()
    # Every ``node.path`` read is a round trip to the jsii kernel, and a stack holds hundreds of
    # constructs: read it only for the few that get alarms, and the stack's own path once.
    below = stack.node.path + "/"
    for construct in stack.node.find_all():
        if not isinstance(construct, (SharedFunction, StreamConsumer, WorkflowStateMachine, S3DeliveryStream)):
            continue
        name = _alarm_id(construct.node.path, below)
        if isinstance(construct, SharedFunction):
            alarms.watch_function(
                construct.function,
                name,
                runbook=RUNBOOK_FUNCTION,
                deliberate_errors=deliberate.get(construct.node.path) if deliberate else None,
            )
        elif isinstance(construct, StreamConsumer):
            _adopt(
                alarms,
                construct.iterator_age_alarm,
                f"{name}IteratorAge",
                "The router falls behind the table stream: check its errors and duration; records older than "
                "the mapping's maximum age go to its DLQ, so act before the 24 h stream retention.",
                topic,
            )
            _adopt(alarms, construct.dead_letter_alarm, f"{name}DeadLetters", RUNBOOK_DLQ, topic)
            covered_queues.add(id(construct.dead_letter_queue))
        elif isinstance(construct, WorkflowStateMachine):
            _adopt(alarms, construct.executions_failed_alarm, f"{name}ExecutionsFailed", RUNBOOK_WORKFLOW, topic)
            _adopt(alarms, construct.executions_timed_out_alarm, f"{name}ExecutionsTimedOut", RUNBOOK_WORKFLOW, topic)
            covered_machines.add(id(construct.state_machine))
        elif isinstance(construct, S3DeliveryStream):
            alarms.alarm(
                f"{name}DeliveryFailures",
                metric=construct.delivery_stream.metric("DeliveryToS3.Success", statistic="Minimum"),
                threshold=1,
                comparison=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
                description=f"{name}: Firehose failed to deliver records to S3 (retried for 24 h, then dropped).",
                runbook="The stream's log group names the S3 or KMS error (permissions, key policy); fix it "
                "within 24 hours of the first failure, after which Firehose drops the records.",
            )
    for queue in dead_letter_queues(stack):
        if id(queue) not in covered_queues:
            alarms.watch_dead_letter_queue(queue, _alarm_id(queue.node.path, below), runbook=RUNBOOK_DLQ)
    for machine in (c for c in stack.node.find_all() if isinstance(c, sfn.StateMachine)):
        if id(machine) not in covered_machines:
            alarms.watch_state_machine(machine, _alarm_id(machine.node.path, below), runbook=RUNBOOK_WORKFLOW)
    return alarms


def _alarm_id(path: str, below: str) -> str:
    """A PascalCase alarm id from a construct path below ``below`` (the stack's path and a slash).

    ``.../Events/HandoffTopic/X`` -> ``HandoffTopicX``.

    ``Resource`` is left out, as CloudFormation's logical ids leave it out. ``Default`` stays in:
    the onboarding workflow's alarms moved into its ``Default`` state machine construct, and an
    alarm whose logical id changes must not keep its old name, or CloudFormation would create the
    new alarm under a name the old one still holds.
    """
    relative = path.removeprefix(below)
    return "".join(part for part in relative.replace("-", "/").split("/") if part and part not in _HIDDEN_IDS)


_HIDDEN_IDS = ("Resource",)
