"""lambdas.ws.continuation: a reply cut short at the model's output budget or the deadline, and its ``continue``."""

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
from lambdas.ws import continuation, gate, message
from tests.support.websocket import sent_frames
from tests.unit.ws.chat import CONN, CTX, customer_context, onboarded, send


class CutShort:
    """A model whose replies are written in ``parts``, each ending as ``stops`` says; it records what it read."""

    def __init__(self, parts: Sequence[tuple[str, str]]) -> None:
        self.parts = list(parts)
        self.read: list[list[tuple[Role, str]]] = []

    def stream(self, turns: Sequence[Turn], *, summary: Summary | None = None) -> Iterator[str | ReplyEnd]:
        self.read.append([(t.role, t.content) for t in turns])
        text, stop = self.parts.pop(0)
        yield text
        yield ReplyEnd(stop)


def go_on(body: str | None = None, customer: str | None = "alice") -> dict[str, Any]:
    authorizer = customer_context(customer) if customer else {}
    raw = json.dumps({"action": "continue"}) if body is None else body
    return message.handler(ws_event("continue", connection_id=CONN, body=raw, authorizer=authorizer), CTX)


def turns_of(ws: DynamoSessionStore, session_id: str) -> list[tuple[int, Role, str, str | None]]:
    return [(t.turn_number, t.role, t.content, t.stopped) for t in ws.turns.list_turns(session_id).items]


def since(mark: int) -> list[dict[str, Any]]:
    return sent_frames(CONN)[mark:]


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> CutShort:
    cut = CutShort([("Frieren is a fantasy series about", "max_tokens"), (" an elf mage's journey.", "end_turn")])
    monkeypatch.setattr(message, "responder", lambda: cut)
    return cut


def test_a_reply_cut_at_max_tokens_is_stored_and_its_rest_comes_with_continue(
    ws: DynamoSessionStore, model: CutShort
) -> None:
    # Given a question whose reply the model stops at its output budget
    session_id = onboarded()
    mark = len(sent_frames(CONN))
    send("What is Frieren about?")
    # Then the partial reply is stored as turn 3, and the final frame says it was cut and can go on
    assert turns_of(ws, session_id)[1:] == [
        (2, Role.USER, "What is Frieren about?", None),
        (3, Role.ASSISTANT, "Frieren is a fantasy series about", "max_tokens"),
    ]
    assert since(mark)[-1] == {
        "type": "final",
        "role": "assistant",
        "session_id": session_id,
        "reply_to": 2,
        "turn_number": 3,
        "stopped": "max_tokens",
        "can_continue": True,
    }
    # When the customer asks to continue
    mark = len(sent_frames(CONN))
    assert go_on() == {"statusCode": 200}
    # Then the rest is announced, streamed and stored as turn 4, its final frame naming the cut reply
    assert since(mark) == [
        {"type": "continuing", "session_id": session_id, "reply_to": 2, "turn_number": 3},
        {"type": "delta", "session_id": session_id, "reply_to": 2, "offset": 0, "text": " an elf mage's journey."},
        {
            "type": "final",
            "role": "assistant",
            "session_id": session_id,
            "reply_to": 2,
            "turn_number": 4,
            "continues": 3,
        },
    ]
    assert turns_of(ws, session_id)[3:] == [(4, Role.ASSISTANT, " an elf mage's journey.", None)]
    # And the model read the cut reply, then the instruction to go on (which is not stored)
    assert model.read[1][-2:] == [
        (Role.ASSISTANT, "Frieren is a fantasy series about"),
        (Role.USER, continuation.CONTINUE_PROMPT),
    ]


