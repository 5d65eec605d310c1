"""lambdas.shared.aws: one client per service and options per container, created on first use."""

from __future__ import annotations

from lambdas.shared import aws


def test_a_client_is_made_once_per_service_and_options() -> None:
    assert aws.client("sqs") is aws.client("sqs")
    assert aws.client("sqs") is not aws.client("sqs", single_attempt=True)


def test_a_single_attempt_client_never_retries_by_itself() -> None:
    assert aws.client("dynamodb", single_attempt=True).meta.config.retries["total_max_attempts"] == 1
    assert aws.client("dynamodb").meta.config.retries["total_max_attempts"] == aws.STANDARD_ATTEMPTS
