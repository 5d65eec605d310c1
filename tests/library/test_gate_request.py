"""The approval gate's request step on moto: checkpoint record, signed links, e-mail, idempotency."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit

import boto3
import pytest

from constructs_lib.approval_gate.gate_runtime import environment as env
from constructs_lib.approval_gate.gate_runtime import request as review_request
from constructs_lib.approval_gate.gate_runtime import signing
from constructs_lib.approval_gate.gate_runtime.records import ReviewStatus, ReviewStore
from tests.library.conftest import review_store

SECRET = "s" * 64
TIMEOUT = 3600
MARGIN = 60


@pytest.fixture
def inbox(table_name: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Environment of the request Lambda on moto; yields the SQS queue receiving the e-mails."""
    sns = boto3.client("sns", region_name="us-east-1")
    sqs = boto3.client("sqs", region_name="us-east-1")
    topic = sns.create_topic(Name="reviewers")["TopicArn"]
    queue = sqs.create_queue(QueueName="inbox")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn, Attributes={"RawMessageDelivery": "true"})
    secret = boto3.client("secretsmanager", region_name="us-east-1").create_secret(Name="sig", SecretString=SECRET)
    for name, value in {
        "TABLE_NAME": table_name,
        "REVIEW_SECRET_ARN": secret["ARN"],
        "REVIEWER_TOPIC_ARN": topic,
        "LINK_BASE_URL": "https://api.example.test/prod",
        "REVIEW_TIMEOUT_SECONDS": str(TIMEOUT),
        "REVIEW_DECISION_MARGIN_SECONDS": str(MARGIN),
        "REVIEW_TTL_DAYS": "7",
        "REVIEW_SUBJECT": "Export of customer data",
    }.items():
        monkeypatch.setenv(name, value)
    env.reset()
    yield queue
    env.reset()


class FakeContext:
    function_name = "review-request"
    function_version = "$LATEST"
    memory_limit_in_mb = 256
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:review-request"
    aws_request_id = "req-1"


@pytest.fixture
def lambda_context() -> FakeContext:
    return FakeContext()


def emails(queue: str) -> list[str]:
    sqs = boto3.client("sqs", region_name="us-east-1")
    return [m["Body"] for m in sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10).get("Messages", [])]


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def event(token: str = "token-abc", **overrides: Any) -> dict[str, Any]:  # noqa: S107 - a fake task token
    base: dict[str, Any] = {
        "task_token": token,
        "state": {"requested_by": "admin-7", "secret_field": "do-not-mail", "n": 1},
        "requested_by": "admin-7",
        "entered_time": iso(time.time()),
        "execution_id": "arn:aws:states:us-east-1:123456789012:execution:export:run-1",
    }
    base.update(overrides)
    return base


def test_checkpoints_the_state_and_mails_signed_links(inbox: str, table_name: str) -> None:
    # Given a task that entered just now
    entered = int(time.time())

    # When the request step runs
    review = review_request.request_review(event(entered_time=iso(entered), details={"reason": "ticket 42"}))

    # Then the record holds the state, who asked, the deadline, the TTL and the token
    stored = review_store(table_name).get_review(review.review_id)
    assert stored is not None
    assert stored.status == ReviewStatus.PENDING
    assert json.loads(stored.state) == {"requested_by": "admin-7", "secret_field": "do-not-mail", "n": 1}
    assert stored.requested_by == "admin-7"
    assert stored.expires_at == entered + TIMEOUT - MARGIN
    assert stored.ttl >= stored.created_at + 7 * 86400
    assert stored.task_token == "token-abc"
    # and one e-mail with both links, signed for this review, decision and deadline
    (body,) = emails(inbox)
    assert "token-abc" not in body
    assert "do-not-mail" not in body
    assert "ticket 42" in body
    assert "Requested by: admin-7" in body
    for decision, label in (("approve", "Approve"), ("reject", "Reject")):
        url = next(line.split(": ", 1)[1] for line in body.splitlines() if line.startswith(f"{label}: "))
        parts = urlsplit(url)
        assert parts.path == f"/prod/reviews/{review.review_id}/{decision}"
        query = parse_qs(parts.query)
        assert query["exp"] == [str(stored.expires_at)]
        assert signing.verify(SECRET.encode(), review.review_id, decision, stored.expires_at, query["sig"][0])


