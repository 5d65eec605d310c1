"""Benchmark of the stream router: AWS calls and records/second for a 100-record mixed batch,
this router against the one-call-per-record baseline (bench/baseline_router.py), in the
same run, on moto in this process.

Run with ``python -m bench.router``. AWS calls are exact (a botocore before-call hook counts every
API operation each router makes). Records/second is wall time of routing the batch on moto, the
median of several runs with fresh sequence numbers; moto answers in microseconds where AWS takes
milliseconds per call, so the real-world gap is wider than the one measured here: the call count
is the figure that carries over.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import boto3
from moto import mock_aws
from moto.awslambda.models import LambdaFunction

from bench import baseline_router
from embedded.events import StreamRecords, batch_event
from embedded.services.firehose import create_s3_delivery_stream
from lambdas.events import router
from lambdas.events.delivery import Backoff
from lambdas.shared.records import Handoff, HandoffStatus, Role, Session, SessionStatus, Summary, Turn

REGION = "us-east-1"
RUNS = 5
BATCH = 100
NOW = 1_767_225_600
STATUS_CHANGES, HANDOFFS, SUMMARY_TRIGGERS = 15, 10, 7  # what mixed_batch() holds


def mixed_batch(records: StreamRecords) -> list[dict[str, Any]]:
    """100 records: 70 turn inserts (7 at the summary interval), 15 status changes, 10 handoffs, 5 summaries."""
    batch: list[dict[str, Any]] = []
    session = Session("bench", "cust", SessionStatus.ACTIVE, 0, NOW, NOW, NOW + 86400).to_item()
    handoff_session = {**session, "status": "handoff"}
    turn = 0
    for n in range(BATCH):
        kind = n % 20
        if kind in (3, 13, 17):
            batch.append(records.modify(session, handoff_session))
        elif kind in (5, 15):
            status = HandoffStatus.ASSIGNED  # created with its agent: published to the topic
            item = Handoff("bench", f"h-{n}", "escalated", "high", status, NOW, NOW, NOW + 86400, "agent-1")
            batch.append(records.insert(item.to_item()))
        elif kind == 19:
            summary = Summary("bench", n, "text", 1, 10, 10, NOW, NOW + 86400)
            batch.append(records.insert(summary.to_item()))
        else:
            turn += 1
            text = "Is the third volume of Frieren out in the collector's edition?"
            batch.append(records.insert(Turn("bench", turn, Role.USER, text, NOW, NOW + 86400).to_item()))
    return batch


def _provision() -> dict[str, str]:
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket="analytics")
    s3.create_bucket(Bucket="audit", ObjectLockEnabledForBucket=True)
    for stream in ("analytics", "audit"):
        create_s3_delivery_stream(stream, stream, region=REGION)
    boto3.client("events", region_name=REGION).create_event_bus(Name="bus")
    topic = boto3.client("sns", region_name=REGION).create_topic(Name="handoffs")["TopicArn"]
    iam = boto3.client("iam", region_name=REGION)
    role = iam.create_role(RoleName="bench", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    function = boto3.client("lambda", region_name=REGION).create_function(
        FunctionName="summary",
        Runtime="python3.11",
        Role=role,
        Handler="lambdas.events.summary.handler",
        Code={"ZipFile": b"PK\x05\x06" + b"\x00" * 18},
    )["FunctionArn"]
    return {"topic": str(topic), "function": str(function)}


class Meter:
    """Counts API operations of every client it watches."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def client(self, service: str) -> Any:
        made = boto3.client(service, region_name=REGION)
        name = made.meta.service_model.service_name

        def count(model: Any, **_: Any) -> None:
            self.calls[f"{name}.{model.name}"] += 1

        made.meta.events.register("before-call", count)
        return made


