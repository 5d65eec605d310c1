"""The agents' registry in the table: a change keeps what it does not name, and loses no race."""

from __future__ import annotations

from typing import Any

import pytest

from lambdas.shared import cursor as cursors
from lambdas.shared import keys
from lambdas.shared.errors import AgentExists, AgentUnavailable, BatchWriteIncomplete, InvalidCursor, InvalidInput
from lambdas.shared.records import Agent, AgentStatus
from lambdas.shared.serialize import marshal_item
from lambdas.shared.store import MAX_AGENT_SKILLS, DynamoSessionStore


def _directory_row(store: DynamoSessionStore, agent_id: str) -> dict[str, Any]:
    row = store.table.get(keys.agent_directory_key(agent_id))
    assert row is not None
    return row


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


def _register(store: DynamoSessionStore, count: int) -> list[str]:
    ids = [f"agent-{n:02}" for n in range(count)]
    for agent_id in ids:
        store.agents.register_agent(agent_id, name=agent_id, skills=("manga",))
    return ids


def test_the_directory_pages_with_cursors_bound_to_it(store: DynamoSessionStore) -> None:
    ids = _register(store, 5)
    first = store.agents.list_agents(limit=3)
    assert [a.agent_id for a in first.items] == ids[:3]
    assert first.next_cursor is not None
    rest = store.agents.list_agents(limit=3, cursor=first.next_cursor)
    assert [a.agent_id for a in rest.items] == ids[3:]
    # A cursor names the directory listing and a row of it: one made by hand that way reads on from there
    handmade = cursors.encode("agents", keys.agent_directory_key(ids[1]))
    assert [a.agent_id for a in store.agents.list_agents(cursor=handmade).items] == ids[2:]


@pytest.mark.parametrize(
    ("scope", "position"),
    [
        ("items:s-1", keys.agent_directory_key("agent-01")),  # minted for another listing
        ("agents", keys.key("SESSION#s-1", f"{keys.AGENT_PREFIX}agent-01")),  # another partition
        ("agents", keys.key(keys.AGENT_DIRECTORY_PK, "META")),  # not an agent's row
    ],
)
def test_a_cursor_outside_the_directory_is_refused(
    store: DynamoSessionStore, scope: str, position: dict[str, str]
) -> None:
    _register(store, 2)
    with pytest.raises(InvalidCursor):
        store.agents.list_agents(cursor=cursors.encode(scope, position))


def test_a_status_lists_only_the_agents_in_it(store: DynamoSessionStore) -> None:
    ids = _register(store, 4)
    for agent_id in ids[1::2]:
        store.agents.set_presence(agent_id, AgentStatus.AVAILABLE)
    listed = store.agents.list_agents(status="available")
    assert [a.agent_id for a in listed.items] == ids[1::2]
    assert [a.agent_id for a in store.agents.list_agents(status=AgentStatus.OFFLINE).items] == ids[::2]


def test_fails_on_a_status_that_is_not_one_naming_it(store: DynamoSessionStore) -> None:
    with pytest.raises(InvalidInput, match="status"):
        store.agents.list_agents(status="sleeping")