def test_the_handler_returns_the_review_for_debugging(inbox: str, lambda_context: Any) -> None:
    result = review_request.handler(event(), lambda_context)

    assert result["status"] == "pending_review"
    assert result["review_id"] == review_request.review_id_for("token-abc")


def test_a_repeated_invocation_reuses_its_review_and_mails_again(inbox: str, table_name: str) -> None:
    first = review_request.request_review(event())
    second = review_request.request_review(event())

    assert first.review_id == second.review_id
    assert len(emails(inbox)) == 2
    other = review_request.request_review(event(token="another-token"))
    assert other.review_id != first.review_id


def test_a_decided_review_is_not_mailed_again(inbox: str, table_name: str) -> None:
    review = review_request.request_review(event())
    emails(inbox)
    review_store(table_name).decide_review(review.review_id, "approved", decided_by="tester")

    again = review_request.request_review(event())

    assert again.status == ReviewStatus.APPROVED
    assert emails(inbox) == []


def test_no_time_left_is_a_closed_window(inbox: str) -> None:
    with pytest.raises(review_request.ReviewWindowClosed):
        review_request.request_review(event(entered_time=iso(time.time() - TIMEOUT)))
    assert emails(inbox) == []


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"task_token": ""}, "task_token"),
        ({"state": "not an object"}, "state"),
        ({"requested_by": None, "execution_id": None}, "requested_by"),
        ({"entered_time": "yesterday"}, "ISO 8601"),
        ({"entered_time": None}, "entered_time"),
    ],
)
def test_malformed_requests_say_what_is_wrong(inbox: str, change: dict[str, Any], message: str) -> None:
    with pytest.raises(review_request.InvalidReviewRequest, match=message):
        review_request.request_review(event(**change))


def test_requested_by_defaults_to_the_execution(inbox: str) -> None:
    review = review_request.request_review(event(requested_by=None))

    assert review.requested_by.endswith(":execution:export:run-1")


def test_the_base_url_can_come_from_ssm_at_run_time(inbox: str, monkeypatch: pytest.MonkeyPatch) -> None:
    boto3.client("ssm", region_name="us-east-1").put_parameter(
        Name="/app/dev/rest-api-url", Value="https://later.example/v1/", Type="String"
    )
    monkeypatch.delenv("LINK_BASE_URL")
    monkeypatch.setenv("LINK_BASE_URL_PARAMETER", "/app/dev/rest-api-url")
    env.reset()

    review = review_request.request_review(event())

    (body,) = emails(inbox)
    assert f"Approve: https://later.example/v1/reviews/{review.review_id}/approve?" in body


@pytest.mark.parametrize("both", [True, False])
def test_exactly_one_base_url_setting_is_required(inbox: str, monkeypatch: pytest.MonkeyPatch, both: bool) -> None:
    if both:
        monkeypatch.setenv("LINK_BASE_URL_PARAMETER", "/x")
    else:
        monkeypatch.delenv("LINK_BASE_URL")
    env.reset()
    with pytest.raises(env.SettingError, match="exactly one of LINK_BASE_URL and LINK_BASE_URL_PARAMETER"):
        review_request.settings()


def test_the_subject_fits_sns_and_the_details_are_bounded() -> None:
    from constructs_lib.approval_gate.gate_runtime.records import Review

    review = Review("r-1", ReviewStatus.PENDING, "{}", "admin", 0, 86400, 86400)
    subject, body = review_request.compose_message("x" * 300, review, "https://a", "https://r", {"big": "y" * 10_000})

    assert len(subject) == 100
    assert "(truncated)" in body
    assert len(body) < 5000


def test_the_token_stays_out_of_the_records_repr(store: ReviewStore) -> None:
    review = store.put_review({"a": 1}, requested_by="admin", task_token="secret-token")

    assert "secret-token" not in repr(review)
    fetched = store.get_review(review.review_id)
    assert fetched is not None
    assert fetched.task_token == "secret-token"
