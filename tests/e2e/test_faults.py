"""Transient AWS faults on the chat and event paths of the embedded stage: nothing lost, no unbounded retry.

Every test injects one kind of fault (``embedded.faults``: throttle, 5xx, connect or read
timeout) into one dependency, drives the product through its public surface, and checks:

* the chat path: the customer's turn stays stored and the customer gets a reply or a clear error
  frame, never silence while the connection works;
* the event path: every table change reaches every consumer exactly once after de-duplication
  on ``event_id``, or its record lands in an alarmed DLQ;
* the retry bound: the calls the layer counted never exceed what the configuration allows (read
  from the template and the functions' settings, not written down here).

The stage is deployed once for the module; each test uses a new customer and session and clears
the layer's rules before and after.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from embedded import EmbeddedStage, embedded_stage
from embedded.cloudformation.intrinsics import Deployed
from embedded.faults import (
    CONNECT_TIMEOUT,
    KINDS,
    READ_TIMEOUT,
    SERVER_ERROR,
    THROTTLE,
    FaultLayer,
)
from embedded.runtime import function_environment
from embedded.services.apigateway_websocket import ConnectionRefused
from embedded.services.bedrock import echo_answer
from embedded.services.sns import Published, published
from embedded.synth import StageAssembly
from lambdas.shared import aws
from lambdas.shared.connections import DEFAULT_ATTEMPTS as POST_ATTEMPTS
from lambdas.shared.retry import DEFAULT_ATTEMPTS as POLICY_ATTEMPTS
from lambdas.shared.settings import settings
from local.story.base import token_subject
from local.story.chat import Chat, open_chat, sign_in, store_of, summary_items
from local.story.stage import story_config

pytestmark = pytest.mark.slow

MESSAGE = "lambdas.ws.message.handler"
ROUTER = "lambdas.events.router.handler"
SUMMARY = "lambdas.events.summary.handler"
#: Faults a retry can repair without the service having applied the call; a read timeout may
#: have been applied, and is tested apart where that matters.
UNAPPLIED = (THROTTLE, SERVER_ERROR, CONNECT_TIMEOUT)
#: One fault the service answers and one it never sees. botocore retries a 5xx like a throttle and
#: the functions handle both as a ClientError, so the consumer and workflow tests, each of which
#: drives a whole handoff, leave it out.
ANSWERED_OR_NOT = (THROTTLE, CONNECT_TIMEOUT)


@pytest.fixture(scope="module")
def faulted(synthesized: StageAssembly) -> Iterator[tuple[EmbeddedStage, FaultLayer]]:
    layer = FaultLayer()
    # The stage's clock stands still: no workflow timer (an agent's wait, the idle limit) fires
    # because the machine is slow; a test that wants time to pass moves the clock itself.
    with embedded_stage(synthesized.assembly_dir) as stage, layer.installed(), stage.clock.frozen():
        yield stage, layer


@pytest.fixture
def stage(faulted: tuple[EmbeddedStage, FaultLayer]) -> Iterator[EmbeddedStage]:
    stage, layer = faulted
    layer.clear()
    stage.bedrock.answer = echo_answer
    yield stage
    layer.clear()
    stage.bedrock.answer = echo_answer
    stage.settle(timeout=60, wait_executions=False)


@pytest.fixture
def layer(faulted: tuple[EmbeddedStage, FaultLayer]) -> FaultLayer:
    return faulted[1]


_customers = iter(range(10_000))


def new_chat(stage: EmbeddedStage) -> Chat:
    return open_chat(stage, f"fault-{next(_customers)}")


def setting(stage: EmbeddedStage, handler: str, name: str) -> Any:
    """A stage setting as ``handler``'s function reads it from its environment."""
    with function_environment(stage.function(handler).environment):
        return getattr(settings(), name)


def errors(frames: list[Any]) -> list[str]:
    return [str(f.get("code")) for f in frames if isinstance(f, dict) and f.get("type") == "error"]


def stored_turns(stage: EmbeddedStage, chat: Chat) -> list[tuple[int, str, str]]:
    session = store_of(stage).sessions.get_session(chat.session_id)
    assert session is not None
    turns = store_of(stage).turns.turns_between(chat.session_id, 1, max(1, session.turn_count))
    return [(t.turn_number, str(t.role), t.content) for t in turns]


def user_turns(stage: EmbeddedStage, chat: Chat) -> list[str]:
    return [content for _, role, content in stored_turns(stage, chat) if role == "user"]


def assistant_replies(frames: list[Any]) -> list[str]:
    finals = [f for f in frames if isinstance(f, dict) and f.get("type") == "final"]
    return [str(f["turn_number"]) for f in finals]


# ---------------------------------------------------------------------------------------- chat path


@pytest.mark.parametrize("kind", KINDS)
def test_bedrock_fault_once_is_retried_and_the_customer_gets_the_reply(
    stage: EmbeddedStage, layer: FaultLayer, kind: str
) -> None:
    # Given a connected customer and ConverseStream failing once
    chat = new_chat(stage)
    layer.inject("bedrock-runtime", kind, operations={"ConverseStream"}, times=1)
    # When the customer sends a message
    frames = chat.say("is volume 3 out?")
    # Then the reply arrives whole and both turns are stored once
    assert errors(frames) == []
    assert len(assistant_replies(frames)) == 1
    assert user_turns(stage, chat) == ["is volume 3 out?"]
    assert [c for _, r, c in stored_turns(stage, chat) if r == "assistant"][-1] == "You said: is volume 3 out?"
    # And the stream was opened twice: the failed attempt and its retry
    assert layer.count("bedrock-runtime", "ConverseStream", caller=MESSAGE) == 2


