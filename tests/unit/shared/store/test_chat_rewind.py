"""Rewinding a chat to one of the customer's turns: one conditional transaction, on moto."""

from __future__ import annotations

import pytest

from lambdas.shared.errors import (
    InvalidInput,
    RewindTooLong,
    SessionChanged,
    SessionClosed,
    SessionInHandoff,
    SessionNotFound,
)
from lambdas.shared.records import Role
from lambdas.shared.store import DynamoSessionStore


def conversation(store: DynamoSessionStore, exchanges: int, customer_id: str = "alice") -> str:
    """A session of ``customer_id`` with ``exchanges`` question/answer pairs (turn 1 is the first question)."""
    session_id = store.sessions.create_session(customer_id).session_id
    for n in range(exchanges):
        store.turns.add_turn(session_id, Role.USER, f"question {n + 1}")
        store.turns.add_turn(session_id, Role.ASSISTANT, f"answer {n + 1}")
    return session_id


def numbers(store: DynamoSessionStore, session_id: str) -> list[int]:
    return [t.turn_number for t in store.turns.list_turns(session_id, limit=100).items]


def summary_numbers(store: DynamoSessionStore, session_id: str) -> list[int]:
    return [s.summary_number for s in store.chat._summaries(session_id)]


def summarise(store: DynamoSessionStore, session_id: str, number: int, start: int, end: int) -> None:
    store.turns.put_summary(
        session_id, number, summary_text=f"s{number}", window_start=start, window_end=end, turn_count_at_summary=end
    )


def test_rewind_removes_every_later_turn_and_answers_the_turn_again(store: DynamoSessionStore) -> None:
    # Given three exchanges (turns 1..6)
    session_id = conversation(store, 3)
    # When the customer asks again for an answer to their second question (turn 3)
    rewound = store.chat.rewind(session_id, "alice", 3, None, context_turns=10)
    # Then turns 4..6 are gone, turn 3 is last and the counter says so
    assert rewound.removed_turns == (4, 5, 6)
    assert numbers(store, session_id) == [1, 2, 3]
    session = store.sessions.get_session(session_id)
    assert session.turn_count == 3
    assert session.rewinds == 1
    assert rewound.session.turn_count == 3
    assert rewound.session.rewinds == 1
    # And the model's context ends with the unchanged question
    assert [t.content for t in rewound.context.turns] == ["question 1", "answer 1", "question 2"]
    assert rewound.turn.content == "question 2"
    # And the next turn takes the number after it
    assert store.turns.add_turn(session_id, Role.ASSISTANT, "another answer").turn_number == 4


def test_an_edited_turn_is_stored_with_its_new_text_and_the_summary_covering_it_goes(
    store: DynamoSessionStore,
) -> None:
    # Given twelve turns, a summary of 1..4 and one of 5..10
    session_id = conversation(store, 6)
    summarise(store, session_id, 1, 1, 4)
    summarise(store, session_id, 2, 5, 10)
    # When the customer edits turn 5
    rewound = store.chat.rewind(session_id, "alice", 5, "question 3, edited", context_turns=3)
    # Then turn 5 holds the new text, later turns and the summary covering turn 5 are gone
    assert numbers(store, session_id) == [1, 2, 3, 4, 5]
    assert store.turns.turns_between(session_id, 5, 5)[0].content == "question 3, edited"
    assert rewound.removed_summaries == (2,)
    assert summary_numbers(store, session_id) == [1]
    # And the model answers from the kept summary and the newest turns, the edited one last
    assert rewound.context.summary is not None
    assert rewound.context.summary.summary_number == 1
    assert [t.content for t in rewound.context.turns] == ["question 2", "answer 2", "question 3, edited"]


def test_a_summary_ending_at_an_unedited_turn_stays(store: DynamoSessionStore) -> None:
    session_id = conversation(store, 4)
    summarise(store, session_id, 1, 1, 5)
    rewound = store.chat.rewind(session_id, "alice", 5, None, context_turns=5)
    assert rewound.removed_summaries == ()
    assert summary_numbers(store, session_id) == [1]


def test_a_reply_computed_before_the_rewind_is_not_stored_after_it(store: DynamoSessionStore) -> None:
    # Given a reply being written to turn 5 when the session had not been rewound
    session_id = conversation(store, 3)
    store.turns.add_turn(session_id, Role.USER, "question 4")
    # When the customer rewinds to turn 3 meanwhile
    store.chat.rewind(session_id, "alice", 3, None, context_turns=5)
    # Then the late reply is refused and nothing is stored
    with pytest.raises(SessionChanged):
        store.turns.add_turn(session_id, Role.ASSISTANT, "late answer to question 4", rewinds=0)
    assert numbers(store, session_id) == [1, 2, 3]
    # And the reply to the rewound turn (read after the rewind) is stored
    assert store.turns.add_turn(session_id, Role.ASSISTANT, "new answer", rewinds=1).turn_number == 4


