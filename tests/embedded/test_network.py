"""The embedded AWS reaches loopback only: a real endpoint is refused at once, by name, and recorded."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import EndpointConnectionError

from embedded import network


@pytest.fixture
def reached() -> Iterator[list[str]]:
    """What the test itself tried; cleared after, so the suite's own guard does not fail it."""
    yield network.REACHED
    network.REACHED.clear()


def test_the_suite_runs_with_the_guard_installed() -> None:
    assert network.installed()


def test_a_real_host_is_refused_by_name_and_recorded(reached: list[str]) -> None:
    with pytest.raises(network.RealEndpointError, match=r"sqs\.us-east-1\.amazonaws\.com:443, a real endpoint"):
        socket.create_connection(("sqs.us-east-1.amazonaws.com", 443), timeout=1)
    assert reached == ["sqs.us-east-1.amazonaws.com:443"]


def test_a_real_address_is_refused_without_waiting(reached: list[str]) -> None:
    with socket.socket() as sock, pytest.raises(network.RealEndpointError, match=r"192\.0\.2\.1:443"):
        sock.connect(("192.0.2.1", 443))
    assert reached == ["192.0.2.1:443"]


def test_a_client_built_outside_moto_fails_loudly(reached: list[str]) -> None:
    """moto's Step Functions executor once built such a client for a task it did not route.

    botocore words the refusal as its own connection error; the record is what fails the test.
    """
    sqs = boto3.client("sqs", region_name="us-east-1", config=Config(retries={"max_attempts": 1}))
    with pytest.raises(EndpointConnectionError, match=r"sqs\.us-east-1\.amazonaws\.com"):
        sqs.list_queues()
    assert reached[:1] == ["sqs.us-east-1.amazonaws.com:443"]


def test_loopback_is_allowed() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        with socket.create_connection(("localhost", server.getsockname()[1]), timeout=5):
            pass
    assert network.REACHED == []