@pytest.mark.parametrize("kind", KINDS)
def test_bedrock_down_keeps_the_turn_and_says_so(stage: EmbeddedStage, layer: FaultLayer, kind: str) -> None:
    # Given ConverseStream failing on every call
    chat = new_chat(stage)
    layer.inject("bedrock-runtime", kind, operations={"ConverseStream"}, times=None)
    # When the customer sends a message
    frames = chat.say("anything like Frieren?")
    # Then the turn is stored and the customer is told the assistant cannot answer now
    assert errors(frames) == ["assistant_unavailable"]
    assert "saved" in frames[-1]["message"]
    assert user_turns(stage, chat) == ["anything like Frieren?"]
    # And the models were asked exactly as often as the stage allows: the primary once, then the
    # fallback model its BEDROCK_ATTEMPTS (every kind of fault here is one a fallback may mend)
    attempts = setting(stage, MESSAGE, "bedrock_attempts")
    assert setting(stage, MESSAGE, "bedrock_fallback_model_id") is not None
    assert layer.count("bedrock-runtime", "ConverseStream", caller=MESSAGE) == 1 + attempts


def reply_text(frames: list[Any]) -> str:
    """The reply as a client puts it together: a delta is appended where its offset says, a repeat dropped."""
    text = ""
    for frame in frames:
        if isinstance(frame, dict) and frame.get("type") == "delta":
            assert frame["offset"] <= len(text), f"a delta skipped text: {frame}"
            if frame["offset"] == len(text):
                text += frame["text"]
    return text


@pytest.mark.parametrize("kind", KINDS)
def test_post_to_connection_fault_below_the_bound_loses_no_frame(
    stage: EmbeddedStage, layer: FaultLayer, kind: str
) -> None:
    # Given PostToConnection failing for one fewer attempt than a frame gets
    chat = new_chat(stage)
    layer.inject("apigatewaymanagementapi", kind, operations={"PostToConnection"}, times=POST_ATTEMPTS - 1)
    # When the customer sends a message
    frames = chat.say("when is the next volume?")
    # Then the reply arrives whole, and both turns are stored once
    text = reply_text(frames)
    assert errors(frames) == []
    assert len(assistant_replies(frames)) == 1
    assert text == "You said: when is the next volume?"
    assert user_turns(stage, chat) == ["when is the next volume?"]
    # And no frame took more than its attempts (a post whose answer was lost reached the client:
    # it is among the frames, and its retry too)
    lost_answers = POST_ATTEMPTS - 1 if kind == READ_TIMEOUT else 0
    assert layer.count("apigatewaymanagementapi", "PostToConnection", caller=MESSAGE) == (
        len(frames) - lost_answers + POST_ATTEMPTS - 1
    )


@pytest.mark.parametrize("kind", KINDS)
def test_post_to_connection_down_keeps_the_turn_and_stops(stage: EmbeddedStage, layer: FaultLayer, kind: str) -> None:
    # Given PostToConnection failing on every call of the message function
    chat = new_chat(stage)
    layer.inject("apigatewaymanagementapi", kind, operations={"PostToConnection"}, callers={MESSAGE}, times=None)
    # When the customer sends a message
    chat.say("hello?")
    # Then the customer's turn is stored and no partial reply is
    assert [(r, c) for _, r, c in stored_turns(stage, chat)][-1] == ("user", "hello?")
    # And the function gave up after one frame's attempts: no retry without bound
    assert layer.count("apigatewaymanagementapi", "PostToConnection", caller=MESSAGE) == POST_ATTEMPTS


@pytest.mark.parametrize("kind", UNAPPLIED)
def test_dynamodb_fault_within_the_sdk_retries_is_invisible(stage: EmbeddedStage, layer: FaultLayer, kind: str) -> None:
    # Given every DynamoDB call of the message function failing twice (botocore makes 3 attempts)
    chat = new_chat(stage)
    layer.inject("dynamodb", kind, callers={MESSAGE}, times=aws.STANDARD_ATTEMPTS - 1)
    # When the customer sends a message
    frames = chat.say("any news?")
    # Then nothing shows: the reply arrives and both turns are stored
    assert errors(frames) == []
    assert len(assistant_replies(frames)) == 1
    assert [(r, c) for _, r, c in stored_turns(stage, chat)][-2:] == [
        ("user", "any news?"),
        ("assistant", "You said: any news?"),
    ]
    # And the SDK's retries did it, beneath the function: the faulted call was made three times
    assert len(layer.calls("dynamodb", caller=MESSAGE, faulted=True)) == aws.STANDARD_ATTEMPTS - 1


@pytest.mark.parametrize("kind", KINDS)
def test_dynamodb_down_before_the_turn_is_stored_says_not_saved(
    stage: EmbeddedStage, layer: FaultLayer, kind: str
) -> None:
    # Given DynamoDB failing on every call of the message function
    chat = new_chat(stage)
    layer.inject("dynamodb", kind, callers={MESSAGE}, times=None)
    # When the customer sends a message
    frames = chat.say("are you there?")
    # Then the customer is told it was not saved, to send it again
    assert errors(frames) == ["message_not_saved"]
    # And each call of the admission round trip was made exactly botocore's attempts, then no other
    calls = layer.calls("dynamodb", caller=MESSAGE)
    per_operation = {op: sum(a.operation == op for a in calls) for op in {a.operation for a in calls}}
    assert calls
    assert all(n % aws.STANDARD_ATTEMPTS == 0 for n in per_operation.values()), per_operation
    # the connection, two token buckets and the day's token budget
    assert len(calls) <= aws.STANDARD_ATTEMPTS * 4, per_operation


@pytest.mark.parametrize("kind", KINDS)
def test_dynamodb_down_after_the_turn_is_stored_keeps_it_and_says_so(
    stage: EmbeddedStage, layer: FaultLayer, kind: str
) -> None:
    # Given DynamoDB failing from the moment the model is asked (the customer's turn is stored by then)
    chat = new_chat(stage)

    def answer(request: dict[str, Any]) -> str:
        layer.inject("dynamodb", kind, callers={MESSAGE}, times=None)
        return echo_answer(request)

    stage.bedrock.answer = answer
    # When the customer sends a message
    frames = chat.say("recommend something")
    layer.clear()
    # Then the turn is stored, the reply is not, and the customer reads that the message is saved
    assert errors(frames) == ["internal_error"]
    assert "saved" in frames[-1]["message"]
    assert user_turns(stage, chat) == ["recommend something"]
    assert [r for _, r, _ in stored_turns(stage, chat)].count("assistant") == 1  # the welcome only


