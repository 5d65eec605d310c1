"""A stage's dead-letter queues: every queue of its stacks that another queue (or nothing) feeds."""

from __future__ import annotations

from collections.abc import Sequence

from tools.redrive.aws import Aws
from tools.redrive.queues import Queue, Refused


def stage_queues(aws: Aws, stage: str) -> list[tuple[str, Queue]]:
    """(stack, queue) for every queue of the stage's stacks, ``MangaAssist-<stage>-*``, as CloudFormation lists them."""
    cloudformation = aws.client("cloudformation")
    prefix = f"MangaAssist-{stage}-"
    stacks = [
        stack["StackName"]
        for page in cloudformation.get_paginator("describe_stacks").paginate()
        for stack in page.get("Stacks", [])
        if stack["StackName"].startswith(prefix) and stack.get("StackStatus") != "DELETE_COMPLETE"
    ]
    if not stacks:
        raise Refused(
            f"no CloudFormation stacks {prefix}* in {aws.region} for the account of these credentials: "
            "is the stage deployed there? (--region, --profile)"
        )
    queues: list[tuple[str, Queue]] = []
    for stack in sorted(stacks):
        for page in cloudformation.get_paginator("list_stack_resources").paginate(StackName=stack):
            for resource in page.get("StackResourceSummaries", []):
                url = resource.get("PhysicalResourceId")  # a queue's physical id is its URL
                if resource["ResourceType"] != "AWS::SQS::Queue" or not url:
                    continue
                if str(resource.get("ResourceStatus", "")).startswith("DELETE"):
                    continue
                try:
                    queues.append((stack.removeprefix(prefix), aws.queue_at(url)))
                except Refused:
                    continue  # deleted outside CloudFormation
    return queues


def dead_letter_queues(queues: Sequence[tuple[str, Queue]]) -> list[tuple[str, Queue, list[str]]]:
    """(stack, DLQ, names of its source queues) for the queues among ``queues`` that are DLQs.

    A queue is one when another queue's redrive policy names it or its RedriveAllowPolicy says
    ``byQueue``; and when it has no DLQ of its own: the construct library gives every work queue a
    DLQ and leaves it out only on failure destinations (``SecureQueue(dead_letter_queue=False)``),
    and tests/infra/test_invariants.py holds every stage to that. A RedriveAllowPolicy of
    ``denyAll`` says it is none.
    """
    sources: dict[str, list[str]] = {}
    for _, queue in queues:
        if queue.dead_letter_target:
            sources.setdefault(queue.dead_letter_target, []).append(queue.name)
    found: list[tuple[str, Queue, list[str]]] = []
    for stack, queue in queues:
        permission = queue.redrive_permission
        if permission == "denyAll":
            continue
        if queue.arn in sources or permission == "byQueue" or queue.dead_letter_target is None:
            found.append((stack, queue, sorted(sources.get(queue.arn, []))))
    return found


def list_stage(aws: Aws, stage: str, account: str) -> int:
    """Print the stage's DLQs, their depth and where a redrive would send their messages."""
    dlqs = dead_letter_queues(stage_queues(aws, stage))
    consumers = aws.consumers()
    print(f"Dead-letter queues of stage {stage} (account {account}, {aws.region}):")
    for stack, dlq, sources in dlqs:
        print(f"\n  {dlq.name}  [{stack}]")
        depth = f"{dlq.waiting} waiting, {dlq.in_flight} in flight"
        if sources:
            print(f"    {depth}; redrives to {', '.join(sources)}")
        elif dlq.arn in consumers:
            functions = ", ".join(consumer.function for consumer in consumers[dlq.arn])
            print(f"    {depth}; stream failure records of {functions}: replayed from the stream, not redriven")
        else:
            print(f"    {depth}; no source queue: failure records or undeliverable events (a dry run says which)")
    if aws.consumers_unknown:
        print(f"\n(could not list Lambda event source mappings: {aws.consumers_unknown})")
    print("\nLook into one (a dry run): python -m tools.redrive QUEUE; move its messages with --apply")
    return 0


def stage_home(stage: str) -> tuple[str | None, str | None]:
    """The account and region cdk.json pins for ``stage`` (Refused for a stage it does not define)."""
    from stacks.config import ConfigError  # imports the CDK (a second), so only when a stage is asked for
    from tools.deploy import stage_config

    try:
        config = stage_config(stage)
    except ConfigError as error:
        raise Refused(str(error)) from None
    return config.account, config.region
