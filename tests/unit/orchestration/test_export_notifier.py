"""The export notifier: the requester is told once, by e-mail where the stage allows, and never lost."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.ses.models import ses_backends

from embedded.events import lambda_context, sqs_event
from lambdas.orchestration import export_notifier
from lambdas.shared import env

SENDER = "notices@dev.mangaassist.example"
EXECUTION = "arn:aws:states:us-east-1:123456789012:execution:MangaAssist-dev-Export:export-7"
COMPLETED = {
    "event_type": "export_completed",
    "requested_by": "root",
    "execution": EXECUTION,
    "export_arn": "arn:aws:dynamodb:us-east-1:123456789012:table/t/export/01",
    "s3_location": "s3://archive/exports/export-7/AWSDynamoDB/01/",
    "request": {"reason": "quarterly audit", "requested_by": "root", "requested_by_email": "root@example.com"},
}
REJECTED = {
    "event_type": "export_rejected",
    "requested_by": "root",
    "execution": EXECUTION,
    "request": {"requested_by": "root", "requested_by_email": "root@example.com"},
}


@pytest.fixture(autouse=True)
def no_leftover_metrics() -> Iterator[None]:
    """Powertools keeps metrics in a buffer shared by every Metrics object of the process: a test
    that calls ``tell`` outside the handler (which flushes) must not leave its metric to the next."""
    yield
    export_notifier.metrics.clear_metrics()


@pytest.fixture
def sent(table_name: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """The stage's mail set up on moto (inside the table fixture's mock); the list of sent messages."""
    boto3.client("sesv2", region_name="us-east-1").create_email_identity(EmailIdentity=SENDER)
    boto3.client("ses", region_name="us-east-1").verify_email_identity(EmailAddress=SENDER)
    for name, value in {
        "TABLE_NAME": table_name,
        "NOTICE_SENDER": SENDER,
        "NOTICE_RECIPIENT_DOMAINS": "example.com",
        "AWS_LAMBDA_FUNCTION_NAME": "ExportNotifier",
    }.items():
        monkeypatch.setenv(name, value)
    env.reset()
    yield ses_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].sent_messages
    env.reset()


def _handle(*bodies: Any) -> dict[str, Any]:
    return dict(export_notifier.handler(sqs_event(*bodies), lambda_context("ExportNotifier")))


def test_a_completed_export_mails_its_location_to_the_requester_once(sent: list[Any]) -> None:
    assert _handle(COMPLETED) == {"batchItemFailures": []}
    assert _handle(COMPLETED) == {"batchItemFailures": []}  # SQS redelivers: nothing more is sent
    (message,) = sent
    assert message.destinations["ToAddresses"] == ["root@example.com"]
    assert "s3://archive/exports/export-7/AWSDynamoDB/01/" in message.body
    assert "export-7" in message.body


def test_a_rejection_is_its_own_notice(sent: list[Any]) -> None:
    _handle(COMPLETED, REJECTED)
    assert [m.subject for m in sent] == [
        "Your MangaAssist data export is ready",
        "Your MangaAssist data export was not approved",
    ]
    assert "rejected" in sent[1].body


def test_a_requester_without_an_address_is_counted_not_mailed(sent: list[Any]) -> None:
    body = {**COMPLETED, "request": {"requested_by": "root"}}
    assert export_notifier.tell(export_notifier.parse(json.dumps(body))) == "no_address"
    assert _handle(body) == {"batchItemFailures": []}
    assert sent == []


def test_an_address_the_stage_may_not_mail_is_not_mailed(sent: list[Any]) -> None:
    body = {**COMPLETED, "request": {"requested_by_email": "someone@customer.test"}}
    notice = export_notifier.parse(json.dumps(body))
    assert export_notifier.tell(notice) == "not_allowed"
    assert sent == []


def test_a_malformed_notice_fails_alone(sent: list[Any]) -> None:
    result = _handle("not json", {"event_type": "export_done", "execution": EXECUTION}, COMPLETED)
    assert len(result["batchItemFailures"]) == 2
    assert len(sent) == 1


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"event_type": "export_completed", "execution": EXECUTION}, "needs export_arn and s3_location"),
        ({"event_type": "export_rejected", "execution": "export-7"}, "execution's ARN"),
        ([], "JSON object"),
    ],
)
def test_parse_says_what_is_wrong(body: Any, message: str) -> None:
    with pytest.raises(export_notifier.InvalidNotice, match=message):
        export_notifier.parse(json.dumps(body))


def test_an_sns_envelope_is_unwrapped() -> None:
    envelope = {"Type": "Notification", "Message": json.dumps(REJECTED)}
    assert export_notifier.parse(json.dumps(envelope)).email == "root@example.com"
