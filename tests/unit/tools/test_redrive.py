"""``make redrive``: a dead-letter queue's messages back to their source queue, on moto.

moto 5.2.5 implements ListDeadLetterSourceQueues but not StartMessageMoveTask or
ListMessageMoveTasks (it raises NotImplementedError), so the default path falls back to moving by
hand there; the move-task path is checked against a stand-in for those two calls only.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from moto import mock_aws

from embedded.clock import FakeClock
from tools import redrive

REGION = "us-east-1"
ATTRIBUTES = {
    "event_type": {"DataType": "String", "StringValue": "handoff_waiting"},
    "priority": {"DataType": "Number", "StringValue": "2"},
    "digest": {"DataType": "Binary", "BinaryValue": b"\x00\x01binary"},
}
Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def session() -> Iterator[boto3.Session]:
    with mock_aws():
        yield boto3.Session(region_name=REGION)


@pytest.fixture
def sqs(session: boto3.Session) -> Any:
    return session.client("sqs")


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def run(session: boto3.Session, capsys: pytest.CaptureFixture[str], sleeps: list[float]) -> Run:
    """Run the tool on moto: (exit status, stdout, stderr). Receives never wait; a sleep moves a fake clock."""
    clock = FakeClock()

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        clock.advance(seconds)

    def call(*argv: str) -> tuple[int, str, str]:
        code = redrive.main(list(argv), session=session, receive_wait_seconds=0, sleep=sleep, clock=clock)
        out, err = capsys.readouterr()
        return code, out, err

    return call


def arn(sqs: Any, url: str) -> str:
    return str(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"])


def depth(sqs: Any, url: str) -> tuple[int, int]:
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]), int(attributes["ApproximateNumberOfMessagesNotVisible"])


def queue_with_dlq(sqs: Any, name: str, *, fifo: bool = False, dlq_url: str | None = None) -> tuple[str, str]:
    """A work queue whose messages go to its DLQ after one receive: (queue URL, DLQ URL)."""
    suffix, extra = (".fifo", {"FifoQueue": "true"}) if fifo else ("", {})
    if dlq_url is None:
        dlq_url = sqs.create_queue(QueueName=f"{name}-dlq{suffix}", Attributes=extra)["QueueUrl"]
    policy = json.dumps({"deadLetterTargetArn": arn(sqs, dlq_url), "maxReceiveCount": 1})
    url = sqs.create_queue(QueueName=f"{name}{suffix}", Attributes={**extra, "RedrivePolicy": policy})["QueueUrl"]
    return url, dlq_url


def fail_into_dlq(sqs: Any, url: str, dlq_url: str, count: int) -> None:
    """Receive every message of ``url`` until SQS has moved ``count`` to the DLQ (maxReceiveCount 1)."""
    for _ in range(10 * count + 10):
        if depth(sqs, dlq_url)[0] >= count:
            return
        sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0)
    raise AssertionError(f"only {depth(sqs, dlq_url)[0]} of {count} messages reached the DLQ")


def send(sqs: Any, url: str, count: int, **extra: Any) -> list[str]:
    bodies = [json.dumps({"n": n, "text": "x" * 300}) for n in range(count)]
    for body in bodies:
        sqs.send_message(QueueUrl=url, MessageBody=body, MessageAttributes=ATTRIBUTES, **extra)
    return bodies


def drain(sqs: Any, url: str) -> list[dict[str, Any]]:
    """Every message of ``url`` (deleted as read), with all its attributes."""
    found: list[dict[str, Any]] = []
    while messages := sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"], MessageSystemAttributeNames=["All"]
    ).get("Messages", []):
        for message in messages:
            found.append(message)
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    return found


@pytest.fixture
def escalations(sqs: Any) -> tuple[str, str, list[str]]:
    """A work queue and its DLQ holding three failed messages: (queue URL, DLQ URL, bodies)."""
    url, dlq_url = queue_with_dlq(sqs, "escalations")
    bodies = send(sqs, url, 3)
    fail_into_dlq(sqs, url, dlq_url, 3)
    return url, dlq_url, bodies


# --- Dry run ------------------------------------------------------------------------------------


def test_a_dry_run_shows_depth_source_and_a_sample_and_changes_nothing(
    run: Run, sqs: Any, escalations: tuple[str, str, list[str]]
) -> None:
    url, dlq_url, bodies = escalations
    code, out, _ = run("escalations-dlq")
    assert code == 0
    assert "3 waiting, 0 in flight" in out
    assert "source: escalations (moves a message here after 1 receives)" in out
    assert "Sample: 3 message(s)" in out
    assert "attributes: digest, event_type, priority" in out
    assert bodies[0][:200] in out  # the first 200 characters of a body, no more
    assert bodies[0] not in out
    assert "Plan: move all of its messages to escalations" in out
    assert "Dry run: nothing was moved" in out
    # Then every message is still in the DLQ, visible at once, and none reached the source
    assert depth(sqs, dlq_url) == (3, 0)
    assert depth(sqs, url) == (0, 0)
    assert sorted(m["Body"] for m in drain(sqs, dlq_url)) == sorted(bodies)


def test_the_dlq_may_be_named_by_url_or_arn(run: Run, sqs: Any, escalations: tuple[str, str, list[str]]) -> None:
    _, dlq_url, _ = escalations
    for reference in (dlq_url, arn(sqs, dlq_url)):
        code, out, _ = run(reference, "--sample", "0")
        assert code == 0
        assert "Dead-letter queue escalations-dlq (standard, us-east-1)" in out
        assert "Sample" not in out


# --- Apply --------------------------------------------------------------------------------------


def test_apply_moves_every_message_back_with_body_and_attributes_intact(
    run: Run, sqs: Any, escalations: tuple[str, str, list[str]]
) -> None:
    url, dlq_url, bodies = escalations
    code, out, _ = run("escalations-dlq", "--apply")
    assert code == 0, out
    # moto has no message move tasks: the tool says so and moves by hand
    assert "No message move task here (this endpoint does not implement ListMessageMoveTasks)" in out
    assert "Moved 3 message(s) from escalations-dlq to escalations." in out
    assert depth(sqs, dlq_url) == (0, 0)
    moved = drain(sqs, url)
    assert sorted(m["Body"] for m in moved) == sorted(bodies)
    for message in moved:
        assert message["MessageAttributes"] == ATTRIBUTES


def test_max_bounds_the_move_and_leaves_the_rest_in_the_dlq(run: Run, sqs: Any) -> None:
    url, dlq_url = queue_with_dlq(sqs, "notices")
    send(sqs, url, 25)
    fail_into_dlq(sqs, url, dlq_url, 25)
    code, out, _ = run("notices-dlq", "--apply", "--max", "12")
    assert code == 0, out
    assert "moving by hand: --max bounds the move" in out
    assert "Moved 12 message(s)" in out
    assert depth(sqs, url)[0] == 12
    assert depth(sqs, dlq_url) == (13, 0)


def test_rate_paces_a_move_by_hand(run: Run, sqs: Any, sleeps: list[float]) -> None:
    url, dlq_url = queue_with_dlq(sqs, "paced")
    send(sqs, url, 25)
    fail_into_dlq(sqs, url, dlq_url, 25)
    code, _, _ = run("paced-dlq", "--apply", "--method", "manual", "--rate", "5")
    assert code == 0
    assert depth(sqs, url)[0] == 25
    # ten per batch at 5/s: 2 s before the second batch, 2 s before the third, 1 s before the empty receive
    assert sleeps == [2.0, 2.0, 1.0]


def test_a_message_the_source_refuses_stays_in_the_dlq_and_is_named(
    run: Run, sqs: Any, escalations: tuple[str, str, list[str]]
) -> None:
    # Given a DLQ message larger than its source now accepts
    url, dlq_url, _ = escalations
    sqs.send_message(QueueUrl=dlq_url, MessageBody="y" * 2000)
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"MaximumMessageSize": "1024"})
    # When everything is moved
    code, out, _ = run("escalations-dlq", "--apply", "--method", "manual")
    # Then the others moved, and the large one is reported and still in the DLQ, visible again
    assert code == 1
    assert "Moved 3 message(s)" in out
    assert "not moved, still in the DLQ:" in out
    assert "Message must be shorter than 1024 bytes" in out
    assert [m["Body"] for m in drain(sqs, dlq_url)] == ["y" * 2000]
    assert len(drain(sqs, url)) == 3


def test_an_entry_sqs_reports_throttled_is_sent_again_and_nothing_is_sent_twice(
    run: Run, session: boto3.Session, sqs: Any, sleeps: list[float], escalations: tuple[str, str, list[str]]
) -> None:
    # Given an SQS that throttles the first entry of the first batch and takes the others
    url, _, bodies = escalations
    calls: list[list[str]] = []
    beside = boto3.client("sqs", region_name=REGION)  # not the tool's session: no stand-in on it

    def throttle_first_entry_once(params: dict[str, Any], **_: Any) -> tuple[Any, dict[str, Any]] | None:
        request = json.loads(params["body"])
        calls.append([entry["Id"] for entry in request["Entries"]])
        if len(calls) > 1:
            return None  # on to moto
        first, *others = request["Entries"]
        taken = beside.send_message_batch(QueueUrl=request["QueueUrl"], Entries=others)
        failed = {"Id": first["Id"], "SenderFault": False, "Code": "ThrottlingException", "Message": "slow down"}
        answer = {"Successful": taken["Successful"], "Failed": [failed]}
        return SimpleNamespace(status_code=200, headers={}), answer

    session.events.register("before-call.sqs.SendMessageBatch", throttle_first_entry_once)
    # When the DLQ is moved by hand
    code, out, _ = run("escalations-dlq", "--apply", "--method", "manual")
    # Then only the throttled entry was sent again, after a backoff, and each message arrived once
    assert code == 0, out
    assert calls == [["0", "1", "2"], ["0"]]
    assert len(sleeps) == 1
    assert sorted(m["Body"] for m in drain(sqs, url)) == sorted(bodies)


def fifo_dlq(sqs: Any, bodies: dict[str, list[str]]) -> tuple[str, str, dict[str, str]]:
    """A FIFO queue and its DLQ holding ``bodies`` (group -> bodies, in order): (queue URL, DLQ URL, body -> id).

    The messages are put on the DLQ directly: moto's own dead-lettering of FIFO messages does not
    keep their order, and the order in the DLQ is what a redrive must keep.
    """
    url, dlq_url = queue_with_dlq(sqs, "orders", fifo=True)
    ids: dict[str, str] = {}
    for n in range(max(len(texts) for texts in bodies.values())):
        for group, texts in bodies.items():
            if n < len(texts):
                ids[texts[n]] = sqs.send_message(
                    QueueUrl=dlq_url,
                    MessageBody=texts[n],
                    MessageGroupId=group,
                    MessageDeduplicationId=f"{group}-{n}",
                    MessageAttributes={"event_type": ATTRIBUTES["event_type"]},
                )["MessageId"]
    return url, dlq_url, ids


def test_a_fifo_dlq_moves_by_hand_keeping_each_group_in_order(run: Run, sqs: Any) -> None:
    bodies = {"alice": [f"alice-{n}" for n in range(4)], "bob": ["bob-0", "bob-1"]}
    url, dlq_url, ids = fifo_dlq(sqs, bodies)
    code, out, _ = run("orders-dlq.fifo", "--apply")
    # Then by hand, every message in its group, in order, with a deduplication id of its own
    assert code == 0, out
    assert "moving by hand: SQS's message move task has not supported FIFO queues" in out
    moved = drain(sqs, url)
    for group, texts in bodies.items():
        assert [m["Body"] for m in moved if m["Attributes"]["MessageGroupId"] == group] == texts
    for message in moved:
        expected = hashlib.sha256(f"redrive:{ids[message['Body']]}".encode()).hexdigest()
        assert message["Attributes"]["MessageDeduplicationId"] == expected
        assert message["MessageAttributes"] == {"event_type": ATTRIBUTES["event_type"]}
    assert len(moved) == 6
    assert depth(sqs, dlq_url) == (0, 0)


def test_a_fifo_message_that_fails_holds_back_the_rest_of_its_group_only(run: Run, sqs: Any) -> None:
    # Given a FIFO DLQ where alice's second message is larger than the source now accepts
    large = "a" * 2000
    url, dlq_url, _ = fifo_dlq(sqs, {"alice": ["alice-0", large, "alice-2"], "bob": ["bob-0", "bob-1"]})
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"MaximumMessageSize": "1024"})
    # When it is redriven
    code, out, _ = run("orders-dlq.fifo", "--apply")
    # Then alice's message after the failed one stays behind it in the DLQ; bob's all move
    assert code == 1
    assert [m["Body"] for m in drain(sqs, url)] == ["alice-0", "bob-0", "bob-1"]
    assert "not moved, still in the DLQ:" in out
    assert out.count("waits behind") == 1
    assert [m["Body"] for m in drain(sqs, dlq_url)] == [large, "alice-2"]


def test_a_standard_dlq_is_redriven_by_an_sqs_message_move_task_where_there_is_one(
    run: Run, session: boto3.Session, sqs: Any, escalations: tuple[str, str, list[str]]
) -> None:
    # Given an SQS that has message move tasks (moto has none: a stand-in answers those two calls)
    url, dlq_url, _ = escalations
    started = _stand_in_move_tasks(session)
    # When the DLQ is redriven at 20 messages per second
    code, out, _ = run("escalations-dlq", "--apply", "--rate", "20")
    # Then SQS is asked to move them to the source, at that rate, and the task is reported
    assert code == 0, out
    assert started == [
        {"SourceArn": arn(sqs, dlq_url), "DestinationArn": arn(sqs, url), "MaxNumberOfMessagesPerSecond": 20}
    ]
    assert "Started an SQS message move task to escalations: task-1" in out
    assert "RUNNING: 0 of 3 moved" in out
    assert "--status" in out


def test_status_lists_the_recent_move_tasks(run: Run, session: boto3.Session, escalations: Any) -> None:
    _stand_in_move_tasks(session, running=True)
    code, out, _ = run("escalations-dlq", "--status")
    assert code == 0
    assert "RUNNING: 0 of 3 moved" in out
    assert "handle task-0" in out


def test_a_second_move_task_is_refused_while_one_runs(run: Run, session: boto3.Session, escalations: Any) -> None:
    _stand_in_move_tasks(session, running=True)
    code, _, err = run("escalations-dlq", "--apply")
    assert code == 2
    assert "a message move task is already running on escalations-dlq (task-0)" in err


def _stand_in_move_tasks(session: boto3.Session, *, running: bool = False) -> list[dict[str, Any]]:
    """Answer StartMessageMoveTask and ListMessageMoveTasks for this session's clients; the start requests."""
    started: list[dict[str, Any]] = []
    tasks: list[dict[str, Any]] = []
    if running:
        tasks.append({"TaskHandle": "task-0", "Status": "RUNNING", "StartedTimestamp": 1_700_000_000_000})

    def answer(parsed: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        return SimpleNamespace(status_code=200, headers={}), parsed

    def start(params: dict[str, Any], **_: Any) -> tuple[Any, dict[str, Any]]:
        started.append(json.loads(params["body"]))
        handle = f"task-{len(started)}"
        tasks.insert(0, {"TaskHandle": handle, "Status": "RUNNING", "StartedTimestamp": 1_700_000_000_000})
        return answer({"TaskHandle": handle})

    def list_tasks(params: dict[str, Any], **_: Any) -> tuple[Any, dict[str, Any]]:
        results = [
            {**task, "ApproximateNumberOfMessagesMoved": 0, "ApproximateNumberOfMessagesToMove": 3} for task in tasks
        ]
        return answer({"Results": results[: json.loads(params["body"]).get("MaxResults", 1)]})

    session.events.register("before-call.sqs.StartMessageMoveTask", start)
    session.events.register("before-call.sqs.ListMessageMoveTasks", list_tasks)
    return started


# --- Refusals -----------------------------------------------------------------------------------


def test_a_dlq_of_two_queues_is_refused_and_both_are_named_unless_to_picks_one(run: Run, sqs: Any) -> None:
    # Given one DLQ shared by two queues
    first, dlq_url = queue_with_dlq(sqs, "first")
    second, _ = queue_with_dlq(sqs, "second", dlq_url=dlq_url)
    send(sqs, first, 2)
    fail_into_dlq(sqs, first, dlq_url, 2)
    # When it is redriven without --to, it is refused
    code, _, err = run("first-dlq", "--apply")
    assert code == 2
    assert "is the dead-letter queue of 2 queues: first, second" in err
    assert depth(sqs, dlq_url) == (2, 0)
    # And a --to that is neither of them is refused too
    other = sqs.create_queue(QueueName="other")["QueueUrl"]
    code, _, err = run("first-dlq", "--apply", "--to", "other")
    assert code == 2
    assert "--to other is not a source of first-dlq; its sources are: first, second" in err
    # When --to picks one, everything goes there
    code, out, _ = run("first-dlq", "--apply", "--to", "second")
    assert code == 0, out
    assert depth(sqs, second)[0] == 2
    assert depth(sqs, first)[0] == depth(sqs, other)[0] == 0


def test_a_dlq_no_queue_feeds_is_refused_with_what_to_do_unless_to_names_a_queue(run: Run, sqs: Any) -> None:
    # Given a queue that is some SNS subscription's DLQ: no SQS queue's redrive policy names it
    dlq_url = sqs.create_queue(QueueName="notices-subscription-dlq")["QueueUrl"]
    send(sqs, dlq_url, 2)
    code, out, err = run("notices-subscription-dlq")
    assert code == 2
    assert "Sample: 2 message(s)" in out  # the dry run still shows what waits
    assert "has no source queue: no SQS queue's redrive policy names it" in err
    assert "give --to QUEUE" in err
    # When the operator names a queue, the messages go there
    target = sqs.create_queue(QueueName="notices")["QueueUrl"]
    code, out, _ = run("notices-subscription-dlq", "--apply", "--to", "notices")
    assert code == 0, out
    assert "moving by hand: a message move task only redrives a DLQ of SQS queues" in out
    assert [m["MessageAttributes"] for m in drain(sqs, target)] == [ATTRIBUTES, ATTRIBUTES]


def test_a_stream_consumers_dlq_is_refused_even_with_to_and_says_to_replay_from_the_stream(
    run: Run, session: boto3.Session, sqs: Any
) -> None:
    # Given the on-failure destination of a DynamoDB stream's event source mapping, holding a record
    dlq_url = sqs.create_queue(QueueName="router-failures")["QueueUrl"]
    _stream_consumer(session, on_failure=arn(sqs, dlq_url))
    sqs.send_message(QueueUrl=dlq_url, MessageBody=json.dumps(_stream_failure_record()))
    sqs.create_queue(QueueName="anywhere")
    for extra in ((), ("--apply", "--to", "anywhere")):
        code, out, err = run("router-failures", *extra)
        assert code == 2
        assert "is the on-failure destination of router reading arn:aws:dynamodb:" in err
        assert "not the stream records themselves" in err
        assert "read that range from the stream while it still holds it" in err
    assert "failure records of: router" in out
    assert depth(sqs, dlq_url) == (1, 0)


def test_failure_records_are_recognised_by_their_shape_and_never_moved(run: Run, sqs: Any) -> None:
    # Given a failure destination holding a stream failure record, a Lambda invocation record and a message
    dlq_url = sqs.create_queue(QueueName="mixed-failures")["QueueUrl"]
    invocation = {
        "version": "1.0",
        "requestContext": {
            "requestId": "r",
            "functionArn": "arn:aws:lambda:us-east-1:1:function:summary:$LATEST",
            "condition": "RetriesExhausted",
            "approximateInvokeCount": 3,
        },
        "requestPayload": {"session_id": "s-1"},
        "responseContext": {"statusCode": 200, "functionError": "Unhandled"},
    }
    for body in (_stream_failure_record(), invocation):
        sqs.send_message(QueueUrl=dlq_url, MessageBody=json.dumps(body))
    sqs.send_message(QueueUrl=dlq_url, MessageBody="plain")
    # When it is looked at, each is named and the advice for each kind is given
    code, out, err = run("mixed-failures", "--sample", "10")
    assert code == 2
    assert "a stream failure record" in out
    assert "a Lambda invocation record" in out
    assert "invoke that function again with the requestPayload" in err
    # When --to moves it, only the message moves; the records stay in the DLQ, named
    target = sqs.create_queue(QueueName="target")["QueueUrl"]
    code, out, _ = run("mixed-failures", "--apply", "--to", "target")
    assert code == 1
    assert [m["Body"] for m in drain(sqs, target)] == ["plain"]
    assert out.count("left in the DLQ:") == 2
    assert depth(sqs, dlq_url) == (2, 0)


def _stream_failure_record() -> dict[str, Any]:
    return {
        "requestContext": {
            "requestId": "r",
            "functionArn": "arn:aws:lambda:us-east-1:1:function:router",
            "condition": "RetryAttemptsExhausted",
            "approximateInvokeCount": 4,
        },
        "responseContext": {"statusCode": 200, "functionError": "Unhandled"},
        "version": "1.0",
        "DDBStreamBatchInfo": {"shardId": "shardId-1", "startSequenceNumber": "100", "endSequenceNumber": "120"},
    }


def _stream_consumer(session: boto3.Session, *, on_failure: str) -> None:
    """A function reading a DynamoDB stream, sending what it gives up on to ``on_failure``."""
    role = session.client("iam").create_role(RoleName="router", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    code = io.BytesIO()
    with zipfile.ZipFile(code, "w") as archive:
        archive.writestr("index.py", "def handler(event, context):\n    return None\n")
    lambda_ = session.client("lambda")
    lambda_.create_function(
        FunctionName="router",
        Runtime="python3.12",
        Role=role,
        Handler="index.handler",
        Code={"ZipFile": code.getvalue()},
    )
    table = session.client("dynamodb").create_table(
        TableName="sessions",
        KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    )
    lambda_.create_event_source_mapping(
        EventSourceArn=table["TableDescription"]["LatestStreamArn"],
        FunctionName="router",
        StartingPosition="TRIM_HORIZON",
        DestinationConfig={"OnFailure": {"Destination": on_failure}},
    )


def test_fifo_and_standard_queues_do_not_mix(run: Run, sqs: Any) -> None:
    sqs.create_queue(QueueName="loose-dlq")
    sqs.create_queue(QueueName="ordered.fifo", Attributes={"FifoQueue": "true"})
    code, _, err = run("loose-dlq", "--to", "ordered.fifo")
    assert code == 2
    assert "ordered.fifo is a FIFO queue and loose-dlq is not" in err


# --- The stage's dead-letter queues -------------------------------------------------------------


def test_stage_lists_its_dead_letter_queues_with_their_depth_and_destination(
    run: Run, session: boto3.Session, sqs: Any
) -> None:
    # Given the stage's stacks: a work queue with its DLQ, and a failure destination; and another stage's
    cloudformation = session.client("cloudformation")
    template = {
        "Resources": {
            "WorkDeadLetterQueue": {"Type": "AWS::SQS::Queue"},
            "Work": {
                "Type": "AWS::SQS::Queue",
                "Properties": {
                    "RedrivePolicy": {
                        "deadLetterTargetArn": {"Fn::GetAtt": ["WorkDeadLetterQueue", "Arn"]},
                        "maxReceiveCount": 1,
                    }
                },
            },
            "SummaryDeadLetterQueue": {"Type": "AWS::SQS::Queue"},
        }
    }
    cloudformation.create_stack(StackName="MangaAssist-dev-Events", TemplateBody=json.dumps(template))
    cloudformation.create_stack(StackName="MangaAssist-prod-Events", TemplateBody=json.dumps(template))
    urls = {u.rsplit("/", 1)[1]: u for u in sqs.list_queues()["QueueUrls"]}
    work = next(u for name, u in urls.items() if name.startswith("MangaAssist-dev-Events-Work-"))
    dlq = next(u for name, u in urls.items() if name.startswith("MangaAssist-dev-Events-WorkDeadLetterQueue-"))
    send(sqs, work, 2)
    fail_into_dlq(sqs, work, dlq, 2)
    # When the stage's DLQs are listed
    code, out, _ = run("--stage", "dev")
    # Then both of dev's DLQs are, with depth and destination; no work queue, nothing of prod
    assert code == 0, out
    assert "Dead-letter queues of stage dev (account 123456789012, us-east-1):" in out
    assert f"{dlq.rsplit('/', 1)[1]}  [Events]\n    2 waiting, 0 in flight; redrives to {work.rsplit('/', 1)[1]}" in out
    assert "MangaAssist-dev-Events-SummaryDeadLetterQueue-" in out
    assert "0 waiting, 0 in flight; no source queue" in out
    assert "MangaAssist-dev-Events-Work-" not in out.replace(f"redrives to {work.rsplit('/', 1)[1]}", "")
    assert "MangaAssist-prod" not in out


def test_a_stage_that_is_not_deployed_here_is_refused(run: Run) -> None:
    code, _, err = run("--stage", "dev")
    assert code == 2
    assert "no CloudFormation stacks MangaAssist-dev-* in us-east-1" in err


def test_an_unknown_stage_is_refused(run: Run) -> None:
    code, _, err = run("--stage", "qa")
    assert code == 2
    assert "unknown stage 'qa'" in err


# --- Bad usage and expected errors --------------------------------------------------------------


def test_a_queue_that_does_not_exist_is_a_clear_error(run: Run) -> None:
    code, out, err = run("nowhere-dlq")
    assert code == 2
    assert err == (
        "error: there is no queue nowhere-dlq in us-east-1 (for the account of these credentials): "
        "check the name, or give --region or an ARN\n"
    )
    assert out == ""


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ((), "give a dead-letter queue (name, URL or ARN) or --stage STAGE"),
        (("q", "--stage", "dev"), "give a dead-letter queue (name, URL or ARN) or --stage STAGE"),
        (("--stage", "dev", "--apply"), "--stage lists dead-letter queues"),
        (("q", "--max", "0"), "--max must be at least 1 (given 0)"),
        (("q", "--rate", "501"), "--rate must be 1..500 messages per second (given 501)"),
        (("q", "--method", "task", "--max", "5"), "--max needs moving by hand"),
        (("not a queue!",), "'not a queue!' is no queue name, URL"),
    ],
)
def test_bad_usage_exits_2_and_says_why(
    argv: tuple[str, ...], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        redrive.main(list(argv))
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_no_credentials_is_a_clear_error_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    code = redrive.main(["arn:aws:sqs:eu-west-1:123456789012:some-dlq"])
    assert code == 2
    assert capsys.readouterr().err == (
        "error: no AWS credentials: set AWS_PROFILE (or --profile), or sign in (aws sso login)\n"
    )


def test_no_region_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    assert redrive.main(["some-dlq"]) == 2
    assert capsys.readouterr().err == "error: no AWS region: give --region, a queue URL or ARN, or set AWS_REGION\n"


# --- The pure parts -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "name", "region", "account"),
    [
        ("orders-dlq", "orders-dlq", None, None),
        ("orders-dlq.fifo", "orders-dlq.fifo", None, None),
        ("arn:aws:sqs:eu-west-1:123456789012:orders-dlq", "orders-dlq", "eu-west-1", "123456789012"),
        ("https://sqs.eu-west-1.amazonaws.com/123456789012/orders-dlq", "orders-dlq", "eu-west-1", "123456789012"),
        ("https://eu-west-1.queue.amazonaws.com/123456789012/orders-dlq", "orders-dlq", "eu-west-1", "123456789012"),
        ("http://localhost:4566/000000000000/orders-dlq", "orders-dlq", None, "000000000000"),
    ],
)
def test_a_queue_is_named_by_name_url_or_arn(text: str, name: str, region: str | None, account: str | None) -> None:
    ref = redrive.parse_queue(text)
    assert (ref.name, ref.region, ref.account) == (name, region, account)