def test_agents_the_table_handed_back_unread_are_read_again(
    store: DynamoSessionStore, sleeps: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a table that hands back all but the first key of the first read, as under throttling
    ids = _register(store, 4)
    real = store.table.client.batch_get_item
    calls: list[int] = []

    def throttled_once(**params: Any) -> dict[str, Any]:
        ((table, request),) = params["RequestItems"].items()
        calls.append(len(request["Keys"]))
        if len(calls) > 1:
            return real(**params)
        answered = real(RequestItems={table: {**request, "Keys": request["Keys"][:1]}})
        return {**answered, "UnprocessedKeys": {table: {**request, "Keys": request["Keys"][1:]}}}

    monkeypatch.setattr(store.table.client, "batch_get_item", throttled_once)
    # Then the page holds every agent, in order, after one backed-off retry of the three
    assert [a.agent_id for a in store.agents.list_agents().items] == ids
    assert calls == [4, 3]
    assert len(sleeps) == 1


def test_agents_the_table_keeps_handing_back_are_an_error_after_the_retry_bound(
    make_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_store(max_batch_retries=2)
    _register(store, 3)
    calls: list[int] = []

    def always_throttled(**params: Any) -> dict[str, Any]:
        calls.append(1)
        return {"Responses": {}, "UnprocessedKeys": params["RequestItems"]}

    monkeypatch.setattr(store.table.client, "batch_get_item", always_throttled)
    with pytest.raises(BatchWriteIncomplete):
        store.agents.list_agents()
    assert len(calls) == 3


def test_a_released_agent_who_chose_away_stays_out_of_the_index_and_one_who_did_not_is_offered(
    store: DynamoSessionStore, clock: Any
) -> None:
    # Given two busy agents, one of whom chose away while serving
    for agent_id in ("stays", "leaves"):
        store.agents.put_agent(Agent(agent_id, ("manga",)))
        store.agents.reserve_agent(agent_id, f"s-{agent_id}")
    store.agents.set_presence("leaves", "away")
    clock.advance(30)
    # When both are released
    stays, leaves = store.agents.release_agent("stays"), store.agents.release_agent("leaves")
    # Then the one who stayed is available since now and offered; the other is away and not
    assert (stays.status, stays.available_since, stays.current_session_id) == (AgentStatus.AVAILABLE, clock(), None)
    assert (leaves.status, leaves.available_since) == (AgentStatus.AWAY, None)
    assert store.agents.get_agent("leaves") == leaves
    found = store.agents.find_available_agent("manga")
    assert found is not None
    assert found.agent_id == "stays"


def test_a_retired_agent_is_marked_in_the_directory_when_it_retired(
    store: DynamoSessionStore, aiko: Agent, clock: Any
) -> None:
    clock.advance(60)
    retired = store.agents.retire_agent("aiko")
    assert (retired.status, retired.retired_at) == (AgentStatus.RETIRED, clock())
    assert _directory_row(store, "aiko")["retired_at"] == clock()


def test_a_reservation_that_lands_while_an_agent_is_retired_stops_the_retirement(
    store: DynamoSessionStore, aiko: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an available agent, reserved for a customer between the retirement's read and its write
    store.agents.set_presence("aiko", AgentStatus.AVAILABLE)
    read = store.agents.get_agent

    def read_then_reserve(agent_id: str) -> Agent | None:
        agent = read(agent_id)
        monkeypatch.setattr(store.agents, "get_agent", read)
        store.agents.reserve_agent("aiko", "s-1")
        return agent

    monkeypatch.setattr(store.agents, "get_agent", read_then_reserve)
    # When the retirement writes / Then it is refused: the agent serves its customer, not retired
    with pytest.raises(AgentUnavailable) as refused:
        store.agents.retire_agent("aiko")
    assert refused.value.agent_id == "aiko"
    agent = store.agents.get_agent("aiko")
    assert agent is not None
    assert (agent.status, agent.current_session_id) == (AgentStatus.BUSY, "s-1")
    assert "retired_at" not in _directory_row(store, "aiko")


def test_an_agent_registered_without_the_flag_is_an_offline_agent_and_no_manager(store: DynamoSessionStore) -> None:
    # When an agent is registered without saying it is a manager
    registered = store.agents.register_agent("ren", name="Ren", skills=("manga",))

    # Then it is no manager and starts offline, as read back from the registry
    stored = store.agents.get_agent("ren")
    assert stored == registered
    assert stored is not None
    assert (stored.is_manager, stored.status, stored.skills) == (False, AgentStatus.OFFLINE, ("manga",))


def test_a_presence_change_that_lost_a_race_to_a_reservation_is_refused(
    store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an available agent whom a handoff reserves between this change's read and its write
    store.agents.put_agent(Agent("ren", ("manga",), status=AgentStatus.AVAILABLE))
    registered = store.agents._registered

    def read_then_reserved(agent_id: str) -> Agent:
        current = registered(agent_id)
        monkeypatch.setattr(store.agents, "_registered", registered)
        store.agents.reserve_agent(agent_id, "s-1")
        return current

    monkeypatch.setattr(store.agents, "_registered", read_then_reserved)
    # When the agent goes away, Then the change is refused and the reservation stands
    with pytest.raises(AgentUnavailable):
        store.agents.set_presence("ren", "away")
    kept = store.agents.get_agent("ren")
    assert kept is not None
    assert (kept.status, kept.current_session_id) == (AgentStatus.BUSY, "s-1")


def test_a_written_agent_carries_the_stores_stamps_and_each_skill_once_whatever_it_was_given(
    store: DynamoSessionStore, clock: Any
) -> None:
    # Given a busy agent with as many skills as allowed, one repeated, and stamps of its own
    skills = tuple(f"skill-{n}" for n in range(MAX_AGENT_SKILLS))
    given = Agent("ren", (*skills, skills[0]), AgentStatus.BUSY, available_since=5, updated_at=7, ttl=9, revision="r")

    # When it is written
    store.agents.put_agent(given)

    # Then the store kept each skill once, in order, and set the stamps itself: no expiry for a registry entry
    stored = store.agents.get_agent("ren")
    assert stored is not None
    assert stored.skills == skills
    assert (stored.available_since, stored.updated_at, stored.ttl) == (None, clock(), None)
    assert stored.revision not in ("", "r")


def test_an_available_agent_keeps_when_it_became_available_or_becomes_available_now(
    store: DynamoSessionStore, clock: Any
) -> None:
    store.agents.put_agent(Agent("ren", ("manga",), AgentStatus.AVAILABLE, available_since=5))
    store.agents.put_agent(Agent("aki", ("manga",), AgentStatus.AVAILABLE))
    since = {a: getattr(store.agents.get_agent(a), "available_since", "missing") for a in ("ren", "aki")}
    assert since == {"ren": 5, "aki": clock()}


def test_more_skills_than_the_bound_are_refused_naming_it(store: DynamoSessionStore) -> None:
    too_many = tuple(f"skill-{n}" for n in range(MAX_AGENT_SKILLS + 1))
    with pytest.raises(InvalidInput, match=f"at most {MAX_AGENT_SKILLS} strings"):
        store.agents.put_agent(Agent("ren", too_many))
    with pytest.raises(InvalidInput, match=r"^agent status must be one of"):
        store.agents.put_agent(Agent("ren", ("manga",), "napping"))  # type: ignore[arg-type]
    assert store.agents.get_agent("ren") is None


def test_a_registered_agent_who_comes_online_is_offered_from_then(store: DynamoSessionStore, clock: Any) -> None:
    # Given an agent registered a minute ago, offline
    store.agents.register_agent("ren", name="Ren", skills=("manga",))
    registered_at = clock()
    clock.advance(60)

    # When it says it is available
    online = store.agents.set_presence("ren", "available")

    # Then it is available from now, and the directory still says when it was registered
    assert (online.status, online.available_since) == (AgentStatus.AVAILABLE, clock())
    assert store.agents.get_agent("ren") == online
    assert _directory_row(store, "ren")["registered_at"] == registered_at
    with pytest.raises(InvalidInput, match=r"^presence must be one of"):
        store.agents.set_presence("ren", "napping")


def test_registering_a_taken_id_is_refused_and_leaves_the_agent_as_it_was(
    store: DynamoSessionStore, aiko: Agent
) -> None:
    with pytest.raises(AgentExists):
        store.agents.register_agent("aiko", name="Someone else", skills=("billing",))
    assert store.agents.get_agent("aiko") == aiko