def test_read_timeout_on_the_turn_write_does_not_tell_a_stored_message_it_was_lost(
    stage: EmbeddedStage, layer: FaultLayer
) -> None:
    # Given the PutItem that stores the customer's turn applied, but its answer lost once
    chat = new_chat(stage)
    layer.inject("dynamodb", READ_TIMEOUT, operations={"PutItem"}, callers={MESSAGE}, times=1)
    # When the customer sends a message
    frames = chat.say("volume 4?")
    # Then the SDK's retry finds the turn stored: the customer gets the reply, and the turn is stored once
    assert errors(frames) == []
    assert user_turns(stage, chat) == ["volume 4?"]


# ---------------------------------------------------------------------------------------- event path


def router_mapping(stage: EmbeddedStage) -> Any:
    (mapping,) = stage.mappings_of(stage.function(ROUTER).name)
    return mapping


def dlq_alarmed(stage: EmbeddedStage, queue_arn: str) -> bool:
    """The template has an alarm on the queue's ApproximateNumberOfMessagesVisible.

    Alarms are passive on the embedded stage (CloudWatch is not emulated): read from the template.
    """
    queue = stage.only("AWS::SQS::Queue", where=lambda q: q.attributes["Arn"] == queue_arn)
    names = {queue.logical_id, queue_arn.rsplit(":", 1)[-1]}
    for deployed in stage.stacks:
        for alarm in deployed.of_type("AWS::CloudWatch::Alarm"):
            props = alarm.properties
            if props.get("MetricName") != "ApproximateNumberOfMessagesVisible":
                continue
            for dimension in props.get("Dimensions") or []:
                value = json.dumps(dimension.get("Value"))
                if dimension.get("Name") == "QueueName" and any(name in value for name in names):
                    return True
    return False


def change_events(stage: EmbeddedStage, session_id: str) -> dict[str, int]:
    """SessionStatusChanged events of ``session_id`` the bus delivered to a Lambda target: event_id -> count."""
    seen: dict[str, int] = {}
    for delivery in stage.events.deliveries:
        payload = delivery.payload if isinstance(delivery.payload, dict) else {}
        detail = payload.get("detail") or {}
        if isinstance(detail, dict) and detail.get("session_id") == session_id and "event_id" in detail:
            key = f"{delivery.target_arn}|{detail['event_id']}"
            seen[key] = seen.get(key, 0) + 1
    return seen


def trail_lines(stage: EmbeddedStage, variable: str, session_id: str) -> list[dict[str, Any]]:
    """Every line the delivery stream named by the router's ``variable`` wrote for ``session_id``."""
    from embedded.services.firehose import read_lines

    stream = stage.function(ROUTER).environment[variable]
    destination = stage.client("firehose").describe_delivery_stream(DeliveryStreamName=stream)[
        "DeliveryStreamDescription"
    ]["Destinations"][0]["ExtendedS3DestinationDescription"]
    bucket = destination["BucketARN"].split(":::", 1)[1]
    prefix = destination["Prefix"].split("!{", 1)[0]
    lines = [line for _, line in read_lines(stage.client("s3"), bucket, prefix)]
    return [line for line in lines if line.get("pk") == f"SESSION#{session_id}" or line.get("session_id") == session_id]


def chat_until_summary(stage: EmbeddedStage, chat: Chat) -> None:
    """Messages until the session holds a full summary window of turns (the welcome is turn 1)."""
    interval = setting(stage, ROUTER, "summary_interval")
    while True:
        session = store_of(stage).sessions.get_session(chat.session_id)
        assert session is not None
        if session.turn_count >= interval:
            return
        stage.clock.advance(4)  # stay under the connection's message rate
        chat.say(f"message {session.turn_count}")


#: The router's dependencies: (service, operation) of the call that carries a table change onward.
ROUTER_DEPENDENCIES = (
    ("firehose", "PutRecordBatch"),
    ("eventbridge", "PutEvents"),
    ("lambda", "Invoke"),
)


def created_turns(lines: list[dict[str, Any]]) -> int:
    """Distinct turn creations among trail lines: Firehose may repeat a line, never its event_id."""
    return len({line["event_id"] for line in lines if line["item_type"] == "turn" and line["change"] == "created"})


def expect_every_change_once(stage: EmbeddedStage, chat: Chat) -> None:
    """Analytics, audit, the bus's targets and the summary each hold every change of the session once."""
    turns = len(stored_turns(stage, chat))
    for variable in ("AUDIT_STREAM_NAME", "ANALYTICS_STREAM_NAME"):
        lines = trail_lines(stage, variable, chat.session_id)
        assert created_turns(lines) == turns, f"{variable}: {created_turns(lines)} turn creations for {turns} turns"
    events = change_events(stage, chat.session_id)
    assert events, "no status change reached the bus's targets"
    assert all(count == 1 for count in events.values()), events
    assert len(summary_items(stage, chat.session_id)) == 1


@pytest.mark.parametrize("kind", UNAPPLIED)
@pytest.mark.parametrize(("service", "operation"), ROUTER_DEPENDENCIES)
def test_router_dependency_fault_once_delivers_every_change_once(
    stage: EmbeddedStage, layer: FaultLayer, service: str, operation: str, kind: str
) -> None:
    # Given the router's calls of one dependency failing for all but the last attempt of its retry policy
    layer.inject(service, kind, operations={operation}, callers={ROUTER}, times=POLICY_ATTEMPTS - 1)
    # When a customer chats until a summary is due and the stream is delivered
    chat = new_chat(stage)
    chat_until_summary(stage, chat)
    stage.settle(timeout=60, wait_executions=False)
    # Then the fault was met and every change reached every consumer once
    assert layer.calls(service, operation, caller=ROUTER, faulted=True)
    expect_every_change_once(stage, chat)
    assert not layer.calls(service, operation, caller=ROUTER, faulted=None) or all(
        d.outcome.ok for d in stage.streams.deliveries[-3:]
    )


