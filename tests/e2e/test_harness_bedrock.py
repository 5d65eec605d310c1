"""The harness's Bedrock stub: Converse answered at the client, validated, recorded."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.exceptions import ParamValidationError
from moto import mock_aws

from embedded.services.bedrock import BedrockStub
from lambdas.shared import env
from lambdas.shared.bedrock import bedrock_client, converse_text
from lambdas.shared.records import Role, TokenUsage, Turn
from lambdas.shared.responder import BedrockResponder, ReplyEnd

MODEL = "anthropic.claude-3-haiku-20240307-v1:0"


def _turn(number: int, role: Role, content: str) -> Turn:
    return Turn(session_id="s", turn_number=number, role=role, content=content, created_at=0, ttl=0)


@pytest.fixture(autouse=True)
def _fresh_clients() -> Any:
    env.reset()
    yield
    env.reset()


def test_the_code_under_test_really_calls_converse_and_gets_the_stub_answer() -> None:
    # Given a stub answering every Converse with a fixed text
    stub = BedrockStub(answer=lambda request: "  three sentences  ")
    with mock_aws(), stub.installed():
        # When the shared helper calls Converse through the client it creates itself
        text = converse_text(bedrock_client(), MODEL, "summarise this", system="Summarise.", sleep=lambda _: None)
    # Then the answer is the stub's (stripped by the helper) and the call is recorded as sent
    assert text == "three sentences"
    (call,) = stub.calls
    assert (call.model_id, call.system, call.messages) == (MODEL, ("Summarise.",), (("user", "summarise this"),))
    assert call.prompt == "summarise this"


def test_the_default_answer_echoes_the_last_customer_message() -> None:
    # Given the default stub and the Message Lambda's responder (its own client)
    stub = BedrockStub()
    with mock_aws(), stub.installed():
        responder = BedrockResponder(MODEL, sleep=lambda _: None)
        # When it answers a conversation
        reply = responder.reply([_turn(1, Role.ASSISTANT, "Hi"), _turn(2, Role.USER, "volume 3?")])
    # Then the reply is the echo responder's
    assert reply == "You said: volume 3?"
    assert stub.calls[0].messages[-1] == ("user", "volume 3?")


def test_converse_stream_answers_in_token_sized_deltas_and_is_recorded() -> None:
    # Given a stub answering with a fixed text, and the Message Lambda's responder (its own client)
    stub = BedrockStub(answer=lambda request: "Volume 3 of Frieren came out in March.")
    with mock_aws(), stub.installed():
        responder = BedrockResponder(MODEL, sleep=lambda _: None)
        # When it streams a reply
        pieces = list(responder.stream([_turn(1, Role.USER, "volume 3?")]))
    # Then the pieces are token-sized, join to the answer, and end the turn; the call is recorded as streamed
    texts = [p for p in pieces if isinstance(p, str)]
    assert "".join(texts) == "Volume 3 of Frieren came out in March."
    assert len(texts) >= 9
    assert all(len(t.strip()) <= 4 for t in texts)
    (call,) = stub.calls
    assert (call.streamed, call.tokens, call.prompt) == (True, len(texts), "volume 3?")
    # And the stream ends, as Bedrock's does, with the usage: the tokens read and one per delta written
    assert pieces[-1] == ReplyEnd("end_turn", TokenUsage(call.input_tokens, len(texts)))


def test_the_usage_a_stream_reports_grows_with_what_the_model_reads_as_converse_reports_it() -> None:
    stub = BedrockStub(answer=lambda request: "Yes.")
    with mock_aws(), stub.installed():
        responder = BedrockResponder(MODEL, sleep=lambda _: None)
        short = list(responder.stream([_turn(1, Role.USER, "volume 3?")]))[-1]
        long = list(responder.stream([_turn(1, Role.USER, "volume 3?" * 100)]))[-1]
        converse = bedrock_client().converse(**responder.request([_turn(1, Role.USER, "volume 3?" * 100)]))
    assert isinstance(short, ReplyEnd)
    assert isinstance(long, ReplyEnd)
    assert short.usage is not None
    assert long.usage is not None
    # one token per 4 characters more (the prompt around the message is the same)
    assert abs((long.usage.input_tokens - short.usage.input_tokens) - 99 * len("volume 3?") / 4) <= 1
    assert converse["usage"]["inputTokens"] == long.usage.input_tokens
    assert [c.input_tokens for c in stub.calls] == [short.usage.input_tokens, *[long.usage.input_tokens] * 2]


def test_an_invalid_request_is_rejected_like_the_real_client_does() -> None:
    # Given the stub installed
    stub = BedrockStub()
    with mock_aws(), stub.installed():
        client = boto3.client("bedrock-runtime", region_name="us-east-1")
        # When a request misses a required member, Then botocore refuses it and nothing is answered
        with pytest.raises(ParamValidationError):
            client.converse(messages=[{"role": "user", "content": [{"text": "x"}]}])
    assert stub.calls == []


def test_other_services_are_untouched() -> None:
    # Given the stub installed over moto
    stub = BedrockStub()
    with mock_aws(), stub.installed():
        # When another service is called, Then moto answers it as before
        sqs = boto3.client("sqs", region_name="us-east-1")
        url = sqs.create_queue(QueueName="q")["QueueUrl"]
        assert sqs.list_queues()["QueueUrls"] == [url]
    # And after the block boto3.client is the original again
    assert getattr(boto3.client, "__module__", "") == "boto3"


def test_a_reply_longer_than_max_tokens_stops_there_with_stop_reason_max_tokens() -> None:
    # Given a stub whose answer is longer than the responder's output budget of 4 tokens ("Volu", "me", " 3", " of")
    stub = BedrockStub(answer=lambda request: "Volume 3 of Frieren came out in March.")
    with mock_aws(), stub.installed():
        responder = BedrockResponder(MODEL, max_output_tokens=4, sleep=lambda _: None)
        # When it streams the reply
        pieces = list(responder.stream([_turn(1, Role.USER, "volume 3?")]))
        # And when the same budget is asked of Converse
        client = boto3.client("bedrock-runtime", region_name="us-east-1")
        whole = client.converse(
            modelId=MODEL,
            messages=[{"role": "user", "content": [{"text": "volume 3?"}]}],
            inferenceConfig={"maxTokens": 4},
        )
    # Then both stop after four tokens, saying so as Bedrock does
    end = pieces[-1]
    assert isinstance(end, ReplyEnd)
    assert end.stop_reason == "max_tokens"
    assert end.usage is not None
    assert end.usage.output_tokens == 4  # what it wrote, as Bedrock counts what it bills
    assert "".join(p for p in pieces if isinstance(p, str)) == "Volume 3 of"
    assert whole["stopReason"] == "max_tokens"
    assert whole["output"]["message"]["content"][0]["text"] == "Volume 3 of"
    assert [(call.stop_reason, call.tokens) for call in stub.calls] == [("max_tokens", 4), ("max_tokens", 0)]


def test_a_reply_within_max_tokens_ends_its_turn() -> None:
    # Given a budget exactly the answer's length (five tokens: "Volu", "me", " 3", " is", " out.")
    stub = BedrockStub(answer=lambda request: "Volume 3 is out.")
    with mock_aws(), stub.installed():
        responder = BedrockResponder(MODEL, max_output_tokens=5, sleep=lambda _: None)
        pieces = list(responder.stream([_turn(1, Role.USER, "volume 3?")]))
    # Then the whole answer comes, ending its turn
    end = pieces[-1]
    assert isinstance(end, ReplyEnd)
    assert end.stop_reason == "end_turn"
    assert end.usage is not None
    assert end.usage.output_tokens == 5
    assert "".join(p for p in pieces if isinstance(p, str)) == "Volume 3 is out."
