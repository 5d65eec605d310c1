"""lambdas.usecases.rewind: a session rewound once per key; a retry gets the first answer and changes nothing."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest

from lambdas.shared import env, idempotency, keys
from lambdas.shared.records import Role, Summary, TokenUsage, Turn
from lambdas.shared.responder import ReplyEnd
from lambdas.shared.store import DynamoSessionStore
from lambdas.usecases import rewind


@pytest.fixture
def session_id(store: DynamoSessionStore, table_name: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A session of alice with two exchanges (questions at turns 1 and 3)."""
    monkeypatch.setenv("TABLE_NAME", table_name)  # the idempotency records live in the stage's table
    env.reset()
    session_id = store.sessions.create_session("alice").session_id
    for text, role in (("q1", Role.USER), ("a1", Role.ASSISTANT), ("q2", Role.USER), ("a2", Role.ASSISTANT)):
        store.turns.add_turn(session_id, role, text)
    yield session_id
    env.reset()


def test_a_rewind_answers_what_it_removed_and_hands_over_the_turn_to_answer(
    store: DynamoSessionStore, session_id: str
) -> None:
    done = rewind.rewind(store, session_id, "alice", 1, "q1 edited", None)
    assert done.answer == {
        "session_id": session_id,
        "turn_number": 1,
        "removed_turns": [2, 3, 4],
        "removed_summaries": [],
    }
    assert done.rewound is not None
    assert done.rewound.turn.content == "q1 edited"


def test_a_keyed_retry_gets_the_first_answer_and_changes_nothing(store: DynamoSessionStore, session_id: str) -> None:
    # Given a keyed rewind to turn 3, after which the chat went on
    first = rewind.rewind(store, session_id, "alice", 3, None, "k-1")
    store.turns.add_turn(session_id, Role.ASSISTANT, "a2 again")
    # When it is sent again with its key
    again = rewind.rewind(store, session_id, "alice", 3, None, "k-1")
    # Then it answers as the first did and removes nothing
    assert again.rewound is None
    assert (
        again.answer
        == first.answer
        == {
            "session_id": session_id,
            "turn_number": 3,
            "removed_turns": [4],
            "removed_summaries": [],
        }
    )
    assert store.sessions.get_session(session_id).turn_count == 4


def test_a_key_reused_for_another_rewind_changes_nothing(store: DynamoSessionStore, session_id: str) -> None:
    rewind.rewind(store, session_id, "alice", 3, None, "k-1")
    with pytest.raises(idempotency.KeyReused):
        rewind.rewind(store, session_id, "alice", 1, None, "k-1")
    assert store.sessions.get_session(session_id).turn_count == 3


class ReportingModel:
    """Answers in one piece and reports the tokens it used, as Bedrock's stream does."""

    def stream(self, turns: Sequence[Turn], *, summary: Summary | None = None) -> Iterator[str | ReplyEnd]:
        yield "Volume 4 is out."
        yield ReplyEnd("end_turn", TokenUsage(300, 5))


def test_a_whole_reply_stores_the_models_usage_and_adds_it_to_the_customers_day(
    store: DynamoSessionStore, session_id: str
) -> None:
    done = rewind.rewind(store, session_id, "alice", 3, None, None)
    assert done.rewound is not None
    answered = rewind.whole_reply(store, ReportingModel(), done.rewound)
    assert answered == {"turn_number": 4, "text": "Volume 4 is out.", "blocked": False}
    assert store.turns.list_turns(session_id).items[-1].usage == TokenUsage(300, 5)
    day = store.table.get(keys.token_budget_key("alice", "2026-01-01"))
    assert day is not None
    assert (day["tokens"], day["input_tokens"], day["output_tokens"]) == (305, 300, 5)