def handoff_opened_and_closed(stage: EmbeddedStage) -> None:
    """A customer handed to an agent, the handoff closed: the changes the router publishes to the handoff topic."""
    close_handoff(stage, hand_over(stage, agent_online=True))


def summary_due(stage: EmbeddedStage) -> None:
    """A session starts and chats until a summary is due: a status change, turns, a summary."""
    chat_until_summary(stage, new_chat(stage))


#: Every router dependency, with a scenario whose changes the router passes on through it.
ROUTER_SCENARIOS: tuple[tuple[str, str, Callable[[EmbeddedStage], None]], ...] = (
    *((service, operation, summary_due) for service, operation in ROUTER_DEPENDENCIES),
    ("sns", "PublishBatch", handoff_opened_and_closed),
)


@pytest.mark.parametrize(
    ("service", "operation", "scenario"), ROUTER_SCENARIOS, ids=[f"{s}-{o}" for s, o, _ in ROUTER_SCENARIOS]
)
def test_router_dependency_down_lands_in_the_alarmed_dlq_within_the_retry_bound(
    stage: EmbeddedStage,
    layer: FaultLayer,
    service: str,
    operation: str,
    scenario: Callable[[EmbeddedStage], None],
) -> None:
    # Given the router's calls of one dependency throttled on every attempt
    mapping = router_mapping(stage)
    assert mapping.on_failure_arn is not None
    assert dlq_alarmed(stage, mapping.on_failure_arn)
    dlq = stage.only("AWS::SQS::Queue", where=lambda q: q.attributes["Arn"] == mapping.on_failure_arn)
    stage.queue_messages(dlq)  # start from an empty DLQ
    before, discarded = len(stage.streams.deliveries), len(stage.streams.discarded)
    rule = layer.inject(service, THROTTLE, operations={operation}, callers={ROUTER}, times=None)
    # When the scenario makes changes the router passes on through that dependency
    scenario(stage)
    stage.settle(timeout=60, wait_executions=False)
    # Then the records whose change could not be passed on are in the DLQ, which has an alarm
    records = [json.loads(m["Body"]) for m in stage.queue_messages(dlq)]
    given_up = stage.streams.discarded[discarded:]
    assert given_up, f"no record was given up although {rule.injected} {operation} calls failed"
    assert sum(r["DDBStreamBatchInfo"]["batchSize"] for r in records) == len(given_up)
    # And the retries were bounded: attempts per chunk times invocations, invocations by the mapping
    invocations = [d for d in stage.streams.deliveries[before:] if d.mapping == mapping.logical_id]
    assert mapping.maximum_retry_attempts is not None
    records_seen = {i for d in invocations for i in d.item_ids}
    # bisecting halves a batch until single records fail alone: at most 2n-1 batches per pass
    bound = (2 * len(records_seen) - 1) * (mapping.maximum_retry_attempts + 1)
    assert len(invocations) <= bound
    failed_calls = layer.calls(service, operation, caller=ROUTER, faulted=True)
    assert len(failed_calls) == rule.injected <= len(invocations) * POLICY_ATTEMPTS * 2
    print(
        f"{service} {operation} down: {len(invocations)} router invocations (bound {bound}), "
        f"{len(failed_calls)} failed calls, {len(given_up)} records in the DLQ"
    )
    layer.clear()


# ---------------------------------------------------------------------------------------- handoff topic (SNS)

NOTIFIER = "lambdas.events.customer_notifier.handler"
#: botocore's standard-mode attempts for DynamoDB on a client given no retry config (Powertools' idempotency store).
IDEMPOTENCY_STORE_ATTEMPTS = 4
AGENT = "lambdas.api.agent.handler"
CONNECT = "lambdas.ws.connect.handler"
CLOSED = {"resolution": "answered by the fault tests", "outcome": "resume"}


@dataclass
class HandedOver:
    """A customer's session handed to an agent of its own skill (the handoff's reason)."""

    chat: Chat
    reason: str
    agent: str  # the agent's ID token
    execution_arn: str

    def agent_auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.agent}"}


def admin_auth(stage: EmbeddedStage) -> dict[str, str]:
    return {"Authorization": f"Bearer {sign_in(stage, 'fault-admin', 'admin')}"}


def current_status(stage: EmbeddedStage, chat: Chat) -> str | None:
    handoff = store_of(stage).handoffs.current_handoff(chat.session_id)
    return None if handoff is None else str(handoff.status)


def hand_over(stage: EmbeddedStage, *, agent_online: bool, until: str | None = None) -> HandedOver:
    """A new customer asks for a human; a new agent, the only one with the handoff's skill, is registered.

    With ``agent_online`` the agent is available first and the workflow assigns it; otherwise the
    handoff waits in the queue (``queued``) for an accept. Each call has its own skill, so agents
    left online by other tests never take it. ``until`` names another status to wait for.
    """
    n = next(_customers)
    reason = f"faults{n}"
    chat = open_chat(stage, f"fault-{n}")
    agent = sign_in(stage, f"fault-agent-{n}", "agent")
    body = {"agent_id": token_subject(agent), "display_name": f"fault agent {n}", "skills": [reason]}
    response = stage.rest.request("POST", "/admin/agents", headers=admin_auth(stage), body=body)
    assert response.status == 201, response.body
    handed = HandedOver(chat, reason, agent, "")
    if agent_online:
        set_presence(stage, handed, "available")
    response = stage.rest.request(
        "POST", f"/sessions/{chat.session_id}/handoff", headers=chat.auth(), body={"reason": reason}
    )
    assert response.status == 202, response.body
    handed.execution_arn = str(response.json()["execution_arn"])
    wanted = until or ("assigned" if agent_online else "queued")
    stage.settle(until=lambda: current_status(stage, chat) == wanted, timeout=30)
    stage.settle(timeout=30, wait_executions=False)
    return handed


