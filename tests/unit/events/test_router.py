"""Stream router on moto: routing of every prefix, batching, partial failures, poison records, replays.

Downstream is real (moto): a Firehose stream into an analytics bucket, the audit trail's own
Firehose stream into an Object Lock bucket, an EventBridge bus with a rule to an observer queue,
the SNS handoff topic with a raw observer queue, and the summary generator deployed as a moto
function run in-process.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import io
import json
import logging
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3
import pytest

from embedded.events import StreamRecords, batch_event, sequence_of, stream_record_from
from embedded.runtime import Invocations, deploy_function, in_process
from embedded.services.firehose import create_s3_delivery_stream
from lambdas.events import router
from lambdas.events.delivery import Backoff
from lambdas.shared import env as lambda_env
from lambdas.shared.records import Handoff, HandoffStatus, Role, Session, SessionStatus, Summary, Turn
from lambdas.shared.store import DynamoSessionStore

REGION = "us-east-1"
NOW = 1_767_225_600
SESSION = "sess-1"


def session_item(status: SessionStatus = SessionStatus.ACTIVE, *, turn_count: int = 0, updated: int = NOW) -> dict:
    return Session(
        session_id=SESSION,
        customer_id="cust-1",
        status=status,
        turn_count=turn_count,
        created_at=NOW,
        updated_at=updated,
        ttl=NOW + 86400,
    ).to_item()


def turn_item(number: int, text: str = "Is volume 3 out?") -> dict:
    return Turn(SESSION, number, Role.USER, text, NOW, NOW + 86400).to_item()


def handoff_item(reason: str = "escalated", agent_id: str | None = None, handoff_id: str = "h-1") -> dict:
    return Handoff(
        session_id=SESSION,
        handoff_id=handoff_id,
        reason=reason,
        priority="high",
        status=HandoffStatus.QUEUED,
        created_at=NOW,
        updated_at=NOW,
        ttl=NOW + 86400,
        agent_id=agent_id,
    ).to_item()


class CallCounter:
    """Counts API operations per service through botocore's before-call hook."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def watch(self, client: Any) -> Any:
        service = client.meta.service_model.service_name

        def count(model: Any, **_: Any) -> None:
            self.calls[f"{service}.{model.name}"] += 1

        client.meta.events.register("before-call", count)
        return client


class InjectFailures:
    """Wraps a boto3 client: for the first ``times`` calls of a batch operation, entries chosen
    by ``pick`` are reported failed (and not sent); the rest go to moto for real.

    ``stream`` limits the injection to the PutRecordBatch calls of one delivery stream.
    """

    _SHAPES = {
        "put_record_batch": ("Records", "FailedPutCount", "RequestResponses"),
        "put_events": ("Entries", "FailedEntryCount", "Entries"),
    }

    def __init__(
        self, client: Any, method: str, pick: Callable[[dict], bool], times: int, stream: str | None = None
    ) -> None:
        self._client, self._method, self._pick, self.remaining = client, method, pick, times
        self._stream = stream
        self.calls = 0  # calls the router made to that stream (an all-failed call never reaches moto)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if name != self._method:
            return attr
        return lambda **kwargs: self._call(attr, **kwargs)

    def _call(self, real: Callable[..., Any], **kwargs: Any) -> dict:
        if self._stream is not None and kwargs.get("DeliveryStreamName") != self._stream:
            return real(**kwargs)
        self.calls += 1
        if self.remaining <= 0:
            return real(**kwargs)
        self.remaining -= 1
        entries_key, count_key, results_key = self._SHAPES[self._method]
        entries = kwargs[entries_key]
        failed = [self._pick(e) for e in entries]
        sent = [e for e, bad in zip(entries, failed, strict=True) if not bad]
        results = iter(real(**{**kwargs, entries_key: sent})[results_key] if sent else [])
        merged = [
            {"ErrorCode": "ServiceUnavailableException", "ErrorMessage": "injected"} if bad else next(results)
            for bad in failed
        ]
        return {count_key: sum(failed), results_key: merged}


