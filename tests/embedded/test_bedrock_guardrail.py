"""The embedded Bedrock guardrail: masks what the model reads, blocks card numbers in replies, refuses unknown ones."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from embedded.services.bedrock import BedrockStub
from embedded.services.bedrock_guardrail import GuardrailPolicy
from lambdas.shared import env
from lambdas.shared.bedrock import GuardrailIntervened, bedrock_client, converse_text
from lambdas.shared.records import Role, Turn
from lambdas.shared.responder import BedrockResponder, Guardrail, ReplyEnd

MODEL = "anthropic.claude-3-haiku-20240307-v1:0"
ARN = "arn:aws:bedrock:us-east-1:123456789012:guardrail/gr0abc123def"


def _entity(kind: str, output_action: str) -> dict[str, Any]:
    return {"Type": kind, "Action": output_action, "InputAction": "ANONYMIZE", "OutputAction": output_action}


PROPERTIES = {
    "Name": "chat",
    "BlockedInputMessaging": "Please leave payment details out.",
    "BlockedOutputsMessaging": "That reply held payment details.",
    "SensitiveInformationPolicyConfig": {
        "PiiEntitiesConfig": [
            _entity("EMAIL", "ANONYMIZE"),
            _entity("PHONE", "ANONYMIZE"),
            _entity("CREDIT_DEBIT_CARD_NUMBER", "BLOCK"),
        ]
    },
}


def _policy(properties: dict[str, Any] = PROPERTIES) -> GuardrailPolicy:
    policy = GuardrailPolicy.of("gr0abc123def", ARN, properties)
    policy.publish()
    return policy


def _turn(number: int, role: Role, content: str) -> Turn:
    return Turn(session_id="s", turn_number=number, role=role, content=content, created_at=0, ttl=0)


@pytest.fixture(autouse=True)
def _fresh_clients() -> Iterator[None]:
    env.reset()
    yield
    env.reset()


def test_contact_details_are_masked_as_bedrock_masks_them() -> None:
    masked, blocked = _policy().screen_input("Mail me at yuki.tanaka@example.jp or call +81 90-1234-5678 please")
    assert (masked, blocked) == ("Mail me at {EMAIL} or call {PHONE} please", False)


def test_a_card_number_is_masked_in_input_and_a_number_that_is_no_card_stays() -> None:
    policy = _policy()
    assert policy.screen_input("my card is 4111 1111 1111 1111") == ("my card is {CREDIT_DEBIT_CARD_NUMBER}", False)
    # 16 digits failing the Luhn check are no card (and too many for a phone); a date is no phone
    text = "order 4111 1111 1111 1112 of volume 12 on 2026-11-27"
    assert policy.screen_input(text) == (text, False)


def test_a_reply_with_a_card_number_is_the_blocked_message() -> None:
    policy = _policy()
    assert policy.screen_output("Your card 5500-0000-0000-0004 is on file") == (
        "That reply held payment details.",
        True,
    )
    assert policy.screen_output("Write to shop@example.com") == ("Write to {EMAIL}", False)


def test_an_entity_with_input_block_blocks_the_call_and_a_disabled_side_is_not_screened() -> None:
    blocking = {**PROPERTIES, "SensitiveInformationPolicyConfig": {"PiiEntitiesConfig": [
        {"Type": "CREDIT_DEBIT_CARD_NUMBER", "Action": "BLOCK", "OutputEnabled": False},
    ]}}  # fmt: skip
    policy = _policy(blocking)
    assert policy.screen_input("card 4111111111111111")[1] is True
    assert policy.screen_output("card 4111111111111111") == ("card 4111111111111111", False)


def test_the_model_reads_placeholders_and_a_blocked_stream_ends_guardrail_intervened() -> None:
    # Given a stub whose model repeats what it read and adds a card number, and the stage's guardrail
    stub = BedrockStub(answer=lambda request: "noted: " + request["messages"][-1]["content"][0]["text"])
    stub.guardrails["gr0abc123def"] = _policy()
    with mock_aws(), stub.installed():
        responder = BedrockResponder(MODEL, guardrail=Guardrail("gr0abc123def", "1"), sleep=lambda _: None)
        # When a customer writes their e-mail address
        pieces = list(responder.stream([_turn(1, Role.USER, "reach me at ann@example.com")]))
        # Then the model read a placeholder, and the reply masks it too
        assert "".join(p for p in pieces if isinstance(p, str)) == "noted: reach me at {EMAIL}"
        end = pieces[-1]
        assert isinstance(end, ReplyEnd)
        assert end.stop_reason == "end_turn"
        assert stub.calls[-1].prompt == "reach me at {EMAIL}"
        assert stub.calls[-1].guardrail == "gr0abc123def"
        # And when the model writes a card number, the reply is the blocked message, ended by the guardrail
        stub.answer = lambda request: "Your card 4111 1111 1111 1111 is saved"
        pieces = list(responder.stream([_turn(1, Role.USER, "what card do you have?")]))
    assert "".join(p for p in pieces if isinstance(p, str)) == "That reply held payment details."
    blocked = pieces[-1]
    assert isinstance(blocked, ReplyEnd)
    assert blocked.stop_reason == "guardrail_intervened"
    assert blocked.blocked


def test_converse_reports_the_intervention_in_its_stop_reason() -> None:
    stub = BedrockStub(answer=lambda request: "card 4111 1111 1111 1111")
    stub.guardrails["gr0abc123def"] = _policy()
    with mock_aws(), stub.installed(), pytest.raises(GuardrailIntervened):
        converse_text(bedrock_client(), MODEL, "summarise", guardrail=(ARN, "1"), sleep=lambda _: None)
    assert stub.calls[-1].stop_reason == "guardrail_intervened"


@pytest.mark.parametrize(("identifier", "version"), [("gr0nosuchone", "1"), ("gr0abc123def", "2")])
def test_fails_like_bedrock_on_a_guardrail_or_version_that_does_not_exist(identifier: str, version: str) -> None:
    stub = BedrockStub()
    stub.guardrails["gr0abc123def"] = _policy()
    with mock_aws(), stub.installed(), pytest.raises(ClientError) as refused:
        converse_text(bedrock_client(), MODEL, "hi", guardrail=(identifier, version), sleep=lambda _: None)
    assert refused.value.response["Error"]["Code"] == "ValidationException"
    assert "does not exist" in refused.value.response["Error"]["Message"]
    assert stub.calls == []
