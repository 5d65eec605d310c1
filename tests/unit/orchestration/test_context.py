"""The handoff context fits SNS's 256 KiB message limit and the agent reads the newest turns whole."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import boto3
import pytest

from embedded.events import lambda_context
from lambdas.orchestration import context as handoff_context
from lambdas.orchestration import handoff
from lambdas.shared.records import Role
from lambdas.shared.store import DynamoSessionStore

SNS_LIMIT = 256 * 1024
EMOJI = "\U0001f600"  # four bytes in UTF-8, twelve as a JSON \\uXXXX pair


@pytest.fixture
def agent_inbox(ddb_client: Any, monkeypatch: pytest.MonkeyPatch) -> Callable[[], list[str]]:
    """The agent topic, delivered raw to a queue as the agent's consumer reads it."""
    sns = boto3.client("sns", region_name="us-east-1")
    sqs = boto3.client("sqs", region_name="us-east-1")
    topic = sns.create_topic(Name="handoff")["TopicArn"]
    queue_url = sqs.create_queue(QueueName="agent")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn, Attributes={"RawMessageDelivery": "true"})
    monkeypatch.setenv("HANDOFF_TOPIC_ARN", topic)

    def read() -> list[str]:
        messages = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10).get("Messages", [])
        return [m["Body"] for m in messages]

    return read


def _hand_off(store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch, session_id: str) -> dict[str, Any]:
    monkeypatch.setattr(handoff, "store", lambda: store)
    event = {"session_id": session_id, "handoff_id": "h-1", "agent_id": "agent-1", "reason": "billing"}
    return handoff.transfer_context(event, lambda_context("TransferContext"))


def test_twenty_turns_of_four_byte_characters_hand_off_and_the_newest_turn_arrives_whole(
    store: DynamoSessionStore, agent_inbox: Callable[[], list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given 20 turns of 2,000 emoji each (480 KB if every emoji were escaped as \uXXXX\uXXXX)
    session = store.sessions.create_session("alice")
    for n in range(20):
        store.turns.add_turn(session.session_id, Role.USER if n % 2 == 0 else Role.ASSISTANT, f"{n:02d}" + EMOJI * 1998)

    # When the workflow transfers the context
    result = _hand_off(store, monkeypatch, session.session_id)

    # Then one message under SNS's limit reaches the agent, holding every turn whole
    (body,) = agent_inbox()
    assert len(body.encode("utf-8")) < SNS_LIMIT
    message = json.loads(body)
    assert result["omitted_turns"] == 0
    assert len(message["turns"]) == 20
    newest = message["turns"][-1]
    assert newest["turn_number"] == 20
    assert newest["content"] == "19" + EMOJI * 1998


def test_turns_that_do_not_fit_are_the_oldest_and_are_counted(
    store: DynamoSessionStore, agent_inbox: Callable[[], list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the stage's maximum of 100 turns, each 2,000 escaped-quote characters (4 KB of JSON each)
    monkeypatch.setenv("CONTEXT_TURNS", "100")
    session = store.sessions.create_session("alice")
    for n in range(100):
        store.turns.add_turn(session.session_id, Role.USER, f"{n:03d}" + '"' * 1997)

    result = _hand_off(store, monkeypatch, session.session_id)

    (body,) = agent_inbox()
    assert len(body.encode("utf-8")) <= 240 * 1024  # the budget: SNS's 256 KiB less 16 KiB for the envelope
    message = json.loads(body)
    assert 0 < result["omitted_turns"] < 100
    assert message["omitted_turns"] == result["omitted_turns"]
    numbers = [t["turn_number"] for t in message["turns"]]
    assert numbers == list(range(101 - len(numbers), 101))  # the newest, in order, none skipped
    assert message["turns"][-1]["content"] == "099" + '"' * 1997


def test_a_message_at_the_budget_is_kept_and_one_byte_more_is_not() -> None:
    header = {"session_id": "s"}
    turn_bytes = handoff_context.size(handoff_context.build(header, None, []))
    one = _turn(1, "x" * 100)
    exact = handoff_context.size({**header, "summary": None, "turns": [handoff_context._turn(one)], "omitted_turns": 0})
    assert exact > turn_bytes
    assert len(handoff_context.build(header, None, [one], max_bytes=exact)["turns"]) == 1
    assert handoff_context.build(header, None, [one], max_bytes=exact - 1)["turns"] == []


def _turn(number: int, content: str) -> Any:
    from lambdas.shared.records import Turn

    return Turn(session_id="s", turn_number=number, role=Role.USER, content=content, created_at=0, ttl=0)