@dataclass
class Downstream:
    store: DynamoSessionStore
    settings: router.Settings
    counter: CallCounter
    invocations: Invocations
    sleeps: list[float] = field(default_factory=list)
    wrap: dict[str, Callable[[Any], Any]] = field(default_factory=dict)

    def sinks(self) -> router.Sinks:
        def client(service: str) -> Any:
            made = self.counter.watch(boto3.client(service, region_name=REGION))
            return self.wrap.get(service, lambda c: c)(made)

        backoff = Backoff(attempts=3, sleep=self.sleeps.append, rand=lambda: 1.0)
        return router.Sinks.from_clients(self.settings, client, backoff)

    def route(self, event: dict) -> dict:
        return router.route(event, None, cfg=self.settings, out=self.sinks())

    # -- what arrived downstream --------------------------------------------------------------
    @staticmethod
    def objects(bucket: str) -> list[tuple[str, list[dict]]]:
        """Every object version in the bucket (moto's Firehose writes one per PutRecordBatch),
        as (key, NDJSON lines), oldest first."""
        s3 = boto3.client("s3", region_name=REGION)
        found = []
        versions = s3.list_object_versions(Bucket=bucket).get("Versions", [])
        for version in sorted(versions, key=lambda v: v["LastModified"]):
            body = s3.get_object(Bucket=bucket, Key=version["Key"], VersionId=version["VersionId"])["Body"]
            found.append((version["Key"], [json.loads(line) for line in body.read().decode().splitlines() if line]))
        return found

    def analytics_lines(self) -> list[dict]:
        return [line for _, lines in self.objects("analytics") for line in lines]

    def audit_objects(self) -> list[tuple[str, list[dict]]]:
        return self.objects("audit")

    def audit_lines(self) -> list[dict]:
        return [line for _, lines in self.audit_objects() for line in lines]

    def _drain(self, queue: str) -> list[dict]:
        sqs = boto3.client("sqs", region_name=REGION)
        url = sqs.get_queue_url(QueueName=queue)["QueueUrl"]
        messages: list[dict] = []
        while True:
            batch = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]).get(
                "Messages", []
            )
            if not batch:
                return messages
            messages += batch
            for m in batch:
                sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])

    def bus_events(self) -> list[dict]:
        return [json.loads(m["Body"]) for m in self._drain("bus-observer")]

    def handoff_messages(self) -> list[dict]:
        return self._drain("handoff-observer")