def set_presence(stage: EmbeddedStage, handed: HandedOver, status: str) -> None:
    response = stage.rest.request("POST", "/agents/me/presence", headers=handed.agent_auth(), body={"status": status})
    assert response.status == 200, response.body


def close_handoff(stage: EmbeddedStage, handed: HandedOver) -> None:
    """An admin closes the handoff (resume): the router publishes ``completed``, the workflow ends."""
    response = stage.rest.request(
        "POST", f"/handoffs/{handed.chat.session_id}/close", headers=admin_auth(stage), body=CLOSED
    )
    assert response.status == 200, response.body


def handoff_topic(stage: EmbeddedStage) -> Deployed:
    arn = stage.function(ROUTER).environment["HANDOFF_TOPIC_ARN"]
    return stage.only("AWS::SNS::Topic", where=lambda t: t.ref == arn)


def router_messages(stage: EmbeddedStage, session_id: str) -> list[tuple[dict[str, Any], Published]]:
    """What the router published to the handoff topic for ``session_id`` (its messages carry event_id)."""
    found = []
    for message in published(stage.cloud, handoff_topic(stage), stage.all("AWS::SNS::Subscription")):
        with contextlib.suppress(ValueError):
            body = json.loads(message.message)
            if isinstance(body, dict) and body.get("session_id") == session_id and "event_id" in body:
                found.append((body, message))
    return found


def received_event_ids(stage: EmbeddedStage, queue_arn: str) -> list[str]:
    """The event_id of every message the queue's consumer received (first receipts only)."""
    ids = []
    for raw in stage.queues.received.get(queue_arn, []):
        with contextlib.suppress(ValueError):
            body = json.loads(raw)
            if isinstance(body, dict) and "Message" in body and "event_id" not in body:
                body = json.loads(body["Message"])  # an envelope (no raw message delivery)
            if isinstance(body, dict) and body.get("event_id"):
                ids.append(str(body["event_id"]))
    return ids


def closed_frames(chat: Chat) -> list[Any]:
    return [f for f in chat.frames() if isinstance(f, dict) and f.get("type") == "handoff_closed"]


@pytest.mark.parametrize("kind", UNAPPLIED)
def test_sns_fault_below_the_bound_delivers_every_handoff_event_once_per_queue(
    stage: EmbeddedStage, layer: FaultLayer, kind: str
) -> None:
    # Given the router's PublishBatch failing for all but the last attempt of its retry policy
    rule = layer.inject("sns", kind, operations={"PublishBatch"}, callers={ROUTER}, times=POLICY_ATTEMPTS - 1)
    # When a customer is handed to an agent and an admin closes the handoff
    handed = hand_over(stage, agent_online=True)
    close_handoff(stage, handed)
    chat = handed.chat
    stage.settle(until=lambda: bool(closed_frames(chat)), timeout=30, wait_executions=False)
    stage.settle(timeout=30, wait_executions=False)
    # Then the fault was met, and the router published each change once: the new handoff and its close
    assert rule.injected == POLICY_ATTEMPTS - 1
    messages = router_messages(stage, chat.session_id)
    kinds = sorted(body["event_type"] for body, _ in messages)
    assert kinds == ["completed", "handoff"], kinds
    # And each reached every queue its subscription's filter selects, once (by event_id)
    for body, message in messages:
        assert message.expected_queues, f"{body['event_type']} selects no queue"
        for queue_arn in message.expected_queues:
            assert received_event_ids(stage, queue_arn).count(body["event_id"]) == 1, (body, queue_arn)
    # And the customer was told once that the handoff closed
    assert len(closed_frames(chat)) == 1
    # And no message was published twice: each successful PublishBatch carried messages not sent before
    assert len(layer.calls("sns", "PublishBatch", caller=ROUTER, faulted=False)) <= len(messages)


def consumer_queue(stage: EmbeddedStage, handler: str) -> tuple[Any, Deployed]:
    """The SQS mapping of ``handler``'s function and the queue it reads."""
    (mapping,) = [m for m in stage.mappings_of(stage.function(handler).name) if ":sqs:" in m.event_source_arn]
    queue = stage.only("AWS::SQS::Queue", where=lambda q: q.attributes["Arn"] == mapping.event_source_arn)
    return mapping, queue


def redrive_of(stage: EmbeddedStage, queue: Deployed) -> tuple[Deployed, str, int]:
    """The queue's DLQ (as deployed), its ARN, and maxReceiveCount (the template's redrive policy)."""
    max_receives = int(queue.properties["RedrivePolicy"]["maxReceiveCount"])
    attributes = stage.client("sqs").get_queue_attributes(QueueUrl=queue.ref, AttributeNames=["RedrivePolicy"])
    dlq_arn = str(json.loads(attributes["Attributes"]["RedrivePolicy"])["deadLetterTargetArn"])
    dlq = stage.only("AWS::SQS::Queue", where=lambda q: q.attributes["Arn"] == dlq_arn)
    return dlq, dlq_arn, max_receives


