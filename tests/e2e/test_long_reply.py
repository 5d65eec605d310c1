"""A long reply on the embedded stage: cut at the model's output budget, kept, and continued.

The stage's model (the embedded Bedrock, which honours ``inferenceConfig.maxTokens`` as Bedrock
does) answers a long question with more than the stage's reply budget (800 output tokens, from
its capacity block); the reply stops there, is stored, and the customer's ``continue`` brings the
rest, streamed and stored as the next turn. A ``continue`` with nothing to continue is refused.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from embedded import EmbeddedStage, embedded_stage
from embedded.services.bedrock_stream import tokens
from embedded.synth import StageAssembly, stage_config
from local.story.chat import Chat, open_chat


@pytest.fixture(scope="module")
def stage(synthesized: StageAssembly) -> Iterator[EmbeddedStage]:
    with embedded_stage(synthesized.assembly_dir) as stage, stage.clock.frozen():
        yield stage


def go_on(chat: Chat) -> list[dict[str, object]]:
    chat.new_frames()
    chat.stage.websocket.send(chat.connection_id, {"action": "continue"})
    return chat.new_frames()


def test_a_reply_cut_at_the_reply_budget_is_kept_and_continued(stage: EmbeddedStage) -> None:
    budget = stage_config("dev").capacity.max_output_tokens
    refused_before = len(stage.refusals)
    # Given a customer whose question the model answers (it echoes it) in more tokens than the budget
    chat = open_chat(stage, "long-reply-lena")
    question = " ".join(f"Is volume {n} of Frieren out?" for n in range(1, 120))[:3900]
    assert len(tokens(f"You said: {question}")) > budget
    frames = chat.say(question)
    # Then the reply stops at the budget, and the final frame says it can be continued
    final = frames[-1]
    assert (final["type"], final["stopped"], final["can_continue"]) == ("final", "max_tokens", True)
    cut = "".join(f["text"] for f in frames if f.get("type") == "delta")
    assert len(tokens(cut)) == budget
    # When the customer asks for the rest
    rest = go_on(chat)
    # Then it is announced, streamed and stored as the next turn, its final frame naming the cut reply
    assert rest[0] == {
        "type": "continuing",
        "session_id": chat.session_id,
        "reply_to": final["reply_to"],
        "turn_number": final["turn_number"],
    }
    assert rest[-1]["type"] == "final"
    assert rest[-1]["continues"] == final["turn_number"]
    assert "can_continue" not in rest[-1]
    more = "".join(f["text"] for f in rest if f.get("type") == "delta")
    response = stage.rest.request("GET", f"/sessions/{chat.session_id}/turns", headers=chat.auth())
    assert response.status == 200, response.body
    stored = [(t["turn_number"], t["role"], t["content"]) for t in response.json()["turns"]]
    assert stored[-2:] == [(final["turn_number"], "assistant", cut), (rest[-1]["turn_number"], "assistant", more)]
    # And the model was asked to go on from the cut reply, within the same budget
    asked = [c for c in stage.bedrock.calls if c.caller == "WsMessage"][-1]
    assert asked.messages[-2] == ("assistant", cut)
    assert "Continue it exactly where it stopped" in asked.prompt

    # When the customer asks to continue a reply that was complete
    again = go_on(chat)
    # Then they are told so, and nothing is stored
    assert [(f["type"], f["code"]) for f in again] == [("error", "nothing_to_continue")]
    after = stage.rest.request("GET", f"/sessions/{chat.session_id}/turns", headers=chat.auth())
    assert len(after.json()["turns"]) == len(stored)
    assert stage.refusals[refused_before:] == []
