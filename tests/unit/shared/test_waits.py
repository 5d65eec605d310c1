"""lambdas.shared.waits: failing a handoff's wait with the token the caller took, never raising."""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber

from contracts.workflows import CUSTOMER_LEFT
from lambdas.shared.waits import ENDED_TASK_CODES, fail_wait


def _client() -> tuple[object, Stubber]:
    client = boto3.client("stepfunctions", region_name="us-east-1")
    return client, Stubber(client)


def test_the_wait_is_failed_with_the_customer_left_error_and_the_cause() -> None:
    client, stub = _client()
    expected = {"taskToken": "t-1", "error": CUSTOMER_LEFT, "cause": "handoff h-1: the session was deleted"}
    stub.add_response("send_task_failure", {}, expected)
    with stub:
        assert fail_wait(client, "t-1", "h-1", "the session was deleted") is True
    stub.assert_no_pending_responses()


@pytest.mark.parametrize("code", sorted(ENDED_TASK_CODES))
def test_a_wait_that_ended_already_needs_nothing(code: str) -> None:
    client, stub = _client()
    stub.add_client_error("send_task_failure", service_error_code=code)
    with stub:
        assert fail_wait(client, "t-1", "h-1", "gone") is False


def test_any_other_refusal_is_logged_not_raised() -> None:
    client, stub = _client()
    stub.add_client_error("send_task_failure", service_error_code="AccessDeniedException")
    with stub:
        assert fail_wait(client, "t-1", "h-1", "gone") is False