@pytest.mark.parametrize("kind", ANSWERED_OR_NOT)
def test_notifier_down_redrives_the_notice_to_its_alarmed_dlq_after_max_receives(
    stage: EmbeddedStage, layer: FaultLayer, kind: str
) -> None:
    # Given a handoff assigned to an agent, and the customer notifier's DynamoDB calls failing on every attempt
    handed = hand_over(stage, agent_online=True)
    mapping, queue = consumer_queue(stage, NOTIFIER)
    dlq, dlq_arn, max_receives = redrive_of(stage, queue)
    stage.queue_messages(dlq)  # start from an empty DLQ
    before = len(stage.queues.deliveries)
    layer.inject("dynamodb", kind, callers={NOTIFIER}, times=None)
    # When an admin closes the handoff (the router publishes "completed", the notifier's queue gets it)
    close_handoff(stage, handed)
    stage.settle(timeout=60, wait_executions=False)
    # Then the notice is in the queue's DLQ, which has an alarm, and the customer was not told twice or half
    notices = [json.loads(m["Body"]) for m in stage.queue_messages(dlq)]
    mine = [n for n in notices if n.get("session_id") == handed.chat.session_id]
    assert [n["event_type"] for n in mine] == ["completed"], notices
    assert dlq_alarmed(stage, dlq_arn)
    assert closed_frames(handed.chat) == []
    # And the function got it exactly maxReceiveCount times (the redrive policy's, from the template)
    deliveries = [d for d in stage.queues.deliveries[before:] if d.mapping == mapping.logical_id]
    assert len(deliveries) == max_receives, [d.item_ids for d in deliveries]
    assert all(not d.outcome.ok or d.outcome.failed_item_ids() for d in deliveries)
    # And each delivery stopped at the idempotency record (nothing was posted, mailed or recorded) after one
    # call's attempts: that record is written by Powertools' own client, built without a retry config, so
    # botocore's standard-mode default for DynamoDB applies (4 attempts, where the functions' clients make 3)
    failed = layer.calls("dynamodb", caller=NOTIFIER, faulted=True)
    assert {a.operation for a in failed} == {"PutItem"}
    assert len(failed) == max_receives * IDEMPOTENCY_STORE_ATTEMPTS, len(failed)
    print(f"notifier {kind}: {len(deliveries)} deliveries (maxReceiveCount {max_receives}), {len(failed)} failed calls")


# ---------------------------------------------------------------------------------------- workflows (Step Functions)


@pytest.mark.parametrize("kind", ANSWERED_OR_NOT)
def test_start_execution_fault_below_the_bound_still_greets_the_customer(
    stage: EmbeddedStage, layer: FaultLayer, kind: str
) -> None:
    # Given $connect's StartExecution of the onboarding workflow failing for all but botocore's last attempt
    layer.inject("sfn", kind, operations={"StartExecution"}, callers={CONNECT}, times=aws.STANDARD_ATTEMPTS - 1)
    # When a customer connects (new_chat waits for the welcome the workflow posts)
    chat = new_chat(stage)
    # Then the workflow ran to its end: the session is open and the welcome was stored
    assert [r for _, r, _ in stored_turns(stage, chat)] == ["assistant"]
    # And the SDK's retries did it: one call, three attempts
    assert layer.count("sfn", "StartExecution", caller=CONNECT) == aws.STANDARD_ATTEMPTS


@pytest.mark.parametrize("kind", ANSWERED_OR_NOT)
def test_start_execution_down_refuses_the_connection_and_frees_its_slot(
    stage: EmbeddedStage, layer: FaultLayer, kind: str
) -> None:
    # Given a connected customer, and StartExecution failing on every attempt
    chat = new_chat(stage)
    cap = setting(stage, CONNECT, "chat_max_connections_per_customer")
    layer.inject("sfn", kind, operations={"StartExecution"}, callers={CONNECT}, times=None)
    query = {"token": chat.token, "session_id": chat.session_id}
    # When the customer tries to open more connections than its cap allows
    refused = []
    for _ in range(cap):
        with pytest.raises(ConnectionRefused) as caught:
            stage.websocket.connect(query=query)
        refused.append(caught.value.status)
    # Then each was refused with a 500 the client retries (not a 429: no slot was kept for a failed connect)
    assert refused == [500] * cap
    # And each connect made exactly botocore's attempts
    assert len(layer.calls("sfn", "StartExecution", caller=CONNECT, faulted=True)) == cap * aws.STANDARD_ATTEMPTS
    # And once Step Functions answers again, the customer connects and is greeted on the new connection
    layer.clear()
    connection_id = stage.websocket.connect(query=query)
    stage.settle(until=lambda: bool(stage.websocket.frames(connection_id)), timeout=30)
    assert stage.websocket.frames(connection_id)[0].get("type") == "welcome"


def accept(stage: EmbeddedStage, handed: HandedOver) -> Any:
    return stage.rest.request("POST", f"/handoffs/{handed.chat.session_id}/accept", headers=handed.agent_auth())


def agent_reply(stage: EmbeddedStage, handed: HandedOver, text: str) -> Any:
    return stage.rest.request(
        "POST", f"/handoffs/{handed.chat.session_id}/messages", headers=handed.agent_auth(), body={"text": text}
    )


def waiting_for(stage: EmbeddedStage, handed: HandedOver) -> str | None:
    handoff = store_of(stage).handoffs.current_handoff(handed.chat.session_id)
    return None if handoff is None else store_of(stage).handoffs.waiting_for(handed.chat.session_id, handoff.handoff_id)


def agent_turns(stage: EmbeddedStage, chat: Chat) -> list[str]:
    return [content for _, role, content in stored_turns(stage, chat) if role == "agent"]


def assigned_to(stage: EmbeddedStage, handed: HandedOver) -> None:
    """Settle until the handoff is assigned to ``handed``'s agent and MonitorHandoff waits for its reply."""
    stage.settle(until=lambda: waiting_for(stage, handed) == "reply", timeout=30)
    handoff = store_of(stage).handoffs.current_handoff(handed.chat.session_id)
    assert handoff is not None
    assert (str(handoff.status), handoff.agent_id) == ("assigned", token_subject(handed.agent))