@contextmanager
def _aws() -> Iterator[dict[str, str]]:
    for name, value in {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench"}.items():
        os.environ.setdefault(name, value)
    # An async invoke is accepted by moto and answered at once (no Docker, no handler run): the
    # benchmark measures the router, not the summary generator.
    with mock_aws(), mock.patch.object(LambdaFunction, "_invoke_lambda", return_value=("{}", False, "")):
        yield _provision()


def _measure(route_batch: Callable[[dict[str, Any]], dict[str, Any]]) -> tuple[float, int]:
    """(median seconds per batch, failures of the last run) over RUNS fresh batches."""
    samples, failed = [], 0
    for run in range(RUNS):
        event = batch_event(*mixed_batch(StreamRecords(first_sequence=10**20 + run * 10**9)))
        start = time.perf_counter()
        response = route_batch(event)
        samples.append(time.perf_counter() - start)
        failed = len(response["batchItemFailures"])
    return statistics.median(samples), failed


def measure() -> dict[str, Any]:
    """Run both routers on the same batches; calls per batch and records/second of each."""
    with _aws() as names:
        ours, theirs = Meter(), Meter()
        settings = router.Settings(
            bus_name="bus",
            handoff_topic_arn=names["topic"],
            analytics_stream="analytics",
            audit_stream="audit",
            summary_function=names["function"],
            summary_interval=10,
        )
        sinks = router.Sinks.from_clients(settings, ours.client, Backoff())
        our_seconds, our_failed = _measure(lambda event: router.route(event, None, cfg=settings, out=sinks))
        clients = {s: theirs.client(s) for s in ("lambda", "events", "sns", "firehose")}
        targets = baseline_router.BaselineTargets(names["function"], names["topic"], "analytics", "bus")
        base_seconds, base_failed = _measure(lambda event: baseline_router.route(event, clients, targets))
    return {
        "ours": {"calls": _per_batch(ours.calls), "seconds": our_seconds, "failed": our_failed},
        "baseline": {"calls": _per_batch(theirs.calls), "seconds": base_seconds, "failed": base_failed},
    }


def _per_batch(calls: Counter[str]) -> dict[str, int]:
    return {op: count // RUNS for op, count in sorted(calls.items())}


def _describe(calls: dict[str, int]) -> str:
    total = sum(calls.values())
    return f"{total} ({', '.join(f'{op} {n}' for op, n in calls.items())})"


def run() -> list[dict[str, Any]]:
    """The rows `make bench` prints (keys of bench.__main__.Row)."""
    result = measure()
    ours, base = result["ours"], result["baseline"]
    our_calls, base_calls = sum(ours["calls"].values()), sum(base["calls"].values())
    # The floor: one PutRecordBatch per delivery stream (analytics, audit), PutEvents/PublishBatch
    # per 10 entries, one
    # async Invoke per summary trigger (turns at the interval: 7 of the 70 turns here).
    floor = 1 + 1 + -(-STATUS_CHANGES // 10) + -(-HANDOFFS // 10) + SUMMARY_TRIGGERS
    our_rate, base_rate = BATCH / ours["seconds"], BATCH / base["seconds"]
    return [
        {
            "what": f"router: AWS calls per {BATCH}-record mixed batch (incl. audit)",
            "this": _describe(ours["calls"]),
            "baseline": f"{_describe(base['calls'])} (one call per record, no audit)",
            "target": f"<= 1/10 of baseline (floor {floor}: 1 per service chunk + 1 per summary trigger)",
            "met": our_calls * 10 <= base_calls,
            "runs": RUNS,
        },
        {
            "what": f"router: records/second on moto ({BATCH}-record batch, median)",
            "this": f"{our_rate:,.0f} rec/s",
            "baseline": f"{base_rate:,.0f} rec/s (one call per record)",
            "target": "faster than the baseline",
            "met": our_rate > base_rate and ours["failed"] == 0,
            "runs": RUNS,
        },
    ]


if __name__ == "__main__":
    print(json.dumps(measure(), indent=2))
    for row in run():
        print(row)
