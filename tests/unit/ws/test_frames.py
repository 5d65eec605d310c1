"""lambdas.ws.frames: what a sendMessage frame may hold, and the frames the chat sends back."""

from __future__ import annotations

import json

import pytest

from lambdas.ws import frames


def _frame(**fields: object) -> str:
    return json.dumps({"action": "sendMessage", **fields})


def test_a_valid_frame_is_its_text_and_optional_client_message_id() -> None:
    message = frames.parse_message(_frame(text="Is volume 3 out?", client_message_id="m-1"))
    assert (message.text, message.client_message_id) == ("Is volume 3 out?", "m-1")
    assert frames.parse_message(_frame(text="a\nb")).client_message_id is None


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ("not json", "invalid_frame"),
        ("[]", "invalid_frame"),
        (json.dumps({"action": "other", "text": "x"}), "unknown_action"),
        (_frame(text=""), "invalid_text"),
        (_frame(text=5), "invalid_text"),
        (_frame(text="x" * 4001), "message_too_long"),
        (_frame(text="a\u0000b"), "invalid_text"),
        (_frame(text="a\u202eb"), "invalid_text"),
        ('{"action": "sendMessage", "text": "hi \\ud800"}', "invalid_text"),  # a lone surrogate, JSON-escaped
        (_frame(text="x", client_message_id="bad id"), "invalid_client_message_id"),
    ],
)
def test_fails_on_a_frame_the_chat_cannot_store(body: str, code: str) -> None:
    with pytest.raises(frames.FrameError) as refused:
        frames.parse_message(body)
    assert refused.value.code == code


def test_a_message_of_exactly_4000_characters_is_accepted() -> None:
    assert len(frames.parse_message(_frame(text="x" * 4000)).text) == 4000


def test_a_rate_limited_frame_says_when_to_retry() -> None:
    frame = frames.rate_limited_frame(7)
    assert (frame["type"], frame["code"], frame["retry_after_seconds"]) == ("error", "rate_limited", 7)
