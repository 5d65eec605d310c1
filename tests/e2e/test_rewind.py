"""Rewinding a chat on the embedded stage, over WebSocket and REST, as the stage's policies allow it.

A customer edits a message or asks for another answer: what followed is taken back in one
transaction and the turn answered again (streamed over the chat, whole over REST). A resend with
the same id changes nothing; during a handoff, and for another customer, it is refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from embedded import EmbeddedStage, embedded_stage
from embedded.synth import StageAssembly
from local.story.chat import Chat, open_chat, sign_in, store_of


@pytest.fixture(scope="module")
def stage(synthesized: StageAssembly) -> Iterator[EmbeddedStage]:
    with embedded_stage(synthesized.assembly_dir) as stage, stage.clock.frozen():
        yield stage


def contents(stage: EmbeddedStage, chat: Chat) -> list[tuple[int, str, str]]:
    """The session's turns as the customer reads them (``GET /sessions/{id}/turns``)."""
    response = stage.rest.request("GET", f"/sessions/{chat.session_id}/turns", headers=chat.auth())
    assert response.status == 200, response.body
    return [(t["turn_number"], t["role"], t["content"]) for t in response.json()["turns"]]


def ws_rewind(chat: Chat, **frame: Any) -> list[Any]:
    chat.new_frames()
    chat.stage.websocket.send(chat.connection_id, {"action": "rewind", **frame})
    return chat.new_frames()


def rest_rewind(chat: Chat, body: dict[str, Any], key: str | None = None, token: str | None = None) -> Any:
    headers = {"Authorization": f"Bearer {token or chat.token}"}
    if key is not None:
        headers["Idempotency-Key"] = key
    return chat.stage.rest.request("POST", f"/sessions/{chat.session_id}/rewind", headers=headers, body=body)


def test_a_chat_is_rewound_over_the_websocket_and_over_rest(stage: EmbeddedStage) -> None:
    # Given a customer who asked two questions (turns 2 and 4; turn 1 is the welcome)
    refused_before = len(stage.refusals)
    chat = open_chat(stage, "rewinding-rina")
    chat.say("Is Frieren volume 3 out?")
    chat.say("And volume 4?")
    assert len(contents(stage, chat)) == 5

    # When she edits her first question over the chat
    frames = ws_rewind(chat, turn_number=2, text="Is Frieren volume 5 out?", client_message_id="rw-1")
    # Then what followed is gone and the edited question is answered, streamed
    assert frames[0] == {"type": "rewound", "session_id": chat.session_id, "turn_number": 2, "removed_turns": [3, 4, 5]}
    assert [f["type"] for f in frames[1:]][-1] == "final"
    assert {f["type"] for f in frames[1:-1]} == {"delta"}
    reply = "".join(f["text"] for f in frames[1:-1])
    assert contents(stage, chat)[1:] == [(2, "user", "Is Frieren volume 5 out?"), (3, "assistant", reply)]

    # When the client resends the same rewind
    again = ws_rewind(chat, turn_number=2, text="Is Frieren volume 5 out?", client_message_id="rw-1")
    # Then nothing is taken back or answered again
    assert again == [
        {"type": "duplicate", "session_id": chat.session_id, "client_message_id": "rw-1", "turn_number": 2}
    ]
    assert len(contents(stage, chat)) == 3

    # When she asks over REST for another answer, and retries with the same key
    first = rest_rewind(chat, {"turn_number": 2}, key="rest-rw-1")
    retry = rest_rewind(chat, {"turn_number": 2}, key="rest-rw-1")
    # Then the reply comes whole, once, and the retry answers the same
    assert first.status == 200, first.body
    assert retry.status == 200
    assert retry.json() == first.json()
    assert first.json()["removed_turns"] == [3]
    answer = first.json()["reply"]
    assert answer["turn_number"] == 3
    assert contents(stage, chat)[1:] == [(2, "user", "Is Frieren volume 5 out?"), (3, "assistant", answer["text"])]

    # And another customer cannot rewind her session
    stranger = sign_in(stage, "rewinding-stranger", "customer")
    assert rest_rewind(chat, {"turn_number": 2}, token=stranger).status == 404
    assert len(contents(stage, chat)) == 3
    # And every call was allowed by the stage's policies
    assert stage.refusals[refused_before:] == []


def test_a_rewind_during_a_handoff_is_refused_over_both_apis(stage: EmbeddedStage) -> None:
    # Given a customer whose chat a support agent has taken (the handoff's own path is the story's)
    chat = open_chat(stage, "handed-hana")
    chat.say("Where is my order?")
    store_of(stage).sessions.update_status(chat.session_id, "handoff")
    before = contents(stage, chat)
    # When she tries to rewind over REST and over the chat
    over_rest = rest_rewind(chat, {"turn_number": 2, "text": "Never mind"})
    over_ws = [f for f in ws_rewind(chat, turn_number=2) if f.get("type") == "error"]
    # Then both are refused, saying why, and nothing changes
    assert over_rest.status == 409
    assert over_rest.json()["error"]["code"] == "SessionInHandoff"
    assert [f["code"] for f in over_ws] == ["session_in_handoff"]
    assert contents(stage, chat) == before
