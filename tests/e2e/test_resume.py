"""A dropped connection resumes its session on the embedded stage: within the grace, after it, against the cleanup."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from embedded import EmbeddedStage, embedded_stage
from embedded.services.apigateway_websocket import ConnectionRefused
from embedded.synth import StageAssembly
from lambdas.shared.records import SessionStatus
from local.story.chat import Chat, open_chat, sign_in, store_of
from local.story.stage import story_config

pytestmark = pytest.mark.slow

GRACE = story_config().session_resume_grace_seconds


@pytest.fixture(scope="module")
def stage(synthesized: StageAssembly) -> Iterator[EmbeddedStage]:
    # The clock stands still unless a test moves it: the grace ends when the test says so.
    with embedded_stage(synthesized.assembly_dir) as stage, stage.clock.frozen():
        yield stage


def _connect(stage: EmbeddedStage, chat: Chat, **extra: str) -> tuple[str, dict[str, Any]]:
    token = sign_in(stage, chat.who, "customer")  # fresh: the clock may have moved past the last token's hour
    connection_id = stage.websocket.connect(query={"token": token, "session_id": chat.session_id, **extra})
    stage.settle(until=lambda: bool(stage.websocket.frames(connection_id)), timeout=30)
    return connection_id, stage.websocket.frames(connection_id)[0]


def _drop(stage: EmbeddedStage, connection_id: str) -> None:
    stage.websocket.disconnect(connection_id, status_code=1006, reason="network lost")
    stage.settle(timeout=30)


def _sweep(stage: EmbeddedStage) -> None:
    """Run what the hour brings: every due per-session schedule, then the hourly sweep."""
    for fired in stage.fire_due_schedules():
        assert stage.wait_execution(str(fired.result), timeout=40)["status"] == "SUCCEEDED"
    (hourly,) = stage.all("AWS::Events::Rule", where=lambda r: r.properties.get("ScheduleExpression") == "rate(1 hour)")
    stage.fire_schedule(hourly)
    stage.settle(timeout=40)


def test_a_dropped_connection_resumes_within_the_grace_with_what_it_missed_and_the_cleanup_leaves_it(
    stage: EmbeddedStage,
) -> None:
    # Given a customer who chatted (greeting 1, question 2, reply 3) and saw only the greeting and the question
    chat = open_chat(stage, "resume-within")
    chat.say("Is volume 3 of Frieren out yet?")
    stage.settle(until=lambda: any(f.get("type") == "final" for f in chat.frames()), timeout=30)
    # When the connection drops, and the customer reconnects 59 minutes later with last_turn 2
    _drop(stage, chat.connection_id)
    store = store_of(stage)
    assert store.sessions.get_session(chat.session_id).status == SessionStatus.DISCONNECTED  # type: ignore[union-attr]
    stage.clock.advance(GRACE - 60)
    connection_id, welcome = _connect(stage, chat, last_turn="2")
    # Then the session is resumed: the welcome says so and carries the reply it missed
    assert (welcome["type"], welcome["resumed"], welcome["status"]) == ("welcome", True, "active")
    assert [(t["turn_number"], t["role"]) for t in welcome["turns"]] == [(3, "assistant")]
    assert welcome["earlier_turns"] is False
    # And the conversation goes on on the new connection
    stage.websocket.send(connection_id, {"action": "sendMessage", "text": "And volume 4?"})
    stage.settle(until=lambda: any(f.get("type") == "final" for f in stage.websocket.frames(connection_id)))
    # When the hour after the drop passes and every cleanup runs
    stage.clock.advance(GRACE + 120)
    _sweep(stage)
    # Then the resumed session is untouched: active, every turn there, no archive
    session = store.sessions.get_session(chat.session_id)
    assert session is not None
    assert (session.status, session.archive_key, session.turn_count) == (SessionStatus.ACTIVE, None, 6)
    assert len(store.turns.turns_between(chat.session_id, 1, 6)) == 6


def test_a_session_left_longer_than_the_grace_is_refused_and_cleaned(stage: EmbeddedStage) -> None:
    # Given a customer whose connection dropped
    chat = open_chat(stage, "resume-late")
    _drop(stage, chat.connection_id)
    # When they come back a second after the grace period
    stage.clock.advance(GRACE + 1)
    with pytest.raises(ConnectionRefused) as refused:
        _connect(stage, chat)
    # Then the resume is refused with 410, and the cleanup takes the session
    assert refused.value.status == 410
    stage.clock.advance(120)
    _sweep(stage)
    session = store_of(stage).sessions.get_session(chat.session_id)
    assert session is not None
    assert session.status == SessionStatus.ARCHIVED
