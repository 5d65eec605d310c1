"""Bedrock degraded on the embedded stage: the fallback model answers, and a full cap is a polite ``busy``.

The stage's Bedrock stub refuses per model id exactly as Bedrock does (``ThrottlingException``
429, ``ResourceNotFoundException`` 404 "This model version has reached the end of its life"), so
the message function meets the errors it would meet in AWS, through its real grants. Every test
uses a new customer and leaves the stub answering every model again; the stage's clock stands
still, so the model-call cap refills only when a test moves it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from embedded import EmbeddedStage, embedded_stage
from embedded.runtime import function_environment
from embedded.synth import StageAssembly
from lambdas.shared.settings import settings
from local.story.chat import Chat, open_chat, store_of
from local.story.metrics import emf_values
from local.story.stage import story_config

pytestmark = pytest.mark.slow

MESSAGE = "lambdas.ws.message.handler"


@pytest.fixture(scope="module")
def stage(synthesized: StageAssembly) -> Iterator[EmbeddedStage]:
    with embedded_stage(synthesized.assembly_dir) as stage, stage.clock.frozen():
        yield stage


@pytest.fixture
def models(stage: EmbeddedStage) -> Iterator[tuple[str, str]]:
    """The stage's primary and fallback model ids (from the message function's own settings)."""
    with function_environment(stage.function(MESSAGE).environment):
        primary, fallback = settings().bedrock_model_id, settings().bedrock_fallback_model_id
    assert primary is not None
    assert fallback is not None
    yield primary, fallback
    for model_id in (primary, fallback):
        stage.bedrock.refuse(model_id, None)
    stage.settle(timeout=60, wait_executions=False)


_customers = iter(range(10_000))


def new_chat(stage: EmbeddedStage) -> Chat:
    return open_chat(stage, f"fallback-{next(_customers)}")


def stored(stage: EmbeddedStage, chat: Chat) -> list[tuple[str, str]]:
    session = store_of(stage).sessions.get_session(chat.session_id)
    assert session is not None
    turns = store_of(stage).turns.turns_between(chat.session_id, 1, max(1, session.turn_count))
    return [(str(t.role), t.content) for t in turns]


def of_type(frames: list[Any], kind: str) -> list[dict[str, Any]]:
    return [f for f in frames if isinstance(f, dict) and f.get("type") == kind]


def fallbacks_since(stage: EmbeddedStage, first_call: int) -> dict[str, list[float]]:
    """The fallback metrics the message function printed since its ``first_call``-th invocation."""
    calls = stage.calls.by_handler(MESSAGE)[first_call:]
    values = emf_values(calls, ["service"])
    return {name: v for name, v in values.items() if name.startswith("ModelFallback")}


@pytest.mark.parametrize(("kind", "code", "reason"), [
    ("throttled", "ThrottlingException", "throttled"),
    ("end_of_life", "ResourceNotFoundException", "end_of_life"),
    ("legacy", "ResourceNotFoundException", "end_of_life"),
])  # fmt: skip
def test_a_primary_that_refuses_hands_the_reply_to_the_fallback_and_it_is_counted(
    stage: EmbeddedStage, models: tuple[str, str], kind: str, code: str, reason: str
) -> None:
    # Given the stage's primary model refusing as Bedrock does
    primary, fallback = models
    chat = new_chat(stage)
    stage.bedrock.refuse(primary, kind)
    refused_before, calls_before = len(stage.bedrock.refused), len(stage.bedrock.calls)
    first_call = len(stage.calls.by_handler(MESSAGE))
    # When the customer writes
    frames = chat.say("is volume 3 of Frieren out?")
    # Then the reply arrives whole, written by the fallback, and both turns are stored once
    assert of_type(frames, "error") == []
    assert len(of_type(frames, "final")) == 1
    assert stored(stage, chat)[-2:] == [
        ("user", "is volume 3 of Frieren out?"),
        ("assistant", "You said: is volume 3 of Frieren out?"),
    ]
    # And the primary was asked once (the fallback is its retry), the fallback answered
    assert stage.bedrock.refused[refused_before:] == [(primary, code)]
    assert [c.model_id for c in stage.bedrock.calls[calls_before:] if c.caller == "WsMessage"] == [fallback]
    # And the fallback is a metric of the message function, by reason
    assert fallbacks_since(stage, first_call) == {"ModelFallbacks": [1.0], f"ModelFallback_{reason}": [1.0]}


def test_both_models_throttled_is_a_clear_error_and_nothing_is_lost(
    stage: EmbeddedStage, models: tuple[str, str]
) -> None:
    # Given both models throttled on every call
    primary, fallback = models
    chat = new_chat(stage)
    stage.bedrock.refuse(primary, "throttled")
    stage.bedrock.refuse(fallback, "throttled")
    refused_before = len(stage.bedrock.refused)
    # When the customer writes
    frames = chat.say("anything like Frieren?")
    # Then they are told the assistant cannot answer now, their message is saved, and no reply is invented
    assert [f["code"] for f in of_type(frames, "error")] == ["assistant_unavailable"]
    assert "saved" in of_type(frames, "error")[0]["message"]
    assert stored(stage, chat)[-1] == ("user", "anything like Frieren?")
    # And the primary was asked once, the fallback as often as the stage allows (its BEDROCK_ATTEMPTS)
    with function_environment(stage.function(MESSAGE).environment):
        attempts = settings().bedrock_attempts
    refused = stage.bedrock.refused[refused_before:]
    assert [m for m, _ in refused] == [primary] + [fallback] * attempts
    # And once the models answer again, the saved message can be asked again (a rewind to it) and is answered
    stage.bedrock.refuse(primary, None)
    stage.bedrock.refuse(fallback, None)
    turn_number = len(stored(stage, chat))
    chat.new_frames()
    stage.websocket.send(
        chat.connection_id, {"action": "rewind", "turn_number": turn_number, "text": "anything like Frieren?"}
    )
    assert len(of_type(chat.new_frames(), "final")) == 1
    assert stored(stage, chat)[-1] == ("assistant", "You said: anything like Frieren?")


def test_a_full_model_call_cap_answers_busy_with_the_wait_and_the_message_waits_saved(
    stage: EmbeddedStage, models: tuple[str, str]
) -> None:
    # Given the stage's model-call cap taken to the last call by other chats (the clock stands still)
    chat = new_chat(stage)
    with function_environment(stage.function(MESSAGE).environment):
        per_second, buckets = settings().model_calls_per_second, settings().model_call_buckets
    assert per_second == story_config().model_resilience.model_calls_per_second
    limits = store_of(stage).limits
    taken = 0
    while limits.take_model_call(per_second=per_second, buckets=buckets, pick=lambda n: 0).admitted:
        taken += 1
        assert taken <= 2 * per_second, "the cap never filled"
    calls_before = len(stage.bedrock.calls)
    # When the customer writes
    frames = chat.say("is volume 4 out?")
    # Then they get a busy frame naming their saved message and how long to wait, and no model was called
    (busy,) = of_type(frames, "busy")
    turn_number = len(stored(stage, chat))
    assert busy["session_id"] == chat.session_id
    assert busy["reply_to"] == turn_number
    assert busy["retry_after_seconds"] >= 1
    assert f"Ask again in {busy['retry_after_seconds']} seconds" in busy["message"]
    assert of_type(frames, "error") == []
    assert stored(stage, chat)[-1] == ("user", "is volume 4 out?")
    assert len(stage.bedrock.calls) == calls_before
    # And after the wait, asking again (a rewind to that message) is answered
    stage.clock.advance(busy["retry_after_seconds"])
    chat.new_frames()
    stage.websocket.send(
        chat.connection_id, {"action": "rewind", "turn_number": turn_number, "text": "is volume 4 out?"}
    )
    assert len(of_type(chat.new_frames(), "final")) == 1
    assert stored(stage, chat)[-1] == ("assistant", "You said: is volume 4 out?")
