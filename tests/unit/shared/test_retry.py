"""One retry mechanism: a chunk that stays throttled costs at most 4 calls in all, never botocore's 3 x ours."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse

from lambdas.events import router
from lambdas.events.delivery import Entry, FirehoseWriter
from lambdas.shared import aws, env
from lambdas.shared.errors import BatchWriteIncomplete
from lambdas.shared.records import Role
from lambdas.shared.retry import DEFAULT_ATTEMPTS, Backoff
from lambdas.shared.store import DynamoSessionStore

THROTTLED = {
    "firehose": ("ServiceUnavailableException", 500),
    "dynamodb": ("ProvisionedThroughputExceededException", 400),
}


class ThrottledWire:
    """Answers every HTTP send of one operation with a throttling error, counting the sends.

    It sits at ``before-send``, below botocore's retry handler, so every attempt botocore makes
    is counted: exactly what the service would see.
    """

    def __init__(self, client: Any, operation: str) -> None:
        self.sends = 0
        service = client.meta.service_model.service_name
        self._code, self._status = THROTTLED[service]
        client.meta.events.register_first(
            f"before-send.{client.meta.service_model.service_id.hyphenize()}.{operation}", self
        )

    def __call__(self, request: Any, **_: Any) -> AWSResponse:
        self.sends += 1
        body = json.dumps({"__type": self._code, "message": "slow down"}).encode()
        return AWSResponse(request.url, self._status, {"x-amzn-ErrorType": self._code}, _Raw(body))


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body

    def read(self) -> bytes:
        return self._body


@pytest.fixture
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    waits: list[float] = []
    monkeypatch.setattr("time.sleep", waits.append)
    return waits


def test_the_routers_clients_make_one_attempt_per_call() -> None:
    # Given the router's sinks as the function builds them
    env.reset()
    clients = [aws.client(s, single_attempt=True, connect_timeout=5, read_timeout=10) for s in ("firehose", "sns")]
    # Then botocore retries nothing under the writers' own policy, and other clients keep standard retries
    assert {c.meta.config.retries["total_max_attempts"] for c in clients} == {1}
    assert aws.client("stepfunctions").meta.config.retries == {"mode": "standard", "total_max_attempts": 3}
    assert aws.client("firehose", single_attempt=True, connect_timeout=5, read_timeout=10) is clients[0]
    env.reset()


def test_a_firehose_chunk_that_stays_throttled_costs_four_calls(no_sleep: list[float]) -> None:
    # Given the router's Firehose client, throttled on every call
    env.reset()
    client = aws.client("firehose", single_attempt=True, connect_timeout=5, read_timeout=10)
    wire = ThrottledWire(client, "PutRecordBatch")
    writer = FirehoseWriter(client, "analytics", Backoff(sleep=no_sleep.append))
    # When one chunk of 3 records is written
    failed = writer.write([Entry(str(n), {"n": n}, 0) for n in range(3)])
    # Then the chunk cost 4 calls in all (not 3 botocore attempts x 4 of ours = 12) and is reported
    assert wire.sends == DEFAULT_ATTEMPTS == 4
    assert failed == {"0", "1", "2"}
    assert len(no_sleep) == 3
    env.reset()


def test_the_routers_sinks_use_single_attempt_clients(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[dict[str, Any]] = []

    def client(service: str, **options: Any) -> str:
        made.append({"service": service, **options})
        return service

    monkeypatch.setattr(aws, "client", client)
    for name, value in {
        "EVENT_BUS_NAME": "bus",
        "HANDOFF_TOPIC_ARN": "arn:aws:sns:us-east-1:123456789012:t",
        "ANALYTICS_STREAM_NAME": "a",
        "AUDIT_STREAM_NAME": "b",
        "SUMMARY_FUNCTION_NAME": "f",
    }.items():
        monkeypatch.setenv(name, value)
    env.reset()
    router.sinks()
    assert {m["service"] for m in made} == {"firehose", "events", "sns", "lambda"}
    assert all(m["single_attempt"] for m in made)
    env.reset()


def test_a_batch_delete_chunk_that_stays_throttled_costs_four_calls(
    table_name: str, clock: Callable[[], float], no_sleep: list[float]
) -> None:
    # Given a store built as the functions build it (no client given: the container's clients)
    env.reset()
    store = DynamoSessionStore(table_name, clock=clock, sleep=no_sleep.append)
    session = store.sessions.create_session("c-1")
    for n in range(3):
        store.turns.add_turn(session.session_id, Role.USER, f"turn {n}")
    wire = ThrottledWire(store.table.batch_client, "BatchWriteItem")
    # When its items are deleted while DynamoDB throttles every BatchWriteItem
    with pytest.raises(BatchWriteIncomplete) as caught:
        store.sessions.delete_session_items(session.session_id)
    # Then the one chunk cost 4 calls in all and nothing was lost
    assert wire.sends == 4
    assert caught.value.remaining == 3
    assert len(no_sleep) == 3
    assert store.table.batch_client is not store.table.client
    env.reset()
