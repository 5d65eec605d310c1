"""The stage's own guardrail on the embedded stage: the model reads placeholders, the transcript the customer's words.

Its own module: it deploys a stage of its own (with its own Bedrock stub), which must not share
moto's account with another module's stage.
"""

from __future__ import annotations

from typing import Any

from embedded import embedded_stage
from embedded.cloudformation.assembly import load_assembly
from embedded.services.bedrock import BedrockStub
from embedded.synth import StageAssembly
from lambdas.shared.responder import BLOCKED_REPLY
from local.story.chat import open_chat, store_of
from stacks.guardrail_config import DEFAULT_BLOCKED_OUTPUT
from tests.e2e.test_rewind import contents
from tests.e2e.test_strict_stage import _drop_actions, _role_of

CARD = "4111 1111 1111 1111"


def _answer(request: dict[str, Any]) -> str:
    """The model: repeats what it read, and reads a card number back when asked for one."""
    last = request["messages"][-1]["content"][0]["text"]
    return f"Your card is {CARD}." if "which card" in last else f"I read: {last}"


def test_the_model_reads_placeholders_the_transcript_keeps_the_words_and_a_card_in_a_reply_is_blocked(
    synthesized: StageAssembly,
) -> None:
    stub = BedrockStub(answer=_answer)
    with embedded_stage(synthesized.assembly_dir, bedrock=stub) as stage, stage.clock.frozen():
        # Given the stage's own guardrail, deployed from its template and published as version 1
        [policy] = stub.guardrails.values()
        assert policy.versions == ["1"]
        chat = open_chat(stage, "private-pia")
        # When a customer gives their e-mail address and phone number in chat
        words = "Please send the preorder news to pia.sato@example.jp or call +81 90 1234 5678"
        chat.say(words)
        # Then the model read placeholders where they were
        [call] = stub.calls
        assert call.streamed
        assert call.prompt == "Please send the preorder news to {EMAIL} or call {PHONE}"
        assert call.guardrail == policy.guardrail_id
        assert "pia.sato" not in repr(stub.calls)
        # And the stored turn (what agents read) holds the customer's own words, as the transcript does
        [stored] = [t for t in store_of(stage).turns.turns_between(chat.session_id, 1, 3) if t.role == "user"]
        assert stored.content == words
        turns = contents(stage, chat)
        assert turns[1:] == [
            (2, "user", words),
            (3, "assistant", "I read: Please send the preorder news to {EMAIL} or call {PHONE}"),
        ]
        # When the model writes a card number, Then the reply is withheld: the guardrail intervened
        chat.say("which card do I have on file?")
        assert stub.calls[-1].stop_reason == "guardrail_intervened"
        assert stub.calls[-1].reply == DEFAULT_BLOCKED_OUTPUT
        turns = contents(stage, chat)
        assert turns[-1][1:] == ("assistant", BLOCKED_REPLY)
        assert CARD not in repr(turns)
        assert CARD not in repr(chat.frames())
        assert stage.refusals == []


def test_without_apply_guardrail_the_model_is_not_called_and_the_turn_stays(synthesized: StageAssembly) -> None:
    # Given the stage without the message function's right to apply its guardrail
    templates = load_assembly(synthesized.assembly_dir)
    _drop_actions(templates, _role_of(templates, "lambdas.ws.message.handler"), {"bedrock:ApplyGuardrail"})
    stub = BedrockStub(answer=_answer)
    with embedded_stage(templates, bedrock=stub) as stage, stage.clock.frozen():
        chat = open_chat(stage, "ungranted-gus")
        # When a customer writes
        chat.say("Is Frieren volume 3 out?")
        # Then Bedrock refuses the call on the guardrail, the model is never asked, the turn is kept
        refused = [str(r) for r in stage.refusals]
        assert any("bedrock:ApplyGuardrail" in r and ":guardrail/" in r for r in refused), refused
        assert stub.calls == []
        assert contents(stage, chat)[1:] == [(2, "user", "Is Frieren volume 3 out?")]