@pytest.mark.parametrize("kind", ANSWERED_OR_NOT)
def test_send_task_success_fault_below_the_bound_on_accept_and_first_reply_runs_the_workflow_to_its_end(
    stage: EmbeddedStage, layer: FaultLayer, kind: str
) -> None:
    # Given a handoff waiting for an agent, and SendTaskSuccess failing for all but botocore's last attempt
    handed = hand_over(stage, agent_online=False)
    set_presence(stage, handed, "available")
    layer.inject("sfn", kind, operations={"SendTaskSuccess"}, callers={AGENT}, times=aws.STANDARD_ATTEMPTS - 1)
    # When the agent accepts
    response = accept(stage, handed)
    # Then the accept succeeds and the workflow goes on: the handoff is assigned to that agent
    assert response.status == 200, response.body
    assigned_to(stage, handed)
    assert layer.count("sfn", "SendTaskSuccess", caller=AGENT) == aws.STANDARD_ATTEMPTS
    # When the agent's first reply meets the same fault
    layer.inject("sfn", kind, operations={"SendTaskSuccess"}, callers={AGENT}, times=aws.STANDARD_ATTEMPTS - 1)
    response = agent_reply(stage, handed, "Hello, I am here.")
    # Then the reply is stored once and the workflow, told by the SDK's last attempt, watches the agent's next message
    assert response.status == 201, response.body
    assert agent_turns(stage, handed.chat) == ["Hello, I am here."]
    stage.settle(until=lambda: "WatchAgent" in stage.states_entered(handed.execution_arn), timeout=30)
    assert layer.count("sfn", "SendTaskSuccess", caller=AGENT) == 2 * aws.STANDARD_ATTEMPTS
    close_handoff(stage, handed)
    assert stage.wait_execution(handed.execution_arn, timeout=30)["status"] == "SUCCEEDED"


@pytest.mark.parametrize("kind", ANSWERED_OR_NOT)
def test_send_task_success_down_on_accept_and_first_reply_loses_neither_the_handoff_nor_the_reply(
    stage: EmbeddedStage, layer: FaultLayer, kind: str
) -> None:
    # Given a handoff waiting for an agent, and SendTaskSuccess failing on every attempt
    handed = hand_over(stage, agent_online=False)
    set_presence(stage, handed, "available")
    layer.inject("sfn", kind, operations={"SendTaskSuccess"}, callers={AGENT}, times=None)
    # When the agent accepts
    response = accept(stage, handed)
    # Then the agent gets a 500 with a JSON error, after exactly botocore's attempts
    assert response.status == 500, response.body
    assert set(response.json()["error"]) >= {"code", "message"}
    assert layer.count("sfn", "SendTaskSuccess", caller=AGENT) == aws.STANDARD_ATTEMPTS
    # And nothing is half done: the agent is not left busy, the handoff still waits for an agent
    agent = store_of(stage).agents.get_agent(token_subject(handed.agent))
    assert agent is not None
    assert str(agent.status) == "available"
    assert current_status(stage, handed.chat) == "queued"
    assert waiting_for(stage, handed) == "agent"
    # And once Step Functions answers again, the same accept succeeds and the workflow assigns the handoff
    layer.clear()
    again = accept(stage, handed)
    assert again.status == 200, again.body
    assigned_to(stage, handed)
    # When Step Functions fails every attempt again, on the agent's first reply
    layer.inject("sfn", kind, operations={"SendTaskSuccess"}, callers={AGENT}, times=None)
    before = len(handed.chat.frames())
    response = agent_reply(stage, handed, "Hello, I am here.")
    # Then the reply is stored once and reached the customer, and the agent is not asked to send it again
    assert response.status == 201, response.body
    assert agent_turns(stage, handed.chat) == ["Hello, I am here."]
    assert [f.get("role") for f in handed.chat.frames()[before:] if f.get("type") == "message"] == ["agent"]
    assert len(layer.calls("sfn", "SendTaskSuccess", caller=AGENT, faulted=True)) == aws.STANDARD_ATTEMPTS
    # And the workflow's token is kept: the next reply, once Step Functions answers, moves the workflow on
    assert waiting_for(stage, handed) == "reply"
    assert "WatchAgent" not in stage.states_entered(handed.execution_arn)
    layer.clear()
    assert agent_reply(stage, handed, "Volume 3 ships on the 14th.").status == 201
    stage.settle(until=lambda: "WatchAgent" in stage.states_entered(handed.execution_arn), timeout=30)
    close_handoff(stage, handed)
    assert stage.wait_execution(handed.execution_arn, timeout=30)["status"] == "SUCCEEDED"


DISCONNECT = "lambdas.ws.disconnect.handler"


def customer_leaves_a_waiting_handoff(
    stage: EmbeddedStage, layer: FaultLayer, kind: str, times: int | None
) -> HandedOver:
    """A handoff waits for an agent; with SendTaskFailure faulted, the customer disconnects."""
    handed = hand_over(stage, agent_online=False)
    stage.settle(until=lambda: waiting_for(stage, handed) == "agent", timeout=30)
    layer.inject("sfn", kind, operations={"SendTaskFailure"}, callers={DISCONNECT}, times=times)
    stage.websocket.disconnect(handed.chat.connection_id)
    return handed


def expect_the_customer_left(stage: EmbeddedStage, handed: HandedOver) -> None:
    """The table says the customer left: handoff failed, session disconnected, connection record gone."""
    store = store_of(stage)
    handoff = store.handoffs.current_handoff(handed.chat.session_id)
    session = store.sessions.get_session(handed.chat.session_id)
    assert handoff is not None
    assert str(handoff.status) == "failed", handoff
    assert session is not None
    assert str(session.status) == "disconnected", session
    assert store.connections.get_connection(handed.chat.connection_id) is None


@pytest.mark.parametrize("kind", ANSWERED_OR_NOT)
def test_send_task_failure_fault_below_the_bound_stops_the_wait_when_the_customer_leaves(
    stage: EmbeddedStage, layer: FaultLayer, kind: str
) -> None:
    # Given a customer whose handoff waits for an agent leaves, SendTaskFailure failing for all but the last attempt
    handed = customer_leaves_a_waiting_handoff(stage, layer, kind, aws.STANDARD_ATTEMPTS - 1)
    # Then the table says the customer left, and the workflow, told by the SDK's last attempt, ends failed at once
    expect_the_customer_left(stage, handed)
    assert layer.count("sfn", "SendTaskFailure", caller=DISCONNECT) == aws.STANDARD_ATTEMPTS
    assert stage.wait_execution(handed.execution_arn, timeout=30)["status"] == "FAILED"


