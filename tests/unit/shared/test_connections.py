"""post_to_connection: the one way frames reach WebSocket clients."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ReadTimeoutError
from botocore.stub import Stubber
from moto import mock_aws

from lambdas.shared import connections, env
from lambdas.shared.connections import (
    MAX_FRAME_BYTES,
    DeliveryError,
    management_endpoint,
    post_to_connection,
)
from tests.support.websocket import DOMAIN, ENDPOINT, STAGE, sent_frames

CONNECTION = "L0SM9cOFvHcCIhw="


@pytest.fixture(autouse=True)
def _fresh_clients() -> Iterator[None]:
    env.reset()
    yield
    env.reset()


def _client() -> Any:
    return boto3.client("apigatewaymanagementapi", endpoint_url=ENDPOINT, region_name="us-east-1")


def _error(stub: Stubber, code: str, status: int) -> None:
    stub.add_client_error("post_to_connection", service_error_code=code, http_status_code=status)


def test_endpoint_is_https_domain_and_stage() -> None:
    assert management_endpoint(DOMAIN, STAGE) == ENDPOINT


def test_fails_endpoint_without_stage() -> None:
    with pytest.raises(ValueError, match="domain_name and stage are required"):
        management_endpoint(DOMAIN, "")


def test_posts_compact_json_frame_through_moto() -> None:
    with mock_aws():
        # When a frame with non-ASCII text is posted through the cached client of the endpoint
        delivered = post_to_connection(ENDPOINT, CONNECTION, {"type": "message", "text": "ワンピース 105"})
        # Then moto's management API received exactly that frame
        assert delivered is True
        assert sent_frames(CONNECTION) == [{"type": "message", "text": "ワンピース 105"}]


def test_gone_returns_false_without_retrying() -> None:
    client = _client()
    sleeps: list[float] = []
    with Stubber(client) as stub:
        _error(stub, "GoneException", 410)
        assert post_to_connection(ENDPOINT, CONNECTION, {"type": "x"}, client=client, sleep=sleeps.append) is False
        stub.assert_no_pending_responses()
    assert sleeps == []


def test_throttling_is_retried_with_jittered_backoff_then_delivered() -> None:
    client = _client()
    sleeps: list[float] = []
    with Stubber(client) as stub:
        _error(stub, "LimitExceededException", 429)
        _error(stub, "InternalServerError", 500)
        stub.add_response("post_to_connection", {})
        delivered = post_to_connection(
            ENDPOINT, CONNECTION, {"type": "x"}, client=client, attempts=3, sleep=sleeps.append, rand=lambda: 1.0
        )
    assert delivered is True
    assert sleeps == [0.05, 0.1]  # rand() * min(max_delay, base * 2**n) at rand = 1


def test_retries_are_bounded_by_attempts() -> None:
    client = _client()
    sleeps: list[float] = []
    with Stubber(client) as stub:
        for _ in range(2):
            _error(stub, "LimitExceededException", 429)
        with pytest.raises(DeliveryError) as raised:
            post_to_connection(ENDPOINT, CONNECTION, {"type": "x"}, client=client, attempts=2, sleep=sleeps.append)
        stub.assert_no_pending_responses()
    assert raised.value.code == "LimitExceededException"
    assert len(sleeps) == 1


def test_forbidden_raises_at_once_with_its_code() -> None:
    client = _client()
    with Stubber(client) as stub:
        _error(stub, "ForbiddenException", 403)
        with pytest.raises(DeliveryError) as raised:
            post_to_connection(ENDPOINT, CONNECTION, {"type": "x"}, client=client, sleep=lambda _: None)
    assert raised.value.code == "ForbiddenException"
    assert "ForbiddenException" in str(raised.value)


def test_timeouts_are_retried() -> None:
    calls: list[int] = []

    class Flaky:
        def post_to_connection(self, **kwargs: Any) -> dict[str, Any]:
            calls.append(1)
            if len(calls) == 1:
                raise ReadTimeoutError(endpoint_url=ENDPOINT)
            return {}

    assert post_to_connection(ENDPOINT, CONNECTION, {"type": "x"}, client=Flaky(), sleep=lambda _: None) is True
    assert len(calls) == 2


def test_fails_oversized_frame_before_calling_aws() -> None:
    with pytest.raises(ValueError, match="at most 131072 bytes"):
        post_to_connection(ENDPOINT, CONNECTION, {"text": "x" * MAX_FRAME_BYTES}, client=object())


@pytest.mark.parametrize("attempts", [0, -1, True])
def test_fails_attempts_below_one(attempts: Any) -> None:
    with pytest.raises(ValueError, match="attempts must be an int >= 1"):
        post_to_connection(ENDPOINT, CONNECTION, {"type": "x"}, attempts=attempts, client=object())


def test_one_cached_client_per_endpoint() -> None:
    first = connections.management_client(ENDPOINT)
    assert connections.management_client(ENDPOINT) is first
    assert connections.management_client("https://other.execute-api.us-east-1.amazonaws.com/dev") is not first
