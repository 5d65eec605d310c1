"""lambdas.shared.store.connections: WebSocket connection records, on moto."""

from __future__ import annotations

import pytest

from embedded.clock import START_TIME, FakeClock
from lambdas.shared.errors import InvalidInput
from lambdas.shared.store import DynamoSessionStore


def put(store: DynamoSessionStore, connection_id: str = "conn-1") -> None:
    store.connections.put_connection(
        connection_id, session_id="s-1", customer_id="alice", domain_name="d.example", stage="prod"
    )


def test_a_connection_is_recorded_with_the_session_ttl(store: DynamoSessionStore, clock: FakeClock) -> None:
    put(store)
    connection = store.connections.get_connection("conn-1")
    assert connection is not None
    assert (connection.session_id, connection.customer_id, connection.domain_name, connection.stage) == (
        "s-1",
        "alice",
        "d.example",
        "prod",
    )
    assert connection.ttl == int(clock()) + 24 * 3600


def test_a_retried_connect_overwrites_harmlessly(store: DynamoSessionStore) -> None:
    put(store)
    put(store)
    assert store.connections.get_connection("conn-1") is not None


def test_delete_hands_back_what_it_held_and_then_nothing(store: DynamoSessionStore) -> None:
    put(store)
    deleted = store.connections.delete_connection("conn-1")
    assert deleted is not None
    assert deleted.customer_id == "alice"
    assert store.connections.delete_connection("conn-1") is None
    assert store.connections.get_connection("conn-1") is None


@pytest.mark.parametrize("field", ["session_id", "customer_id", "domain_name", "stage"])
def test_fails_on_an_empty_field(store: DynamoSessionStore, field: str) -> None:
    values = {"session_id": "s-1", "customer_id": "alice", "domain_name": "d", "stage": "prod", field: ""}
    with pytest.raises(InvalidInput, match=field):
        store.connections.put_connection("conn-1", **values)


def test_connection_put_get_delete(store: DynamoSessionStore) -> None:
    connection = store.connections.put_connection(
        "conn=1",
        session_id="s-1",
        customer_id="cust-1",
        domain_name="abc.execute-api.us-east-1.amazonaws.com",
        stage="dev",
    )
    assert connection.ttl == START_TIME + 24 * 3600
    assert store.connections.get_connection("conn=1") == connection
    assert store.connections.delete_connection("conn=1") == connection
    assert store.connections.get_connection("conn=1") is None
    assert store.connections.delete_connection("conn=1") is None
