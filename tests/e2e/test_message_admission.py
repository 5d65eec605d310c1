"""A chat message's admission on the embedded stage, as the stage's policies allow it.

The chat page sends a ``client_message_id`` with every message: the resend check and the turn's
sent record are written by the message function itself (one transaction), and each reply counts
the tokens the model reported against the customer's daily budget; over it, a message is refused
before it is stored or reaches the model.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from embedded import EmbeddedStage, embedded_stage
from embedded.synth import StageAssembly
from lambdas.shared import keys
from lambdas.shared.records import Role, TokenUsage
from lambdas.shared.store.budgets import utc_day
from local.story.base import token_subject
from local.story.chat import Chat, open_chat, store_of


@pytest.fixture(scope="module")
def stage(synthesized: StageAssembly) -> Iterator[EmbeddedStage]:
    with embedded_stage(synthesized.assembly_dir) as stage, stage.clock.frozen():
        yield stage


def say_with_id(chat: Chat, text: str, client_message_id: str) -> list[Any]:
    chat.new_frames()
    frame = {"action": "sendMessage", "text": text, "client_message_id": client_message_id}
    chat.stage.websocket.send(chat.connection_id, frame)
    return chat.new_frames()


def test_a_keyed_message_is_stored_once_and_its_reply_counts_the_models_tokens(stage: EmbeddedStage) -> None:
    # Given a customer chatting as the chat page does
    refused_before, calls_before = len(stage.refusals), len(stage.bedrock.calls)
    chat = open_chat(stage, "keyed-kana")
    customer_id = token_subject(chat.token)
    # When she sends a message, and the page sends it again
    first = say_with_id(chat, "Is Frieren volume 3 out?", "m-1")
    again = say_with_id(chat, "Is Frieren volume 3 out?", "m-1")
    # Then it is answered once, the resend is told so, and the stage refused no call
    assert first[-1]["type"] == "final"
    assert again == [{"type": "duplicate", "session_id": chat.session_id, "client_message_id": "m-1", "turn_number": 2}]
    assert len(stage.bedrock.calls) == calls_before + 1
    assert stage.refusals[refused_before:] == []
    # And the stored reply holds the usage the model reported, which the customer's day counts
    store = store_of(stage)
    turns = store.turns.list_turns(chat.session_id).items
    assert [t.role for t in turns] == [Role.ASSISTANT, Role.USER, Role.ASSISTANT]
    call = stage.bedrock.calls[-1]
    assert turns[-1].usage == TokenUsage(call.input_tokens, call.tokens)
    day, _ = utc_day(store.table.now())
    budget = store.table.get(keys.token_budget_key(customer_id, day))
    assert budget is not None
    assert budget["tokens"] == call.input_tokens + call.tokens


def test_a_customer_over_the_days_budget_is_told_when_it_resets_and_nothing_is_stored(stage: EmbeddedStage) -> None:
    # Given a customer whose replies today have spent the stage's budget (dev: 200,000 tokens)
    refused_before = len(stage.refusals)
    chat = open_chat(stage, "thrifty-tomo")
    store = store_of(stage)
    store.budgets.spend_tokens(token_subject(chat.token), TokenUsage(199_000, 1_000))
    calls_before = len(stage.bedrock.calls)
    # When she writes
    frames = chat.say("One more recommendation?")
    # Then she is told the message was not sent and when the budget resets; nothing reached the model
    (frame,) = frames
    _, resets_at = utc_day(store.table.now())
    assert frame["type"] == "error"
    assert frame["code"] == "token_budget_exhausted"
    assert frame["retry_after_seconds"] == resets_at - store.table.now()
    assert frame["resets_at"].endswith("T00:00:00Z")
    assert len(stage.bedrock.calls) == calls_before
    assert [t.role for t in store.turns.list_turns(chat.session_id).items] == [Role.ASSISTANT]  # the welcome
    assert stage.refusals[refused_before:] == []