def test_a_reply_cut_at_the_deadline_is_continued_the_same_way(
    ws: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    cut = CutShort([("Volume 3 is", "deadline"), (" out in March.", "max_tokens"), (" Enjoy!", "end_turn")])
    monkeypatch.setattr(message, "responder", lambda: cut)
    session_id = onboarded()
    send("Is volume 3 out?")
    assert sent_frames(CONN)[-1]["stopped"] == "deadline"
    # A continuation that is cut again can be continued again
    go_on()
    assert sent_frames(CONN)[-1] == {
        "type": "final",
        "role": "assistant",
        "session_id": session_id,
        "reply_to": 2,
        "turn_number": 4,
        "continues": 3,
        "stopped": "max_tokens",
        "can_continue": True,
    }
    go_on()
    assert [t[2:] for t in turns_of(ws, session_id)[2:]] == [
        ("Volume 3 is", "deadline"),
        (" out in March.", "max_tokens"),
        (" Enjoy!", None),
    ]


def test_continue_after_a_complete_reply_is_refused_and_nothing_changes(
    ws: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a reply the model finished
    monkeypatch.setattr(message, "responder", lambda: CutShort([("Volume 3 is out.", "end_turn")]))
    session_id = onboarded()
    send("Is volume 3 out?")
    before, mark = turns_of(ws, session_id), len(sent_frames(CONN))
    # When the customer asks to continue it
    go_on()
    # Then they are told there is nothing to continue, and nothing is stored or asked of the model
    assert since(mark) == [continuation.NOTHING_TO_CONTINUE]
    assert turns_of(ws, session_id) == before


def test_continue_after_a_customer_message_is_refused(ws: DynamoSessionStore, model: CutShort) -> None:
    # Given a cut reply the customer answered with a new message (whose reply is not written yet)
    session_id = onboarded()
    send("What is Frieren about?")
    ws.turns.add_turn(session_id, Role.USER, "Never mind.")
    mark = len(sent_frames(CONN))
    go_on()
    assert since(mark) == [continuation.NOTHING_TO_CONTINUE]
    assert len(model.read) == 1


def test_continue_during_a_handoff_is_refused(ws: DynamoSessionStore, model: CutShort) -> None:
    session_id = onboarded()
    send("What is Frieren about?")
    ws.sessions.update_status(session_id, SessionStatus.HANDOFF)
    before, mark = turns_of(ws, session_id), len(sent_frames(CONN))
    go_on()
    assert since(mark) == [continuation.IN_HANDOFF]
    assert turns_of(ws, session_id) == before


def test_continue_without_a_session_is_refused(ws: DynamoSessionStore, model: CutShort) -> None:
    # Given a connection whose session was never prepared
    go_on()
    assert sent_frames(CONN) == [gate.NOT_READY]
    assert model.read == []


def test_continue_from_a_connection_without_a_customer_is_refused(ws: DynamoSessionStore, model: CutShort) -> None:
    onboarded()
    mark = len(sent_frames(CONN))
    go_on(customer=None)
    assert since(mark) == [gate.FORBIDDEN]


def test_only_a_continue_frame_is_taken_for_one() -> None:
    assert continuation.wants_continue('{"action": "continue"}')
    assert not continuation.wants_continue('{"action": "sendMessage", "text": "continue"}')
    assert not continuation.wants_continue("not json")
    assert not continuation.wants_continue(None)


def test_a_second_continue_while_the_first_is_answered_is_refused_and_one_rest_is_stored(
    ws: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a cut reply, and a model that is still writing its rest when a second continue arrives
    session_id = onboarded()
    answers: list[dict[str, Any]] = []

    class SecondContinueMeanwhile(CutShort):
        def stream(self, turns: Sequence[Turn], *, summary: Summary | None = None) -> Iterator[str | ReplyEnd]:
            if len(self.read) == 1:  # the continuation is being written: the customer taps again
                answers.append(go_on())
            return super().stream(turns, summary=summary)

    model = SecondContinueMeanwhile([("Frieren is", "max_tokens"), (" an elf's journey.", "end_turn")])
    monkeypatch.setattr(message, "responder", lambda: model)
    send("What is Frieren about?")
    mark = len(sent_frames(CONN))
    # When the customer continues
    go_on()
    # Then the second continue is refused at once, the model is asked once, and one rest is stored
    assert answers == [{"statusCode": 200}]
    assert continuation.ALREADY_CONTINUING in since(mark)
    assert len(model.read) == 2
    assert [t[1:] for t in turns_of(ws, session_id)[2:]] == [
        (Role.ASSISTANT, "Frieren is", "max_tokens"),
        (Role.ASSISTANT, " an elf's journey.", None),
    ]


def test_a_continue_over_the_daily_token_budget_is_refused_and_the_reply_stays_cut(
    ws: DynamoSessionStore, model: CutShort, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a cut reply, and a customer whose tokens of the day are then spent
    monkeypatch.setenv("CHAT_DAILY_TOKEN_BUDGET", "1000")
    env.reset()
    session_id = onboarded()
    send("What is Frieren about?")
    ws.budgets.spend_tokens("alice", TokenUsage(900, 100))
    before, mark = turns_of(ws, session_id), len(sent_frames(CONN))
    # When she asks for the rest
    go_on()
    # Then she is told when the allowance resets; the model is not asked and the reply is not claimed
    (frame,) = since(mark)
    assert (frame["type"], frame["code"]) == ("error", "token_budget_exhausted")
    assert len(model.read) == 1
    assert turns_of(ws, session_id) == before
    assert ws.turns.claim_continuation(session_id, before[-1][0], lease_seconds=30)