def test_a_message_stored_while_rewinding_refuses_the_rewind_and_nothing_is_removed(
    store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a message that arrives between the rewind's reads and its transaction
    session_id = conversation(store, 3)
    read = store.turns.turns_between

    def racing(*args: object, **kwargs: object) -> object:
        turns = read(*args, **kwargs)  # type: ignore[arg-type]
        store.turns.add_turn(session_id, Role.USER, "question 4")
        return turns

    monkeypatch.setattr(store.turns, "turns_between", racing)
    # When the customer rewinds
    with pytest.raises(SessionChanged):
        store.chat.rewind(session_id, "alice", 3, "edited", context_turns=5)
    # Then every turn is there, the text unchanged, the counter not moved back
    assert numbers(store, session_id) == [1, 2, 3, 4, 5, 6, 7]
    assert store.turns.turns_between(session_id, 3, 3)[0].content == "question 2"
    assert store.sessions.get_session(session_id).rewinds == 0


def test_a_reserved_turn_not_yet_stored_refuses_the_rewind(store: DynamoSessionStore) -> None:
    session_id = conversation(store, 2)
    store.turns.reserve_turn(session_id)  # turn 5's number is taken, the turn is being written
    with pytest.raises(SessionChanged):
        store.chat.rewind(session_id, "alice", 3, None, context_turns=5)
    assert numbers(store, session_id) == [1, 2, 3, 4]


def test_a_session_in_handoff_is_not_rewound(store: DynamoSessionStore) -> None:
    session_id = conversation(store, 2)
    store.sessions.update_status(session_id, "handoff")
    with pytest.raises(SessionInHandoff):
        store.chat.rewind(session_id, "alice", 1, None, context_turns=5)
    assert numbers(store, session_id) == [1, 2, 3, 4]


def test_a_handoff_starting_while_rewinding_refuses_the_rewind(
    store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    session_id = conversation(store, 2)
    read = store.turns.turns_between

    def racing(*args: object, **kwargs: object) -> object:
        turns = read(*args, **kwargs)  # type: ignore[arg-type]
        store.sessions.update_status(session_id, "handoff")
        return turns

    monkeypatch.setattr(store.turns, "turns_between", racing)
    with pytest.raises(SessionInHandoff):
        store.chat.rewind(session_id, "alice", 1, None, context_turns=5)
    assert numbers(store, session_id) == [1, 2, 3, 4]


def test_another_customers_session_is_not_found_and_untouched(store: DynamoSessionStore) -> None:
    session_id = conversation(store, 2)
    with pytest.raises(SessionNotFound):
        store.chat.rewind(session_id, "mallory", 1, None, context_turns=5)
    assert numbers(store, session_id) == [1, 2, 3, 4]


def test_an_ended_session_is_closed(store: DynamoSessionStore) -> None:
    session_id = conversation(store, 1)
    store.sessions.update_status(session_id, "disconnected")
    with pytest.raises(SessionClosed):
        store.chat.rewind(session_id, "alice", 1, None, context_turns=5)


@pytest.mark.parametrize("turn_number", [2, 5, 0, True, "1"])
def test_only_a_customer_turn_of_the_session_can_be_rewound_to(store: DynamoSessionStore, turn_number: object) -> None:
    session_id = conversation(store, 2)
    with pytest.raises(InvalidInput):
        store.chat.rewind(session_id, "alice", turn_number, None, context_turns=5)  # type: ignore[arg-type]
    assert numbers(store, session_id) == [1, 2, 3, 4]


def test_a_tail_of_99_records_is_removed_in_one_transaction(store: DynamoSessionStore) -> None:
    # Given 100 turns: rewinding to turn 1 removes 99 turns, the session's write makes 100 actions
    session_id = conversation(store, 50)
    rewound = store.chat.rewind(session_id, "alice", 1, None, context_turns=5)
    assert len(rewound.removed_turns) == 99
    assert numbers(store, session_id) == [1]


def test_a_longer_tail_is_refused_and_nothing_is_removed(store: DynamoSessionStore) -> None:
    # Given 100 turns and a summary past turn 1: 100 records to remove, one more than fits
    session_id = conversation(store, 50)
    summarise(store, session_id, 1, 1, 10)
    with pytest.raises(RewindTooLong, match="would remove 100 records; at most 99"):
        store.chat.rewind(session_id, "alice", 1, None, context_turns=5)
    # An edit takes one action more: 98 records at most
    with pytest.raises(RewindTooLong, match="at most 98"):
        store.chat.rewind(session_id, "alice", 1, "edited", context_turns=5)
    assert len(numbers(store, session_id)) == 100
    assert store.sessions.get_session(session_id).turn_count == 100
