"""lambdas.shared.store.agents: agents and their availability index, on moto."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from embedded.clock import START_TIME, FakeClock
from lambdas.shared import keys
from lambdas.shared.errors import (
    AgentNotFound,
    AgentUnavailable,
    Conflict,
    InvalidInput,
)
from lambdas.shared.records import Agent, AgentStatus
from lambdas.shared.schema import AVAILABLE_AGENTS
from lambdas.shared.store import DynamoSessionStore
from lambdas.shared.store.table import Cancelled, Transaction


def _index_rows(store: DynamoSessionStore, skill: str) -> list[str]:
    """Agent ids the AvailableAgentsIndex holds for ``skill``, longest-waiting first."""
    resp = store.table.client.query(
        TableName=store.table.table_name,
        IndexName=AVAILABLE_AGENTS.name,
        KeyConditionExpression="#s = :s",
        ExpressionAttributeNames={"#s": AVAILABLE_AGENTS.partition_key},
        ExpressionAttributeValues={":s": {"S": skill}},
    )
    return [item["agent_id"]["S"] for item in resp["Items"]]


# ------------------------------------------------------------------ agents


def test_put_agent_indexes_an_available_agent_under_each_skill(
    store: DynamoSessionStore,
) -> None:
    agent = store.agents.put_agent(Agent("a-1", ("billing", "manga"), name="Aiko"))

    assert agent.available_since == START_TIME
    assert agent.ttl is None  # a registry entry: the table's TTL never removes an agent
    assert agent.revision
    assert store.agents.get_agent("a-1") == agent
    raw = store.table.client.get_item(
        TableName=store.table.table_name, Key={"PK": {"S": "AGENT#a-1"}, "SK": {"S": "META"}}
    )
    assert "ttl" not in raw["Item"]
    assert _index_rows(store, "billing") == ["a-1"]
    assert _index_rows(store, "manga") == ["a-1"]


def test_put_agent_moves_index_rows_when_skills_or_status_change(
    store: DynamoSessionStore,
) -> None:
    # Given an available agent with two skills
    store.agents.put_agent(Agent("a-1", ("billing", "manga")))
    # When the agent drops a skill and learns another
    store.agents.put_agent(Agent("a-1", ("manga", "shipping")))
    # Then the index follows
    assert _index_rows(store, "billing") == []
    assert _index_rows(store, "manga") == ["a-1"]
    assert _index_rows(store, "shipping") == ["a-1"]
    # And going offline takes the agent out of the index entirely
    store.agents.put_agent(Agent("a-1", ("manga", "shipping"), status=AgentStatus.OFFLINE))
    assert _index_rows(store, "manga") == []
    assert _index_rows(store, "shipping") == []
    assert store.agents.get_agent("a-1").status == "offline"  # type: ignore[union-attr]


def test_find_available_agent_picks_the_longest_waiting(store: DynamoSessionStore, clock: FakeClock) -> None:
    # Given three agents with a skill who became available one after another
    for agent_id in ("a-1", "a-2", "a-3"):
        store.agents.put_agent(Agent(agent_id, ("manga",), is_manager=agent_id == "a-3"))
        clock.advance(10)
    # When one is reserved
    store.agents.reserve_agent("a-1", "s-1")
    # Then the next longest-waiting one is found; managers_only finds the manager
    found = store.agents.find_available_agent("manga")
    assert found is not None
    assert found.agent_id == "a-2"
    manager = store.agents.find_available_agent("manga", managers_only=True)
    assert manager is not None
    assert manager.agent_id == "a-3"
    assert store.agents.find_available_agent("billing") is None


def test_find_available_agent_skips_stale_index_rows(store: DynamoSessionStore, clock: FakeClock) -> None:
    # Given an index row whose agent META says busy (the index lags behind META)
    store.agents.put_agent(Agent("a-1", ("manga",)))
    store.table.client.update_item(
        TableName=store.table.table_name,
        Key={"PK": {"S": keys.agent_pk("a-1")}, "SK": {"S": "META"}},
        UpdateExpression="SET #s = :b",
        ExpressionAttributeNames={"#s": "status"},
        ExpressionAttributeValues={":b": {"S": "busy"}},
    )
    # When an agent is looked for
    # Then the busy agent is not offered
    assert store.agents.find_available_agent("manga") is None
    # And an agent available after it, behind the stale row, is
    clock.advance(10)
    store.agents.put_agent(Agent("a-2", ("manga",)))
    found = store.agents.find_available_agent("manga")
    assert found is not None
    assert found.agent_id == "a-2"


def test_reserve_and_release_agent(store: DynamoSessionStore, clock: FakeClock) -> None:
    # Given an available agent
    store.agents.put_agent(Agent("a-1", ("manga", "billing")))
    clock.advance(60)
    # When reserved for a session
    busy = store.agents.reserve_agent("a-1", "s-1")
    # Then the agent is busy with it and out of the index
    assert (busy.status, busy.current_session_id) == (AgentStatus.BUSY, "s-1")
    assert store.agents.get_agent("a-1") == busy
    assert _index_rows(store, "manga") == []
    assert _index_rows(store, "billing") == []
    with pytest.raises(AgentUnavailable):
        store.agents.reserve_agent("a-1", "s-2")
    # When released (only by the session it serves)
    with pytest.raises(AgentUnavailable):
        store.agents.release_agent("a-1", session_id="s-2")
    clock.advance(60)
    free = store.agents.release_agent("a-1", session_id="s-1")
    # Then it is available again, waiting since now
    assert (free.status, free.current_session_id) == (AgentStatus.AVAILABLE, None)
    assert free.available_since == START_TIME + 120
    assert store.agents.get_agent("a-1") == free
    assert _index_rows(store, "manga") == ["a-1"]
    with pytest.raises(AgentUnavailable):
        store.agents.release_agent("a-1")


@pytest.mark.parametrize("meanwhile", ["reserved_again", "skill_removed"])
def test_a_release_built_from_an_older_read_changes_nothing(store: DynamoSessionStore, meanwhile: str) -> None:
    # Given an agent busy with s-1, read by a close of s-1 that releases it in its own transaction
    store.agents.put_agent(Agent("a-1", ("manga", "billing")))
    store.agents.reserve_agent("a-1", "s-1")
    read = store.agents.get_agent("a-1")
    assert read is not None
    # And, before that transaction commits, the agent moved on: released and reserved for s-2,
    # or an admin took a skill away while it kept serving s-1
    if meanwhile == "reserved_again":
        store.agents.release_agent("a-1", session_id="s-1")
        store.agents.reserve_agent("a-1", "s-2")
    else:
        store.agents.update_agent("a-1", skills=("manga",))
    before = store.agents.get_agent("a-1")
    # When the close commits the release it built from its read
    tx = Transaction(store.table.table_name)
    store.agents.release(tx, read, session_id="s-1")
    # Then the transaction is refused and the agent is as the later writer left it: still busy,
    # not offered under any skill, its skills unchanged
    with pytest.raises(Cancelled):
        store.table.commit(tx)
    assert store.agents.get_agent("a-1") == before
    assert _index_rows(store, "manga") == _index_rows(store, "billing") == []


def test_two_concurrent_reservations_exactly_one_wins(
    store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an available agent, and two callers who both read it as available before either
    # writes: the get_item wrapper holds each caller's first read until both have read. No timeout,
    # so a starved machine cannot break the barrier; a caller that ends without having read aborts
    # it, so it cannot leave the other waiting. A caller that read has passed the barrier and must
    # not abort it: the other may be released but not yet scheduled, and would see the abort.
    store.agents.put_agent(Agent("a-1", ("manga",)))
    both_read = threading.Barrier(2)
    readers: set[int] = set()
    real_get_item = store.table.client.get_item

    def get_item(**params: Any) -> dict[str, Any]:
        result: dict[str, Any] = real_get_item(**params)
        if threading.get_ident() not in readers:
            readers.add(threading.get_ident())
            both_read.wait()
        return result

    monkeypatch.setattr(store.table.client, "get_item", get_item)
    outcomes: dict[str, Any] = {}

    def reserve(session_id: str) -> None:
        try:
            outcomes[session_id] = store.agents.reserve_agent("a-1", session_id)
        except AgentUnavailable as exc:
            outcomes[session_id] = exc
        finally:
            if threading.get_ident() not in readers:
                both_read.abort()

    # When both reserve at once
    callers = [threading.Thread(target=reserve, args=(sid,)) for sid in ("s-1", "s-2")]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join()
    monkeypatch.setattr(store.table.client, "get_item", real_get_item)
    # Then exactly one wins, the other gets a Conflict, and the agent serves the winner
    winners = [sid for sid, outcome in outcomes.items() if isinstance(outcome, Agent)]
    losers = [sid for sid, outcome in outcomes.items() if isinstance(outcome, Conflict)]
    assert len(winners) == 1
    assert len(losers) == 1
    assert store.agents.get_agent("a-1").current_session_id == winners[0]  # type: ignore[union-attr]


def test_reserve_unknown_agent(store: DynamoSessionStore) -> None:
    with pytest.raises(AgentNotFound):
        store.agents.reserve_agent("nobody", "s-1")
    with pytest.raises(AgentNotFound):
        store.agents.release_agent("nobody")


def test_put_agent_validates_skills(store: DynamoSessionStore) -> None:
    with pytest.raises(InvalidInput):
        store.agents.put_agent(Agent("a-1", tuple(f"skill-{n}" for n in range(41))))
    with pytest.raises(InvalidInput):
        store.agents.put_agent(Agent("a-1", ("",)))
