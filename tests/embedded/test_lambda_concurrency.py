"""Reserved concurrency on the embedded stage: one invocation too many is throttled as Lambda throttles it.

A function reserving one concurrent execution is kept busy by an invocation that waits for the
test's latch; while it waits, a synchronous call is refused with TooManyRequestsException, an
asynchronous event is accepted and runs once the function is free, and a queue's poller backs off
and delivers the message later. A closing stage refuses new invocations and waits for the one in
flight, so no handler outlives the emulator it calls.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from embedded import EmbeddedStage, embedded_stage
from embedded.services.lambda_concurrency import InvocationsStillRunning
from tests.e2e import templates as t
from tests.fixtures.probe_pkg import handler as probe

pytestmark = pytest.mark.slow
HOLD = "tests.fixtures.probe_pkg.handler.hold"


@pytest.fixture
def stage() -> Iterator[EmbeddedStage]:
    function = t.function(HOLD)
    function["Properties"]["ReservedConcurrentExecutions"] = 1
    resources: dict[str, Any] = {
        "Role": t.role(),
        "Busy": function,
        "Queue": t.queue(),
        "Mapping": t.mapping("Busy", {"Fn::GetAtt": ["Queue", "Arn"]}, BatchSize=1),
    }
    probe.HELD.clear()
    probe.RELEASE.clear()
    # The template carries no policies: this is about concurrency, not IAM (tests/embedded/iam)
    with embedded_stage([t.stack("T-Busy", "Events", resources)], strict=False) as deployed:
        try:
            yield deployed
        finally:
            probe.RELEASE.set()  # before the stage closes: closing waits for the held invocation


def _occupy(stage: EmbeddedStage) -> threading.Thread:
    """A synchronous invocation that keeps the function's one execution busy until released."""
    name = stage.function(HOLD).name
    busy = threading.Thread(target=stage.invoke, args=(name, {"n": "first"}), daemon=True)
    busy.start()
    assert probe.HELD.wait(timeout=30)
    return busy


def test_a_synchronous_call_over_the_reserved_concurrency_is_refused_with_too_many_requests(
    stage: EmbeddedStage,
) -> None:
    busy = _occupy(stage)
    with pytest.raises(ClientError) as refused:
        stage.client("lambda").invoke(FunctionName=stage.function(HOLD).name, Payload=b"{}")
    assert refused.value.response["Error"]["Code"] == "TooManyRequestsException"
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 429
    probe.RELEASE.set()
    busy.join(timeout=30)
    # (the SDK retried the throttle before giving up, as its retry mode does: each attempt was refused)
    assert set(stage.concurrency.throttled) == {(stage.function(HOLD).name, "RequestResponse")}
    assert stage.invoke(stage.function(HOLD).name, {"n": "after"}).ok


def test_an_asynchronous_event_over_the_reserved_concurrency_waits_and_runs_once_the_function_is_free(
    stage: EmbeddedStage,
) -> None:
    busy = _occupy(stage)
    accepted = stage.client("lambda").invoke(
        FunctionName=stage.function(HOLD).name, InvocationType="Event", Payload=b'{"n": "event"}'
    )
    assert accepted["StatusCode"] == 202
    assert len(stage.concurrency.deferred) == 1
    probe.RELEASE.set()
    busy.join(timeout=30)
    stage.settle(wait_executions=False)
    assert stage.concurrency.deferred == []
    assert [c.event for c in stage.calls.by_handler(HOLD)] == [{"n": "first"}, {"n": "event"}]


def test_a_queue_poller_backs_off_while_the_function_is_busy_and_delivers_later(stage: EmbeddedStage) -> None:
    stage.client("sqs").send_message(QueueUrl=stage.only("AWS::SQS::Queue").ref, MessageBody="queued")
    busy = _occupy(stage)
    assert stage.queues.pump() == 1  # one attempt, throttled, then the poller backs off
    assert stage.queues.deliveries[-1].outcome.throttled
    probe.RELEASE.set()
    busy.join(timeout=30)
    stage.queues.pump()
    delivered = [c.event["Records"][0]["body"] for c in stage.calls.by_handler(HOLD) if "Records" in c.event]
    assert delivered == ["queued"]


def test_a_closing_stage_refuses_new_invocations_and_waits_for_the_one_in_flight(stage: EmbeddedStage) -> None:
    busy = _occupy(stage)
    closer = threading.Thread(target=stage.concurrency.close, daemon=True)
    closer.start()
    while not stage.concurrency.closed:  # (closing begins at once; this only orders the threads)
        closer.join(timeout=0.01)

    with pytest.raises(ClientError) as refused:
        stage.client("lambda").invoke(FunctionName=stage.function(HOLD).name, Payload=b"{}")
    assert refused.value.response["Error"]["Code"] == "ServiceException"
    assert "closing" in refused.value.response["Error"]["Message"]
    assert closer.is_alive(), "the stage closed while a handler was still running"

    probe.RELEASE.set()
    busy.join(timeout=30)
    closer.join(timeout=30)
    assert not closer.is_alive()
    assert stage.concurrency.in_flight == {stage.function(HOLD).name: 0}


def test_a_stage_closing_under_a_handler_that_never_returns_names_it(stage: EmbeddedStage) -> None:
    _occupy(stage)
    with pytest.raises(InvocationsStillRunning, match=stage.function(HOLD).name):
        stage.concurrency.close(timeout=0.05)
