"""The agents' registry in the table: a change keeps what it does not name, and loses no race."""

from __future__ import annotations

from typing import Any

import pytest

from lambdas.shared import keys
from lambdas.shared.errors import AgentUnavailable
from lambdas.shared.records import Agent, AgentStatus
from lambdas.shared.serialize import marshal_item, unmarshal_item
from lambdas.shared.store import DynamoSessionStore


def _directory_row(store: DynamoSessionStore, agent_id: str) -> dict[str, Any]:
    item = store.table.client.get_item(
        TableName=store.table.table_name, Key=marshal_item(keys.agent_directory_key(agent_id))
    )["Item"]
    return unmarshal_item(item)


@pytest.fixture
def aiko(store: DynamoSessionStore) -> Agent:
    return store.agents.register_agent("aiko", name="Aiko", skills=("manga",), is_manager=True)


def test_a_new_name_reaches_the_directory_and_keeps_the_skills_and_the_manager_flag(
    store: DynamoSessionStore, aiko: Agent
) -> None:
    changed = store.agents.update_agent("aiko", name="Aiko S.")
    assert (changed.name, changed.skills, changed.is_manager) == ("Aiko S.", ("manga",), True)
    assert store.agents.get_agent("aiko") == changed
    assert _directory_row(store, "aiko")["name"] == "Aiko S."


def test_new_skills_keep_the_name_in_the_agent_and_the_directory(store: DynamoSessionStore, aiko: Agent) -> None:
    changed = store.agents.update_agent("aiko", skills=("billing",))
    assert (changed.name, changed.skills, changed.is_manager) == ("Aiko", ("billing",), True)
    assert _directory_row(store, "aiko")["name"] == "Aiko"


def test_the_manager_flag_alone_can_be_taken_away(store: DynamoSessionStore, aiko: Agent) -> None:
    changed = store.agents.update_agent("aiko", is_manager=False)
    assert (changed.name, changed.skills, changed.is_manager) == ("Aiko", ("manga",), False)


def test_a_change_that_lost_a_race_is_refused_not_applied_over_the_other(
    store: DynamoSessionStore, aiko: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given another admin's change landing between this change's read and its write
    registered = store.agents._registered

    def read_then_raced(agent_id: str) -> Agent:
        current = registered(agent_id)
        monkeypatch.setattr(store.agents, "_registered", registered)
        store.agents.update_agent(agent_id, skills=("billing",))
        return current

    monkeypatch.setattr(store.agents, "_registered", read_then_raced)
    # When this change commits, Then it is refused and the other's stands
    with pytest.raises(AgentUnavailable):
        store.agents.update_agent("aiko", name="Aiko S.")
    kept = store.agents.get_agent("aiko")
    assert kept is not None
    assert (kept.name, kept.skills) == ("Aiko", ("billing",))


def test_a_manager_behind_an_available_agent_who_is_not_one_is_found(store: DynamoSessionStore) -> None:
    store.agents.put_agent(Agent("a-1", ("manga",)))
    store.agents.put_agent(Agent("a-2", ("manga",), is_manager=True))
    found = store.agents.find_available_agent("manga", managers_only=True)
    assert found is not None
    assert found.agent_id == "a-2"


def test_the_search_reads_at_most_25_candidates(store: DynamoSessionStore, clock: Any) -> None:
    # Given 25 index rows, longest-waiting first, whose agents are busy by now (the index lags),
    # and an available agent behind them
    for n in range(26):
        store.agents.put_agent(Agent(f"a-{n:02}", ("manga",)))
        clock.advance(1)
    for n in range(25):
        store.table.client.update_item(
            TableName=store.table.table_name,
            Key=marshal_item(keys.agent_key(f"a-{n:02}")),
            UpdateExpression="SET #s = :b",
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues={":b": {"S": AgentStatus.BUSY.value}},
        )
    # Then the search stops before it (the handoff waits and is offered the next free agent)
    assert store.agents.find_available_agent("manga") is None
