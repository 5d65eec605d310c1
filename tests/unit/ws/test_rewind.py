"""lambdas.ws.rewind: the ``rewind`` action takes back what followed a customer's message and answers it again."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from embedded.events import ws_event
from lambdas.shared import env
from lambdas.shared.records import Role, SessionStatus, Summary, TokenUsage, Turn
from lambdas.shared.responder import ReplyEnd
from lambdas.shared.store import DynamoSessionStore
from lambdas.ws import message
from tests.support.websocket import sent_frames
from tests.unit.ws.chat import CONN, CTX, customer_context, onboarded, send


def rewind(frame: dict[str, Any], customer: str = "alice") -> dict[str, Any]:
    body = json.dumps({"action": "rewind", **frame})
    return message.handler(
        ws_event("rewind", connection_id=CONN, body=body, authorizer=customer_context(customer)), CTX
    )


class Frames:
    """The frames posted to the connection since the last :meth:`mark`."""

    seen = 0

    @classmethod
    def mark(cls) -> None:
        cls.seen = len(sent_frames(CONN))

    @classmethod
    def new(cls) -> list[dict[str, Any]]:
        return sent_frames(CONN)[cls.seen :]


def contents(ws: DynamoSessionStore, session_id: str) -> list[str]:
    return [t.content for t in ws.turns.list_turns(session_id).items]


def chatted(ws: DynamoSessionStore) -> str:
    """An onboarded session (greeting, turn 1) with two exchanges: questions at turns 2 and 4."""
    session_id = onboarded()
    send("Is Frieren volume 3 out?")
    send("And volume 4?")
    Frames.mark()
    return session_id


def test_rewinding_with_new_text_replaces_the_message_and_streams_a_new_answer(ws: DynamoSessionStore) -> None:
    # Given two answered questions
    session_id = chatted(ws)
    # When the customer edits the first question (turn 2)
    assert rewind({"turn_number": 2, "text": "Is Frieren volume 5 out?"}) == {"statusCode": 200}
    # Then the later turns are gone, the edited question answered and stored as turn 3
    assert contents(ws, session_id)[1:] == ["Is Frieren volume 5 out?", "You said: Is Frieren volume 5 out?"]
    assert Frames.new() == [
        {"type": "rewound", "session_id": session_id, "turn_number": 2, "removed_turns": [3, 4, 5]},
        {
            "type": "delta",
            "session_id": session_id,
            "reply_to": 2,
            "offset": 0,
            "text": "You said: Is Frieren volume 5 out?",
        },
        {"type": "final", "role": "assistant", "session_id": session_id, "reply_to": 2, "turn_number": 3},
    ]


def test_rewinding_without_text_asks_for_another_answer(ws: DynamoSessionStore) -> None:
    session_id = chatted(ws)
    rewind({"turn_number": 4})
    assert contents(ws, session_id)[1:] == [
        "Is Frieren volume 3 out?",
        "You said: Is Frieren volume 3 out?",
        "And volume 4?",
        "You said: And volume 4?",
    ]
    assert [f["type"] for f in Frames.new()] == ["rewound", "delta", "final"]
    assert ws.sessions.get_session(session_id).turn_count == 5


def test_a_resent_rewind_with_its_client_message_id_changes_nothing_again(ws: DynamoSessionStore) -> None:
    # Given a rewind that was made and answered
    session_id = chatted(ws)
    rewind({"turn_number": 2, "text": "Volume 5?", "client_message_id": "r-1"})
    send("Thanks!")  # the chat goes on after it
    before = contents(ws, session_id)
    Frames.mark()
    # When the client sends the same rewind again
    rewind({"turn_number": 2, "text": "Volume 5?", "client_message_id": "r-1"})
    # Then it is told it was done, and nothing is removed or answered again
    assert contents(ws, session_id) == before
    assert Frames.new() == [
        {"type": "duplicate", "session_id": session_id, "client_message_id": "r-1", "turn_number": 2}
    ]


def test_a_client_message_id_reused_for_another_rewind_changes_nothing(ws: DynamoSessionStore) -> None:
    session_id = chatted(ws)
    rewind({"turn_number": 4, "client_message_id": "r-1"})
    before = contents(ws, session_id)
    Frames.mark()
    rewind({"turn_number": 2, "client_message_id": "r-1"})
    assert contents(ws, session_id) == before
    assert Frames.new()[0]["code"] == "client_message_id_reused"


def test_a_rewind_during_a_handoff_is_refused_and_nothing_changes(ws: DynamoSessionStore) -> None:
    session_id = chatted(ws)
    ws.sessions.update_status(session_id, SessionStatus.HANDOFF)
    before = contents(ws, session_id)
    rewind({"turn_number": 2, "text": "changed"})
    assert contents(ws, session_id) == before
    [frame] = Frames.new()
    assert frame["type"] == "error"
    assert frame["code"] == "session_in_handoff"
    assert "support agent" in frame["message"]


def test_rewinding_to_an_answer_is_refused(ws: DynamoSessionStore) -> None:
    session_id = chatted(ws)
    rewind({"turn_number": 3})
    assert len(contents(ws, session_id)) == 5
    [frame] = Frames.new()
    assert frame["code"] == "invalid_turn"
    assert "turn 3 is not one of the customer's messages" in frame["message"]


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        ({}, "invalid_turn"),
        ({"turn_number": "2"}, "invalid_turn"),
        ({"turn_number": 0}, "invalid_turn"),
        ({"turn_number": True}, "invalid_turn"),
        ({"turn_number": 2, "text": ""}, "invalid_text"),
        ({"turn_number": 2, "text": "a\u202eb"}, "invalid_text"),
        ({"turn_number": 2, "client_message_id": "no spaces"}, "invalid_client_message_id"),
    ],
)
def test_a_malformed_rewind_frame_is_refused_with_the_fix(
    ws: DynamoSessionStore, frame: dict[str, Any], code: str
) -> None:
    session_id = chatted(ws)
    rewind(frame)
    assert len(contents(ws, session_id)) == 5
    [error] = Frames.new()
    assert error["type"] == "error"
    assert error["code"] == code


def test_a_rewind_from_a_connection_without_a_customer_is_refused(ws: DynamoSessionStore) -> None:
    session_id = chatted(ws)
    body = json.dumps({"action": "rewind", "turn_number": 2})
    message.handler(ws_event("rewind", connection_id=CONN, body=body, authorizer={}), CTX)
    assert len(contents(ws, session_id)) == 5
    assert Frames.new()[0]["code"] == "forbidden"


class RewindingResponder:
    """Answers; while answering the first message, the customer rewinds the chat (a second frame)."""

    def __init__(self) -> None:
        self.calls = 0

    def stream(self, turns: Sequence[Turn], *, summary: Summary | None = None) -> Iterator[str | ReplyEnd]:
        self.calls += 1
        if self.calls == 1:
            rewind({"turn_number": 2, "text": "Actually, volume 6?"})
        yield f"answer to {turns[-1].content}"
        yield ReplyEnd("end_turn")


def test_a_reply_written_while_the_chat_is_rewound_is_not_stored(
    ws: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a first question whose answer is being written when the customer edits the question
    session_id = onboarded()
    Frames.mark()
    model = RewindingResponder()
    monkeypatch.setattr(message, "responder", lambda: model)
    # When the first answer completes after the rewind
    send("Is Frieren volume 3 out?")
    # Then only the rewound question and its answer are in the transcript
    turns = ws.turns.list_turns(session_id).items
    assert [(t.role, t.content) for t in turns[1:]] == [
        (Role.USER, "Actually, volume 6?"),
        (Role.ASSISTANT, "answer to Actually, volume 6?"),
    ]
    # And the customer is told to discard the superseded reply
    assert Frames.new()[-1]["code"] == "reply_superseded"


def test_a_rewind_over_the_daily_token_budget_is_refused_and_nothing_changes(
    ws: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a customer whose tokens of the day are spent
    monkeypatch.setenv("CHAT_DAILY_TOKEN_BUDGET", "1000")
    env.reset()
    session_id = chatted(ws)
    ws.budgets.spend_tokens("alice", TokenUsage(900, 100))
    before = contents(ws, session_id)
    # When she asks for another answer to her first question
    rewind({"turn_number": 2})
    # Then she is told when the allowance resets, and nothing is taken back or asked of the model
    (frame,) = Frames.new()
    assert (frame["type"], frame["code"]) == ("error", "token_budget_exhausted")
    assert frame["retry_after_seconds"] > 0
    assert frame["resets_at"].endswith("T00:00:00Z")
    assert contents(ws, session_id) == before