@pytest.fixture
def downstream(ddb_client: Any, table_name: str, clock: Any) -> Iterator[Downstream]:
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket="analytics")
    s3.create_bucket(Bucket="audit", ObjectLockEnabledForBucket=True)
    s3.put_object_lock_configuration(
        Bucket="audit",
        ObjectLockConfiguration={
            "ObjectLockEnabled": "Enabled",
            "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 1}},
        },
    )
    # One stream into analytics, and the audit trail's own into the locked bucket (as deployed)
    create_s3_delivery_stream("analytics-stream", "analytics", prefix="sessions/", region=REGION)
    create_s3_delivery_stream("audit-stream", "audit", prefix="audit/", region=REGION)
    sqs = boto3.client("sqs", region_name=REGION)

    def queue_arn(name: str) -> str:
        url = sqs.create_queue(QueueName=name)["QueueUrl"]
        return str(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"])

    events = boto3.client("events", region_name=REGION)
    events.create_event_bus(Name="sessions-bus")
    events.put_rule(
        Name="observe", EventBusName="sessions-bus", EventPattern=json.dumps({"source": ["mangaassist.sessions"]})
    )
    events.put_targets(
        Rule="observe", EventBusName="sessions-bus", Targets=[{"Id": "q", "Arn": queue_arn("bus-observer")}]
    )
    sns = boto3.client("sns", region_name=REGION)
    topic = sns.create_topic(Name="handoffs")["TopicArn"]
    sns.subscribe(
        TopicArn=topic,
        Protocol="sqs",
        Endpoint=queue_arn("handoff-observer"),
        Attributes={"RawMessageDelivery": "true"},
    )
    with in_process() as invocations:
        summary_arn = deploy_function(
            "lambdas.events.summary.handler",
            {"TABLE_NAME": table_name, "SUMMARY_INTERVAL": "10"},
            name="summary-generator",
            region=REGION,
        )
        settings = router.Settings(
            bus_name="sessions-bus",
            handoff_topic_arn=topic,
            analytics_stream="analytics-stream",
            audit_stream="audit-stream",
            summary_function=summary_arn,
            summary_interval=10,
        )
        store = DynamoSessionStore(table_name, client=ddb_client, clock=clock)
        yield Downstream(store=store, settings=settings, counter=CallCounter(), invocations=invocations)


@pytest.fixture
def records() -> StreamRecords:
    return StreamRecords()


def failures(response: dict) -> list[str]:
    return [f["itemIdentifier"] for f in response["batchItemFailures"]]


# -- routing ------------------------------------------------------------------------------------


def test_routes_every_prefix_and_sends_every_record_to_analytics_and_audit(
    downstream: Downstream, records: StreamRecords
) -> None:
    # Given one record of each kind the router distinguishes
    batch = [
        records.insert(session_item()),  # new session -> SessionStatusChanged none -> active
        records.modify(session_item(turn_count=1), session_item(turn_count=2)),  # no status change
        records.modify(session_item(), session_item(SessionStatus.HANDOFF, updated=NOW + 5)),  # -> handoff
        records.insert(turn_item(9)),  # not at the interval: nothing
        records.insert(handoff_item(reason="escalated", agent_id="agent-3")),  # created with its agent -> topic
        records.modify(handoff_item(), handoff_item(agent_id="agent-7")),  # agent assigned -> topic
        records.insert(Summary(SESSION, 1, "so far", 1, 10, 10, NOW, NOW + 86400).to_item()),  # analytics + audit only
        records.remove(turn_item(1), ttl=True),  # expired by TTL
        records.remove(handoff_item()),  # deleted by the application
    ]
    # When the router processes the batch
    response = downstream.route(batch_event(*batch))
    # Then nothing failed
    assert failures(response) == []
    # And the bus got exactly the two status changes, with the architecture's detail + event_id
    events = downstream.bus_events()
    details = sorted(
        (e["detail"] for e in events if e["detail-type"] == "SessionStatusChanged"), key=lambda d: d["new_status"]
    )
    assert [(d["old_status"], d["new_status"]) for d in details] == [("none", "active"), ("active", "handoff")]
    assert set(details[0]) == {"session_id", "old_status", "new_status", "customer_id", "timestamp", "event_id"}
    assert details[1]["event_id"] == batch[2]["eventID"]
    assert details[1]["timestamp"] == NOW + 5
    # And the handoff metrics heard of the request and the assignment (the removal counts for nothing)
    # (an agent written without the status moving to assigned is no assignment to them)
    changes = [e["detail"]["changes"] for e in events if e["detail-type"] == "HandoffChanged"]
    assert changes == [["requested"]]
    # And the topic got the new handoff and the assignment, with the filter attributes
    messages = downstream.handoff_messages()
    by_type = {json.loads(m["Body"])["event_type"]: m for m in messages}
    assert set(by_type) == {"handoff", "assigned"}
    created = by_type["handoff"]["MessageAttributes"]
    assert {k: v["StringValue"] for k, v in created.items()} == {
        "event_type": "handoff",
        "reason": "escalated",
        "agent_id": "agent-3",
    }
    assigned = by_type["assigned"]["MessageAttributes"]
    assert assigned["agent_id"]["StringValue"] == "agent-7"
    assert "text" not in json.loads(by_type["handoff"]["Body"]), "customer notices come from the workflow"
    # And no summary was triggered (turn 9 is not at the interval)
    assert downstream.invocations.calls == []
    # And every record is in analytics, and in the audit stream's ONE delivery into the locked
    # bucket, in stream order, the TTL removal audited as expired
    assert sorted(line["event_id"] for line in downstream.analytics_lines()) == sorted(r["eventID"] for r in batch)
    ((key, audit),) = downstream.audit_objects()
    assert key.startswith("audit/")
    assert [line["event_id"] for line in audit] == [r["eventID"] for r in batch]
    assert [line["sequence_number"] for line in audit] == [sequence_of(r) for r in batch]
    expired = audit[7]
    assert (expired["change"], expired["actor"], expired["item_type"]) == ("expired", "ttl", "turn")
    assert (audit[8]["change"], audit[8]["actor"]) == ("deleted", "application")
    # And neither analytics nor audit carries message content
    assert "Is volume 3 out?" not in json.dumps(downstream.analytics_lines()) + json.dumps(audit)


def _with_status(item: dict, status: HandoffStatus, **extra: object) -> dict:
    return {**item, "status": str(status), **extra}


def test_a_handoff_that_escalates_or_completes_is_its_own_event_and_no_other_modify_is(
    downstream: Downstream, records: StreamRecords
) -> None:
    queued = _with_status(handoff_item(reason="billing"), HandoffStatus.QUEUED)
    escalated = _with_status(queued, HandoffStatus.ESCALATED)
    assigned = _with_status(escalated, HandoffStatus.ASSIGNED, agent_id="manager-1")
    completed = _with_status(assigned, HandoffStatus.COMPLETED, resolution="Refund issued.", outcome="active")
    batch = [
        records.modify(queued, escalated),  # no agent took it -> escalated
        records.modify(escalated, assigned),  # a manager took it -> assigned
        records.modify(assigned, completed),  # closed -> completed, with how it ended
        records.modify(completed, {**completed, "updated_at": NOW + 9}),  # nothing the fan-out cares about
        records.modify(queued, {**queued, "callback_token": "t"}),  # nor this
    ]
    assert failures(downstream.route(batch_event(*batch))) == []
    messages = downstream.handoff_messages()
    bodies = [json.loads(m["Body"]) for m in messages]
    assert [b["event_type"] for b in bodies] == ["escalated", "assigned", "completed"]
    attributes = {b["event_type"]: m["MessageAttributes"] for b, m in zip(bodies, messages, strict=True)}
    assert attributes["escalated"]["event_type"]["StringValue"] == "escalated"
    assert "agent_id" not in attributes["escalated"]
    assert (bodies[2]["resolution"], bodies[2]["outcome"]) == ("Refund issued.", "active")
    assert all(b["event_id"] == r["eventID"] for b, r in zip(bodies, batch, strict=False))


def test_a_queued_handoff_is_one_message_for_its_customer_and_none_for_the_agents(
    downstream: Downstream, records: StreamRecords
) -> None:
    # Given a handoff created queued (no agent yet), beside one created with its agent
    queued = _with_status(handoff_item(reason="billing", handoff_id="h-q"), HandoffStatus.QUEUED)
    taken = _with_status(handoff_item(reason="billing", agent_id="agent-7", handoff_id="h-a"), HandoffStatus.ASSIGNED)
    batch = [records.insert(queued), records.insert(taken)]
    # When routed
    assert failures(downstream.route(batch_event(*batch))) == []
    # Then the queued one is ``queued`` with no agent attribute (only the customer queue selects
    # it: the workflow's handoff_waiting tells the agents), the other ``handoff`` for its agent
    messages = downstream.handoff_messages()
    bodies = [json.loads(m["Body"]) for m in messages]
    assert [(b["event_type"], b["handoff_id"], b["agent_id"]) for b in bodies] == [
        ("queued", "h-q", None),
        ("handoff", "h-a", "agent-7"),
    ]
    assert "agent_id" not in messages[0]["MessageAttributes"]
    assert messages[0]["MessageAttributes"]["event_type"]["StringValue"] == "queued"
    # And both are still audited
    assert [line["sk"] for line in downstream.audit_lines()] == ["HANDOFF#h-q", "HANDOFF#h-a"]


def test_every_step_of_a_handoffs_life_is_one_handoff_changed_event_with_its_timestamps(
    downstream: Downstream, records: StreamRecords
) -> None:
    # Given a handoff that waits, is escalated, taken by a manager, answered and closed
    queued = _with_status(handoff_item(reason="billing"), HandoffStatus.QUEUED)
    escalated = _with_status(queued, HandoffStatus.ESCALATED, updated_at=NOW + 300)
    assigned = _with_status(escalated, HandoffStatus.ASSIGNED, agent_id="manager-1", assigned_at=NOW + 320)
    replied = {**assigned, "first_reply_at": NOW + 335}
    completed = _with_status(replied, HandoffStatus.COMPLETED, closed_at=NOW + 900, updated_at=NOW + 900)
    direct = _with_status(handoff_item(handoff_id="h-2"), HandoffStatus.ASSIGNED, agent_id="a-2", assigned_at=NOW)
    failed = _with_status(queued, HandoffStatus.FAILED, updated_at=NOW + 1200)
    batch = [
        records.insert(queued),
        records.modify(queued, escalated),
        records.modify(escalated, assigned),
        records.modify(assigned, replied),
        records.modify(replied, {**replied, "updated_at": NOW + 400}),  # nothing the metrics count
        records.modify(replied, completed),
        records.insert(direct),  # an agent was free at once: requested and assigned in one write
        records.modify(queued, failed),  # failed by the workflow, which writes no closed_at
    ]
    # When the router processes them
    assert failures(downstream.route(batch_event(*batch))) == []
    # Then each counted change is one HandoffChanged event on the bus, in order
    details = [e["detail"] for e in downstream.bus_events() if e["detail-type"] == "HandoffChanged"]
    assert [d["changes"] for d in details] == [
        ["requested"],
        ["escalated"],
        ["assigned"],
        ["first_reply"],
        ["completed"],
        ["requested", "assigned"],
        ["failed"],
    ]
    # And they carry the handoff's timestamps, reason and priority, and no customer id
    done = details[4]
    assert (done["requested_at"], done["assigned_at"], done["first_reply_at"], done["closed_at"]) == (
        NOW,
        NOW + 320,
        NOW + 335,
        NOW + 900,
    )
    assert (done["reason"], done["priority"], done["status"], done["event_id"]) == (
        "billing",
        "high",
        "completed",
        batch[5]["eventID"],
    )
    assert "customer_id" not in done
    assert (details[5]["requested_at"], details[5]["assigned_at"]) == (NOW, NOW)
    assert details[6]["closed_at"] == NOW + 1200


def test_turn_at_the_interval_triggers_one_summary_of_exactly_that_window(
    downstream: Downstream, records: StreamRecords
) -> None:
    # Given a session with 20 turns in the table
    session = downstream.store.sessions.create_session("cust-1")
    turns = [downstream.store.turns.add_turn(session.session_id, "user", f"question {n}") for n in range(1, 21)]
    # When the stream delivers the INSERTs of turns 11..20
    response = downstream.route(batch_event(*(records.insert(t.to_item()) for t in turns[10:])))
    # Then one asynchronous summary ran, for turn 20 only, and stored SUMMARY#2 over turns 11..20
    assert failures(response) == []
    calls = downstream.invocations.by_handler("lambdas.events.summary.handler")
    assert [c.event["turn_number"] for c in calls] == [20]
    summary = downstream.store.turns.latest_summary(session.session_id)
    assert summary is not None
    assert (summary.summary_number, summary.window_start, summary.window_end) == (2, 11, 20)
    assert summary.summary_text.splitlines() == [f"user: question {n}" for n in range(11, 21)]
    assert downstream.counter.calls["lambda.Invoke"] == 1


# -- batching -----------------------------------------------------------------------------------


def mixed_batch(records: StreamRecords, size: int = 100) -> list[dict]:
    """size records: turns, status changes every 5th, a new handoff every 10th."""
    batch: list[dict] = []
    for n in range(1, size + 1):
        if n % 10 == 0:
            batch.append(records.insert(handoff_item(agent_id="agent-7", handoff_id=f"h-{n}")))
        elif n % 5 == 0:
            batch.append(records.modify(session_item(), session_item(SessionStatus.HANDOFF)))
        else:
            batch.append(records.insert(turn_item(n if n % 10 else n + 1)))
    return batch


def test_a_batch_of_100_costs_one_call_per_delivery_stream_and_chunks_of_ten(
    downstream: Downstream, records: StreamRecords
) -> None:
    # Given 100 records: 10 handoffs, 10 status changes, 80 turns (none at the interval)
    batch = mixed_batch(records)
    # When routed
    response = downstream.route(batch_event(*batch))
    # Then everything went through with the minimum number of calls
    assert failures(response) == []
    # (20 bus events: the 10 status changes and the 10 handoff requests, in two chunks of ten)
    assert downstream.counter.calls == Counter(
        {"firehose.PutRecordBatch": 2, "events.PutEvents": 2, "sns.PublishBatch": 1}
    )
    assert len(downstream.analytics_lines()) == 100
    assert len(downstream.audit_lines()) == 100
    assert len(downstream.bus_events()) == 20
    assert len(downstream.handoff_messages()) == 10


# -- failures -----------------------------------------------------------------------------------


def test_a_poison_record_is_reported_alone(downstream: Downstream, records: StreamRecords) -> None:
    # Given a batch whose middle record has no sort key
    good_before, poison, good_after = (
        records.insert(turn_item(1)),
        records.insert(turn_item(2)),
        records.insert(turn_item(3)),
    )
    del poison["dynamodb"]["Keys"]["SK"]
    # When routed
    response = downstream.route(batch_event(good_before, poison, good_after))
    # Then only the poison record is reported, and the other two reached analytics and audit
    assert failures(response) == [sequence_of(poison)]
    delivered = {line["event_id"] for line in downstream.analytics_lines()}
    assert delivered == {good_before["eventID"], good_after["eventID"]}
    assert {line["event_id"] for line in downstream.audit_lines()} == delivered


def _event_id_in_data(event_ids: set[str]) -> Callable[[dict], bool]:
    """A Firehose record holding the line of one of ``event_ids`` (a record packs several lines)."""
    return lambda entry: any(json.loads(line)["event_id"] in event_ids for line in entry["Data"].splitlines())


def test_the_analytics_and_audit_lines_of_a_batch_are_packed_into_one_firehose_record_each(
    downstream: Downstream, records: StreamRecords
) -> None:
    # Given five changes, and what the router sends to Firehose
    batch = [records.insert(turn_item(n)) for n in range(1, 6)]
    sent: list[dict[str, Any]] = []

    def watch(client: Any) -> Any:
        client.meta.events.register(
            "provide-client-params.firehose.PutRecordBatch", lambda params, **_: sent.append(params)
        )
        return client

    downstream.wrap["firehose"] = watch
    # When routed
    assert failures(downstream.route(batch_event(*batch))) == []
    # Then each stream got ONE record holding the five lines, one JSON line per change
    assert [(c["DeliveryStreamName"], len(c["Records"])) for c in sent] == [
        ("analytics-stream", 1),
        ("audit-stream", 1),
    ]
    for call in sent:
        (record,) = call["Records"]
        assert [json.loads(line)["event_id"] for line in record["Data"].splitlines()] == [r["eventID"] for r in batch]
    # And the objects Firehose writes hold every line, as a reader reads them line by line
    assert [line["event_id"] for line in downstream.analytics_lines()] == [r["eventID"] for r in batch]
    assert [line["event_id"] for line in downstream.audit_lines()] == [r["eventID"] for r in batch]


def test_a_firehose_record_rejected_once_is_resent_whole_and_nothing_is_reported(
    downstream: Downstream, records: StreamRecords
) -> None:
    # Given Firehose rejects, on the first call, the record that packs two of five changes' lines
    batch = [records.insert(turn_item(n)) for n in range(1, 6)]
    flaky = {batch[1]["eventID"], batch[3]["eventID"]}
    injected: list[InjectFailures] = []

    def wrap(client: Any) -> InjectFailures:
        injected.append(
            InjectFailures(client, "put_record_batch", _event_id_in_data(flaky), times=1, stream="analytics-stream")
        )
        return injected[-1]

    downstream.wrap["firehose"] = wrap
    # When routed
    response = downstream.route(batch_event(*batch))
    # Then the second analytics call resent the record (all five lines), everything arrived once,
    # nothing is reported (the rejected call never reached Firehose; the other is the audit stream's)
    assert failures(response) == []
    assert injected[0].calls == 2
    assert downstream.counter.calls["firehose.PutRecordBatch"] == 2
    deliveries = [[line["event_id"] for line in lines] for _, lines in downstream.objects("analytics")]
    assert deliveries == [[r["eventID"] for r in batch]]
    assert downstream.sleeps == [0.05]  # one jittered backoff (rand=1.0: the cap of retry 0)


def test_firehose_records_that_keep_failing_report_every_change_they_hold(
    downstream: Downstream, records: StreamRecords
) -> None:
    # Given Firehose rejects, on every attempt, the record holding one change's line
    batch = [records.insert(turn_item(n)) for n in range(1, 6)]
    stuck = batch[2]
    injected: list[InjectFailures] = []

    def wrap(client: Any) -> InjectFailures:
        injected.append(
            InjectFailures(
                client, "put_record_batch", _event_id_in_data({stuck["eventID"]}), times=99, stream="analytics-stream"
            )
        )
        return injected[-1]

    downstream.wrap["firehose"] = wrap
    # When routed
    response = downstream.route(batch_event(*batch))
    # Then every change packed into that record is reported (a record fails whole), after the
    # bounded number of attempts
    assert failures(response) == [sequence_of(r) for r in batch]
    assert injected[0].calls == 3
    assert len(downstream.sleeps) == 2


def test_eventbridge_partial_failure_is_retried_and_a_final_failure_reported(
    downstream: Downstream, records: StreamRecords
) -> None:
    # Given 12 status changes (two PutEvents chunks); one event fails once, another always
    batch = [records.modify(session_item(), session_item(SessionStatus.HANDOFF, updated=NOW + n)) for n in range(12)]
    once, always = batch[3], batch[11]
    failing = {"once": 1}

    def pick(entry: dict) -> bool:
        event_id = json.loads(entry["Detail"])["event_id"]
        if event_id == once["eventID"] and failing["once"]:
            failing["once"] -= 1
            return True
        return bool(event_id == always["eventID"])

    downstream.wrap["events"] = lambda c: InjectFailures(c, "put_events", pick, times=99)
    # When routed
    response = downstream.route(batch_event(*batch))
    # Then only the always-failing record is reported; the other eleven events were delivered once
    assert failures(response) == [sequence_of(always)]
    delivered = sorted(e["detail"]["event_id"] for e in downstream.bus_events())
    assert delivered == sorted(r["eventID"] for r in batch if r is not always)


def test_replaying_a_batch_changes_no_keyed_state(downstream: Downstream, records: StreamRecords) -> None:
    # Given a batch with a summary trigger, a status change and a handoff, routed once
    session = downstream.store.sessions.create_session("cust-1")
    turns = [downstream.store.turns.add_turn(session.session_id, "user", f"q{n}") for n in range(1, 11)]
    batch = [
        records.insert(turns[-1].to_item()),
        records.modify(session_item(), session_item(SessionStatus.HANDOFF)),
        records.insert(handoff_item(agent_id="agent-7")),
    ]
    event = batch_event(*batch)
    assert failures(downstream.route(event)) == []
    first_summary = downstream.store.turns.latest_summary(session.session_id)
    first_audit = downstream.audit_lines()
    first_events = {e["detail"]["event_id"] for e in downstream.bus_events()}
    first_messages = {json.loads(m["Body"])["event_id"] for m in downstream.handoff_messages()}
    # When the same batch is delivered again (a retried invocation)
    assert failures(downstream.route(event)) == []
    # Then the summary is the same item, and the re-sent audit lines, events and messages carry
    # the same ids (Firehose is at-least-once: a reader recognises the replay and de-duplicates)
    assert downstream.store.turns.latest_summary(session.session_id) == first_summary
    audit = downstream.audit_lines()
    assert sorted(map(json.dumps, audit)) == sorted(map(json.dumps, first_audit + first_audit))
    assert {line["event_id"]: line for line in audit} == {line["event_id"]: line for line in first_audit}
    assert {e["detail"]["event_id"] for e in downstream.bus_events()} == first_events
    assert {json.loads(m["Body"])["event_id"] for m in downstream.handoff_messages()} == first_messages
    items = downstream.store.sessions.list_session_items(session.session_id).items
    assert sum(isinstance(i, Summary) for i in items) == 1


def test_records_from_the_tables_own_stream_route_end_to_end(downstream: Downstream, ddb_client: Any) -> None:
    # Given real store writes: a session, ten turns, a handoff status change, a handoff record
    store = downstream.store
    session = store.sessions.create_session("cust-1")
    for n in range(1, 11):
        store.turns.add_turn(session.session_id, "user", f"turn {n}")
    store.sessions.update_status(session.session_id, SessionStatus.HANDOFF)
    handoff = store.handoffs.put_handoff(
        session.session_id, reason="escalated", agent_id="agent-7", status=HandoffStatus.ASSIGNED
    )
    # And the records moto's stream holds for them, as Lambda's event would carry them
    # boto3 now resolves account-based endpoints (<account>.streams-ddb...) that moto 5.2.5 does
    # not route; the classic endpoint reaches the same moto backend.
    streams = boto3.client(
        "dynamodbstreams", region_name=REGION, endpoint_url=f"https://streams.dynamodb.{REGION}.amazonaws.com"
    )
    stream_arn = ddb_client.describe_table(TableName=store.table.table_name)["Table"]["LatestStreamArn"]
    (shard,) = streams.describe_stream(StreamArn=stream_arn)["StreamDescription"]["Shards"]
    iterator = streams.get_shard_iterator(
        StreamArn=stream_arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    raw = streams.get_records(ShardIterator=iterator)["Records"]
    event = batch_event(*(stream_record_from(r, stream_arn=stream_arn, region=REGION) for r in raw))
    # When routed
    response = downstream.route(event)
    # Then: no failure; started + handoff on the bus; the handoff on the topic; summary 1 written
    assert failures(response) == []
    events = downstream.bus_events()
    statuses = sorted(
        (e["detail"]["old_status"], e["detail"]["new_status"])
        for e in events
        if e["detail-type"] == "SessionStatusChanged"
    )
    assert statuses == [("active", "handoff"), ("none", "active")]
    # created with its agent (free at once): requested and assigned in the one change
    changes = [e["detail"]["changes"] for e in events if e["detail-type"] == "HandoffChanged"]
    assert changes == [["requested", "assigned"]]
    (message,) = downstream.handoff_messages()
    assert json.loads(message["Body"])["handoff_id"] == handoff.handoff_id
    summary = store.turns.latest_summary(session.session_id)
    assert summary is not None
    assert (summary.window_start, summary.window_end) == (1, 10)
    assert len(downstream.analytics_lines()) == len(event["Records"])


def test_a_record_the_audit_stream_keeps_refusing_is_reported_even_though_analytics_has_it(
    downstream: Downstream, records: StreamRecords
) -> None:
    # Given the audit stream rejects the record of the batch's lines on every attempt, analytics
    # takes everything
    batch = [records.insert(turn_item(n)) for n in range(1, 4)]
    stuck = batch[1]
    downstream.wrap["firehose"] = lambda c: InjectFailures(
        c, "put_record_batch", _event_id_in_data({stuck["eventID"]}), times=99, stream="audit-stream"
    )
    # When routed
    response = downstream.route(batch_event(*batch))
    # Then the changes of that record are reported (their retry re-sends them everywhere, never
    # skipping the audit), and nothing of it reached the audit trail
    assert failures(response) == [sequence_of(r) for r in batch]
    assert downstream.audit_lines() == []
    assert len(downstream.analytics_lines()) == 3


def _logged_changes(downstream: Downstream, batch: list[dict]) -> list[list[dict]]:
    """The ``audit`` lists of the ``stream changes`` lines routing ``batch`` logged (Powertools' JSON formatter)."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(router.logger.registered_formatter)
    router.logger.addHandler(handler)
    try:
        assert failures(downstream.route(batch_event(*batch))) == []
    finally:
        router.logger.removeHandler(handler)
    logged = [json.loads(line) for line in out.getvalue().splitlines()]
    return [entry["audit"] for entry in logged if entry["message"] == "stream changes"]


def test_every_change_is_also_logged_in_one_structured_line_per_batch(
    downstream: Downstream, records: StreamRecords
) -> None:
    # Given a batch of two changes, one of them a TTL removal
    batch = [records.insert(turn_item(1)), records.remove(turn_item(2), ttl=True)]
    # When routed
    lines = _logged_changes(downstream, batch)
    # Then the log holds one JSON line for the batch, with the same audit records the audit stream got
    assert len(lines) == 1
    assert lines[0] == downstream.audit_lines()
    assert lines[0][1]["change"] == "expired"


def test_a_batch_of_250_changes_is_logged_in_lines_of_at_most_100(
    downstream: Downstream, records: StreamRecords
) -> None:
    batch = [records.insert(turn_item(n)) for n in range(1, 251)]
    lines = _logged_changes(downstream, batch)
    assert [len(line) for line in lines] == [100, 100, 50]
    assert [change for line in lines for change in line] == downstream.audit_lines()


# -- the search collection's stream -------------------------------------------------------------


def _with_search_stream(downstream: Downstream) -> None:
    """The stage's search collection: its stream (an S3 stream stands in for the OpenSearch one)."""
    boto3.client("s3", region_name=REGION).create_bucket(Bucket="search")
    create_s3_delivery_stream("search-stream", "search", prefix="search/", region=REGION)
    downstream.settings = dataclasses.replace(downstream.settings, search_stream="search-stream")


def test_with_a_search_stream_every_analytics_line_also_goes_there_in_one_more_call(
    downstream: Downstream, records: StreamRecords
) -> None:
    # Given a stage with a search collection, and 100 mixed records
    _with_search_stream(downstream)
    batch = mixed_batch(records)
    # When routed
    response = downstream.route(batch_event(*batch))
    # Then the search stream received exactly the analytics lines, in one PutRecordBatch
    assert failures(response) == []
    assert downstream.counter.calls["firehose.PutRecordBatch"] == 3
    searched = [line for _, lines in downstream.objects("search") for line in lines]
    assert len(searched) == 100
    assert searched == downstream.analytics_lines()


def test_a_record_the_search_stream_keeps_refusing_is_reported_though_analytics_has_it(
    downstream: Downstream, records: StreamRecords
) -> None:
    # Given the search stream refuses one record on every attempt
    _with_search_stream(downstream)
    batch = [records.insert(turn_item(n)) for n in range(1, 4)]
    stuck = batch[1]
    downstream.wrap["firehose"] = lambda c: InjectFailures(
        c, "put_record_batch", _event_id_in_data({stuck["eventID"]}), times=99, stream="search-stream"
    )
    # When routed
    response = downstream.route(batch_event(*batch))
    # Then that record is reported for a retry of the batch, nothing else is, and analytics has all three
    assert failures(response) == [sequence_of(stuck)]
    assert {line["event_id"] for line in downstream.analytics_lines()} == {r["eventID"] for r in batch}
    searched = {line["event_id"] for _, lines in downstream.objects("search") for line in lines}
    assert searched == {batch[0]["eventID"], batch[2]["eventID"]}


def test_the_search_stream_is_read_from_its_variable_and_absent_without_it(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {
        "EVENT_BUS_NAME": "bus",
        "HANDOFF_TOPIC_ARN": "arn:aws:sns:eu-west-1:111111111111:handoffs",
        "ANALYTICS_STREAM_NAME": "analytics-stream",
        "AUDIT_STREAM_NAME": "audit-stream",
        "SUMMARY_FUNCTION_NAME": "summary",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("SEARCH_STREAM_NAME", raising=False)
    lambda_env.reset()
    assert router.settings().search_stream is None
    monkeypatch.setenv("SEARCH_STREAM_NAME", "search-stream")
    lambda_env.reset()
    assert router.settings().search_stream == "search-stream"


# -- customer pseudonyms ------------------------------------------------------------------------


def test_analytics_lines_carry_the_customers_pseudonym_under_the_secrets_key_never_the_id(
    downstream: Downstream, records: StreamRecords, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the stage's pseudonym secret, named by the router's variable
    secrets = boto3.client("secretsmanager", region_name=REGION)
    arn = secrets.create_secret(Name="pseudonyms", SecretString="p" * 64)["ARN"]
    monkeypatch.setenv("PSEUDONYM_SECRET_ARN", arn)
    lambda_env.reset()
    # And a session's creation and status change (a turn has no customer)
    session = session_item()
    batch = [
        records.insert(session),
        records.modify(session, session_item(SessionStatus.HANDOFF)),
        records.insert(turn_item(1)),
    ]
    # When routed with the router's pseudonymiser
    event = batch_event(*batch)
    response = router.route(
        event, None, cfg=downstream.settings, out=downstream.sinks(), pseudonymise=router.pseudonymiser()
    )
    # Then both session lines carry HMAC-SHA256(key, customer id), the turn line none, and no line the id
    assert failures(response) == []
    lines = downstream.analytics_lines()
    expected = hmac.new(b"p" * 64, session["customer_id"].encode(), hashlib.sha256).hexdigest()
    assert [line.get("customer_pseudonym") for line in lines] == [expected, expected, None]
    assert session["customer_id"] not in json.dumps(lines)
