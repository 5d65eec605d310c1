"""lambdas.shared.schema: the table's key and index shapes the table and the store agree on."""

from __future__ import annotations

from lambdas.shared import schema


def test_the_four_indexes_and_their_keys() -> None:
    assert [(i.name, i.partition_key, i.sort_key) for i in schema.GLOBAL_INDEXES] == [
        ("GSI1", "customer_id", "updated_at"),
        ("CleanupIndex", "cleanup_shard", "cleanup_at"),
        ("AvailableAgentsIndex", "available_skill", "available_since"),
        ("StatusIndex", "status_key", "status_sort"),
    ]


def test_the_sparse_indexes_project_only_what_their_readers_need() -> None:
    assert schema.CLEANUP.include == ("session_id", "status", "customer_id")
    assert schema.AVAILABLE_AGENTS.include == ("agent_id", "skills")
    # Nothing a turn changes (updated_at, turn_count): each change of a projected attribute is an index write
    assert schema.SESSIONS_BY_STATUS.include == ("session_id", "customer_id", "status", "created_at")
    assert schema.CUSTOMER_SESSIONS.include is None  # ALL