def test_eventbridge_delivery_failures_are_told_apart_by_their_attributes() -> None:
    origin = {"RULE_ARN": {"DataType": "String"}, "TARGET_ARN": {"DataType": "String"}}
    assert redrive.kind_of('{"detail-type": "x"}', origin) is redrive.Kind.EVENTBRIDGE
    assert redrive.kind_of('{"detail-type": "x"}', {}) is redrive.Kind.MESSAGE
    assert redrive.kind_of("not json {", {}) is redrive.Kind.MESSAGE


def test_the_queue_policy_names_the_sns_topics_and_rules_that_may_send() -> None:
    policy = {
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": "sns.amazonaws.com"},
                "Action": "sqs:SendMessage",
                "Condition": {"ArnEquals": {"aws:SourceArn": "arn:aws:sns:us-east-1:1:handoffs"}},
            },
            {
                "Effect": "Allow",
                "Principal": {"Service": "events.amazonaws.com"},
                "Action": "sqs:SendMessage",
                "Condition": {"ArnEquals": {"aws:SourceArn": "arn:aws:events:us-east-1:1:rule/cleanup"}},
            },
            {"Effect": "Deny", "Principal": {"AWS": "*"}, "Action": "sqs:*"},
        ]
    }
    queue = redrive.Queue("url", "arn:aws:sqs:us-east-1:1:q", {"Policy": json.dumps(policy)})
    assert queue.senders == [
        "SNS topic arn:aws:sns:us-east-1:1:handoffs",
        "EventBridge rule arn:aws:events:us-east-1:1:rule/cleanup",
    ]


def test_a_queue_is_a_dead_letter_queue_when_one_names_it_or_it_has_none_of_its_own() -> None:
    def queue(name: str, **attributes: str) -> tuple[str, redrive.Queue]:
        return "Events", redrive.Queue(f"url/{name}", f"arn:aws:sqs:us-east-1:1:{name}", attributes)

    redrive_to = json.dumps({"deadLetterTargetArn": "arn:aws:sqs:us-east-1:1:work-dlq", "maxReceiveCount": 3})
    found = redrive.dead_letter_queues(
        [
            queue("work", RedrivePolicy=redrive_to),
            queue("work-dlq"),
            queue("failures"),
            queue("not-a-dlq", RedriveAllowPolicy=json.dumps({"redrivePermission": "denyAll"})),
        ]
    )
    assert [(q.name, sources) for _, q, sources in found] == [("work-dlq", ["work"]), ("failures", [])]
