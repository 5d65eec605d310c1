"""SecureQueue: its dead-letter queue matches its type, and a DLQ is brought or shaped one way.

Synthesized with CDK's built-in template validation turning its findings into errors, as
CloudFormation would refuse them at deploy.
"""

from __future__ import annotations

import pytest
from aws_cdk import App, Duration, Stack
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sqs as sqs
from aws_cdk.assertions import Match, Template

from constructs_lib import SecureQueue


def _stack() -> tuple[App, Stack, kms.Key]:
    app = App(context={"@aws-cdk/core:validateAgainstDefaultRules": True})
    stack = Stack(app, "Queues")
    return app, stack, kms.Key(stack, "Key", enable_key_rotation=True)


def test_a_fifo_queue_gets_a_fifo_dead_letter_queue() -> None:
    # Given a FIFO queue with the default dead-letter queue
    app, stack, key = _stack()
    queue = SecureQueue(stack, "Orders", encryption_key=key, queue_props=sqs.QueueProps(fifo=True))

    # When the app synthesizes with template validation on
    app.synth()
    template = Template.from_stack(stack)

    # Then both queues are FIFO, and the queue redrives to its DLQ
    queues = template.find_resources("AWS::SQS::Queue")
    assert len(queues) == 2
    assert all(q["Properties"].get("FifoQueue") is True for q in queues.values())
    assert queue.dead_letter_queue is not None
    assert queue.dead_letter_queue.fifo
    template.has_resource_properties(
        "AWS::SQS::Queue",
        {"FifoQueue": True, "RedrivePolicy": Match.object_like({"maxReceiveCount": 3})},
    )


def test_a_standard_queue_keeps_a_standard_dead_letter_queue() -> None:
    app, stack, key = _stack()
    SecureQueue(stack, "Work", encryption_key=key)

    app.synth()

    queues = Template.from_stack(stack).find_resources("AWS::SQS::Queue")
    assert [q["Properties"].get("FifoQueue") for q in queues.values()] == [None, None]


def test_the_new_dead_letter_queue_takes_its_props() -> None:
    _, stack, key = _stack()
    SecureQueue(
        stack, "Work", encryption_key=key, dead_letter_queue_props=sqs.QueueProps(retention_period=Duration.days(3))
    )

    Template.from_stack(stack).has_resource_properties("AWS::SQS::Queue", {"MessageRetentionPeriod": 3 * 86400})


def test_fails_on_a_standard_dead_letter_queue_for_a_fifo_queue() -> None:
    app, stack, key = _stack()
    standard = sqs.Queue(stack, "Standard", encryption_master_key=key, enforce_ssl=True)
    SecureQueue(
        stack, "Orders", encryption_key=key, queue_props=sqs.QueueProps(fifo=True), existing_dead_letter_queue=standard
    )

    with pytest.raises(RuntimeError, match=r"\[Queues/Orders\] the dead-letter queue of a FIFO queue must be FIFO"):
        app.synth()


@pytest.mark.parametrize(
    ("props", "message"),
    [
        (
            {"existing_dead_letter_queue": "queue", "dead_letter_queue_props": sqs.QueueProps()},
            "give existing_dead_letter_queue or dead_letter_queue_props, not both",
        ),
        (
            {"dead_letter_queue": False, "dead_letter_queue_props": sqs.QueueProps()},
            "dead_letter_queue=False makes a queue without a DLQ",
        ),
    ],
)
def test_fails_on_a_dead_letter_queue_given_two_ways(props: dict[str, object], message: str) -> None:
    app, stack, key = _stack()
    if props.get("existing_dead_letter_queue") == "queue":
        props["existing_dead_letter_queue"] = sqs.Queue(stack, "Mine", encryption_master_key=key, enforce_ssl=True)
    SecureQueue(stack, "Work", encryption_key=key, **props)  # type: ignore[arg-type]

    with pytest.raises(RuntimeError, match=r"\[Queues/Work\] " + message):
        app.synth()
