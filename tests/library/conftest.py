"""Fixtures for the library's own tests: a moto table of the gate's key layout, a fake clock.

Nothing here imports the app: the library's tests run as another team's would.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from constructs_lib.approval_gate import gate_runtime
from constructs_lib.approval_gate.gate_runtime.records import KeyLayout, ReviewStore
from embedded.clock import FakeClock

TABLE_NAME = "gate-reviews"
#: The layout the tests' table has: partition key PK, sort key SK (the construct's env says so).
LAYOUT = KeyLayout(partition_key="PK", sort_key="SK")
LAYOUT_ENVIRONMENT = {"REVIEW_PARTITION_KEY": "PK", "REVIEW_SORT_KEY": "SK"}


@pytest.fixture(autouse=True)
def gate_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The key layout the construct would set; the runtime's cached settings are reset around each test."""
    for name, value in LAYOUT_ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    gate_runtime.reset()
    yield
    gate_runtime.reset()


@pytest.fixture
def table_name(ddb_client: Any) -> str:
    ddb_client.create_table(
        TableName=TABLE_NAME,
        KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "PK", "AttributeType": "S"},
            {"AttributeName": "SK", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    ddb_client.update_time_to_live(
        TableName=TABLE_NAME, TimeToLiveSpecification={"Enabled": True, "AttributeName": "ttl"}
    )
    return TABLE_NAME


@pytest.fixture
def store(ddb_client: Any, table_name: str, clock: FakeClock) -> ReviewStore:
    return ReviewStore(table_name, layout=LAYOUT, client=ddb_client, clock=clock)


def review_store(table_name: str) -> ReviewStore:
    """A store on the tests' table with the real clock and a client of its own."""
    return ReviewStore(table_name, layout=LAYOUT)