#: ``$disconnect`` tolerates a refused SendTaskFailure (a ClientError, unit-tested with its codes);
#: a connect timeout escaped before, so the down case drives that one (the wait's timeout costs 10 s).
@pytest.mark.parametrize("kind", [CONNECT_TIMEOUT])
def test_send_task_failure_down_still_ends_the_handoff_when_the_customer_leaves(
    stage: EmbeddedStage, layer: FaultLayer, kind: str
) -> None:
    # Given a customer whose handoff waits for an agent leaves, SendTaskFailure failing on every attempt
    handed = customer_leaves_a_waiting_handoff(stage, layer, kind, None)
    # Then the table says the customer left (the connection record too), after exactly botocore's attempts
    expect_the_customer_left(stage, handed)
    assert layer.count("sfn", "SendTaskFailure", caller=DISCONNECT) == aws.STANDARD_ATTEMPTS
    # And the workflow is not left waiting: once its wait times out, it finds the handoff over and ends failed
    layer.clear()
    stage.clock.advance(story_config().handoff_agent_wait_seconds + 1)
    assert stage.wait_execution(handed.execution_arn, timeout=60)["status"] == "FAILED"


# ---------------------------------------------------------------------------------------- SNS from the handoff workflow

TRANSFER = "lambdas.orchestration.handoff.transfer_context"
ASSIGNMENT = "lambdas.orchestration.handoff.queue_consumer"


def notifications(chat: Chat) -> list[str]:
    return [str(f.get("event_type")) for f in chat.frames() if isinstance(f, dict) and f.get("type") == "notification"]


@pytest.mark.parametrize("kind", ANSWERED_OR_NOT)
def test_context_publish_fault_below_the_bound_reaches_the_agent_once(
    stage: EmbeddedStage, layer: FaultLayer, kind: str
) -> None:
    # Given the workflow's TransferConversationContext Publish failing for all but botocore's last attempt
    layer.inject("sns", kind, operations={"Publish"}, callers={TRANSFER}, times=aws.STANDARD_ATTEMPTS - 1)
    # When a customer is handed to an agent
    handed = hand_over(stage, agent_online=True)
    stage.settle(until=lambda: waiting_for(stage, handed) == "reply", timeout=30)
    # Then the workflow went on to wait for the agent's reply, and the context was published once
    contexts = [
        m
        for m in published(stage.cloud, handoff_topic(stage), stage.all("AWS::SNS::Subscription"))
        if m.event_type == "handoff_context" and handed.chat.session_id in m.message
    ]
    assert len(contexts) == 1
    assert layer.count("sns", "Publish", caller=TRANSFER) == aws.STANDARD_ATTEMPTS
    close_handoff(stage, handed)


def test_context_publish_down_fails_the_handoff_cleanly(stage: EmbeddedStage, layer: FaultLayer) -> None:
    # Given the workflow's TransferConversationContext Publish throttled on every attempt
    layer.inject("sns", THROTTLE, operations={"Publish"}, callers={TRANSFER}, times=None)
    # When a customer is handed to an (available) agent
    handed = hand_over(stage, agent_online=True, until="failed")
    done = stage.wait_execution(handed.execution_arn, timeout=30)
    stage.settle(timeout=30, wait_executions=False)
    # Then the execution ends failed, and nothing is left half done: the handoff is failed, the agent
    # available, the session the assistant's again, and the customer told (started, then failed)
    assert done["status"] == "FAILED"
    chat = handed.chat
    assert current_status(stage, chat) == "failed"
    agent = store_of(stage).agents.get_agent(token_subject(handed.agent))
    assert agent is not None
    assert str(agent.status) == "available"
    session = store_of(stage).sessions.get_session(chat.session_id)
    assert session is not None
    assert str(session.status) == "active"
    assert notifications(chat) == ["handoff_started", "handoff_failed"]
    # And the function gave up after one call's attempts (the workflow does not retry a function's own error)
    assert layer.count("sns", "Publish", caller=TRANSFER) == aws.STANDARD_ATTEMPTS


def test_waiting_publish_down_redrives_the_assignment_to_its_alarmed_dlq_and_keeps_the_handoff_acceptable(
    stage: EmbeddedStage, layer: FaultLayer
) -> None:
    # Given the assignment queue's consumer unable to publish handoff_waiting (throttled on every attempt)
    mapping, queue = consumer_queue(stage, ASSIGNMENT)
    dlq, dlq_arn, max_receives = redrive_of(stage, queue)
    stage.queue_messages(dlq)  # start from an empty DLQ
    before = len(stage.queues.deliveries)
    layer.inject("sns", THROTTLE, operations={"Publish"}, callers={ASSIGNMENT}, times=None)
    # When a customer asks for a human and no agent is online
    handed = hand_over(stage, agent_online=False)
    # Then the assignment message was delivered exactly maxReceiveCount times, then moved to the DLQ, which alarms
    messages = [json.loads(m["Body"]) for m in stage.queue_messages(dlq)]
    assert [m["session_id"] for m in messages] == [handed.chat.session_id], messages
    assert dlq_alarmed(stage, dlq_arn)
    deliveries = [d for d in stage.queues.deliveries[before:] if d.mapping == mapping.logical_id]
    assert len(deliveries) == max_receives
    assert layer.count("sns", "Publish", caller=ASSIGNMENT) == max_receives * aws.STANDARD_ATTEMPTS
    # And the handoff is not lost: it waits with its token, and an agent's accept assigns it
    layer.clear()
    set_presence(stage, handed, "available")
    assert accept(stage, handed).status == 200
    stage.settle(until=lambda: current_status(stage, handed.chat) == "assigned", timeout=30)
    close_handoff(stage, handed)
