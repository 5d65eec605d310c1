"""Records, keys, cursors and output sanitising; TTL on every record type the table holds."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest

from constructs_lib.approval_gate.gate_runtime.records import KeyLayout, ReviewStore
from embedded.clock import START_TIME
from lambdas.shared import cursor as cursors
from lambdas.shared import keys, serialize
from lambdas.shared.errors import InvalidCursor
from lambdas.shared.records import (
    Agent,
    AgentStatus,
    Connection,
    Handoff,
    HandoffStatus,
    Role,
    Session,
    SessionStatus,
    Summary,
    TokenUsage,
    Turn,
    can_transition,
    record_from_item,
)
from lambdas.shared.store import DynamoSessionStore

APP_REVIEW_LAYOUT = KeyLayout(key_prefix=keys.REVIEW_PREFIX, sort_key_value=keys.META_SK)

RECORDS: list[Any] = [
    Session(
        "s-1",
        "c-1",
        SessionStatus.DISCONNECTED,
        7,
        START_TIME,
        START_TIME + 5,
        START_TIME + 99,
        metadata={"source": "web", "nested": {"score": 0.25, "tags": ["a"]}},
        connection_id="conn-1",
        disconnected_at=START_TIME + 5,
        cleanup_shard="CLEANUP#3",
        cleanup_at=START_TIME + 5,
    ),
    Turn("s-1", 42, Role.ASSISTANT, "ありがとう", START_TIME, START_TIME + 99),
    Summary("s-1", 3, "they talked", 21, 30, 30, START_TIME, START_TIME + 99),
    Handoff("s-1", "0001-ab", "billing", "high", HandoffStatus.QUEUED, 1, 2, 3, agent_id="a-1"),
    Agent("a-1", ("manga",), AgentStatus.BUSY, True, "s-1", "Aiko", None, 5, 6, "rev"),
    Connection("conn-1", "s-1", "c-1", "d.example.com", "dev", 1, 2),
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_records_round_trip_through_dynamodb_wire_format(record: Any) -> None:
    wire = serialize.marshal_item(record.to_item())
    back = serialize.unmarshal_item(wire)
    assert type(record).from_item(back) == record
    assert record_from_item(back) == record


def test_key_builders() -> None:
    assert keys.session_key("abc") == {"PK": "SESSION#abc", "SK": "META"}
    assert keys.turn_sk(7) == "TURN#0000000007"
    assert keys.summary_sk(12) == "SUMMARY#0000000012"
    assert keys.agent_skill_key("a", "manga") == {"PK": "AGENT#a", "SK": "SKILL#manga"}
    assert keys.connection_key("x=") == {"PK": "CONN#x=", "SK": "META"}
    assert keys.is_turn_sk("TURN#0000000007")
    assert not keys.is_turn_sk("TURN#7")
    with pytest.raises(ValueError, match="turn_number"):
        keys.turn_sk(-1)


def test_cleanup_shard_is_stable_and_in_range() -> None:
    # crc32("session-1") is fixed: the same shard in every process, unlike hash()
    assert keys.cleanup_shard("session-1", 8) == keys.cleanup_shard("session-1", 8)
    assert keys.cleanup_shard("session-1", 8) == "CLEANUP#6"
    shards = {keys.cleanup_shard(f"s-{n}", 8) for n in range(200)}
    assert shards == set(keys.cleanup_shards(8))


def test_status_machine_helper() -> None:
    assert can_transition("active", "handoff")
    assert not can_transition("archived", "active")
    assert not can_transition("deleted", "deleted")


def test_public_strips_internal_attributes_binary_and_decimals() -> None:
    # Given a raw turn item and a raw session item as DynamoDB returns them
    turn_item = serialize.unmarshal_item(serialize.marshal_item(RECORDS[1].to_item()))
    session_item = serialize.unmarshal_item(serialize.marshal_item(RECORDS[0].to_item()))
    # When they are sanitised for output
    turn_out = serialize.public(turn_item)
    session_out = serialize.public(session_item)
    # Then no key, TTL, index attribute or binary is left and JSON encoding just works
    assert turn_out == {
        "session_id": "s-1",
        "turn_number": 42,
        "role": "assistant",
        "created_at": START_TIME,
    }
    for hidden in ("PK", "SK", "ttl", "cleanup_shard", "cleanup_at"):
        assert hidden not in session_out
    assert session_out["metadata"] == {"source": "web", "nested": {"score": 0.25, "tags": ["a"]}}
    assert isinstance(session_out["turn_count"], int)
    json.dumps(session_out)


def test_public_of_records_keeps_decompressed_text() -> None:
    out = serialize.public(RECORDS[1])
    assert out["content"] == "ありがとう"
    assert "ttl" not in out
    agent = serialize.public(next(r for r in RECORDS if isinstance(r, Agent)))
    assert "revision" not in agent
    assert agent["skills"] == ["manga"]
    assert serialize.plain(Decimal("2.50")) == 2.5
    assert serialize.plain({b"x", "y"} - {b"x"}) == ["y"]


def test_cursor_codec_is_strict() -> None:
    token = cursors.encode("turns:s-1", {"PK": "SESSION#s-1", "SK": "TURN#0000000003"})
    shape = {"PK": str, "SK": str}
    assert cursors.decode(token, "turns:s-1", shape)["SK"] == "TURN#0000000003"
    with pytest.raises(InvalidCursor):
        cursors.decode(token, "turns:s-2", shape)
    with pytest.raises(InvalidCursor):
        cursors.decode(token, "turns:s-1", {"PK": str})
    with pytest.raises(InvalidCursor):
        cursors.decode(token, "turns:s-1", {"PK": str, "SK": int})


def test_every_record_type_is_written_with_a_ttl_except_the_agent_registry(store: DynamoSessionStore) -> None:
    # Given one record of every type, written through the store
    session_id = store.sessions.create_session("cust-1").session_id
    store.turns.add_turn(session_id, "user", "hi")
    store.turns.put_summary(session_id, 1, summary_text="s", window_start=1, window_end=1, turn_count_at_summary=1)
    store.handoffs.put_handoff(session_id, reason="billing")
    # (reviews are the approval gate's, written by its own code with the layout the app gives it)
    ReviewStore(store.table.table_name, layout=APP_REVIEW_LAYOUT, client=store.table.client).put_review(
        "{}", requested_by="ops"
    )
    store.agents.put_agent(Agent("a-1", ("manga",)))
    store.agents.register_agent("a-2", name="Agent Two", skills=("manga",))
    store.connections.put_connection(
        "conn-1", session_id=session_id, customer_id="cust-1", domain_name="d", stage="dev"
    )
    # When the whole (test) table is read
    items = store.table.client.scan(TableName=store.table.table_name)["Items"]
    # Then every item carries a numeric ttl in the future, except the registry's: an agent stays
    # registered however long it is idle (META, its skill rows and its directory row)
    kinds = {(item["PK"]["S"].split("#")[0], item["SK"]["S"].split("#")[0]) for item in items}
    assert kinds == {
        ("SESSION", "META"),
        ("SESSION", "TURN"),
        ("SESSION", "SUMMARY"),
        ("SESSION", "HANDOFF"),
        ("REVIEW", "META"),
        ("AGENT", "META"),
        ("AGENT", "SKILL"),
        ("CONN", "META"),
        ("DIRECTORY", "AGENT"),
    }
    for item in items:
        if item["PK"]["S"].startswith(("AGENT#", "DIRECTORY#")):
            assert "ttl" not in item, item
        else:
            assert int(item["ttl"]["N"]) > START_TIME, item["SK"]
    # And the table itself has TTL enabled on that attribute
    ttl = store.table.client.describe_time_to_live(TableName=store.table.table_name)
    assert ttl["TimeToLiveDescription"]["AttributeName"] == "ttl"


def test_client_is_created_lazily_and_once(ddb_client: Any, table_name: str) -> None:
    # Given a store built without a client (as a handler module does at import)
    store = DynamoSessionStore(table_name)
    assert store.table._client is None
    # When it is used twice
    first = store.table.client
    store.sessions.create_session("cust-1")
    # Then one client was created, on first use, and kept
    assert store.table.client is first


@pytest.mark.parametrize(
    "options",
    [{"cleanup_shards": 0}, {"ttl_hours": 0}, {"max_batch_retries": -1}, {"backoff_base_seconds": 9.0}],
)
def test_store_options_are_validated(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=next(iter(options)).split("_")[0]):
        DynamoSessionStore("table", **options)


def test_a_reply_turn_keeps_the_models_usage_and_a_caller_sees_it_as_plain_numbers() -> None:
    turn = Turn("s-1", 3, Role.ASSISTANT, "Try Frieren.", 100, 200, input_tokens=1200, output_tokens=40)
    item = turn.to_item()
    assert (item["input_tokens"], item["output_tokens"]) == (1200, 40)
    assert Turn.from_item(item) == turn
    assert turn.usage == TokenUsage(1200, 40)
    assert TokenUsage(1200, 40).total == 1240
    shown = json.loads(json.dumps(serialize.public(turn)))
    assert (shown["input_tokens"], shown["output_tokens"]) == (1200, 40)
    # A turn without usage stores and shows none
    plain_turn = Turn("s-1", 2, Role.USER, "hi", 100, 200)
    assert plain_turn.usage is None
    assert "input_tokens" not in plain_turn.to_item()
    assert "input_tokens" not in serialize.public(plain_turn)
