"""The mailer: what it sends through SES v2 on moto, and each outcome it reports instead of sending."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.ses.models import ses_backends

from lambdas.shared import env, mail

SENDER = "notices@dev.mangaassist.example"


@pytest.fixture
def ses(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("sesv2", region_name="us-east-1")
        client.create_configuration_set(ConfigurationSetName="notices")
        client.create_email_identity(EmailIdentity=SENDER)
        boto3.client("ses", region_name="us-east-1").verify_email_identity(EmailAddress=SENDER)
        monkeypatch.setenv("NOTICE_SENDER", SENDER)
        monkeypatch.setenv("NOTICE_CONFIGURATION_SET", "notices")
        monkeypatch.setenv("NOTICE_RECIPIENT_DOMAINS", "example.com, Example.org")
        env.reset()
        yield ses_backends[DEFAULT_ACCOUNT_ID]["us-east-1"]
        env.reset()


def test_an_allowed_address_gets_one_plain_text_message(ses: Any) -> None:
    assert mail.send_mail("alice@example.com", "Hello", "Your export is ready.") is mail.MailOutcome.SENT
    (message,) = ses.sent_messages
    assert message.source == SENDER
    assert message.destinations["ToAddresses"] == ["alice@example.com"]
    assert (message.subject, message.body) == ("Hello", "Your export is ready.")


def test_domains_are_compared_without_case(ses: Any) -> None:
    assert mail.send_mail("bob@EXAMPLE.org", "s", "t") is mail.MailOutcome.SENT


def test_an_address_outside_the_allow_list_is_not_mailed(ses: Any) -> None:
    assert mail.send_mail("carol@customer.test", "s", "t") is mail.MailOutcome.NOT_ALLOWED
    assert mail.send_mail("not-an-address", "s", "t") is mail.MailOutcome.NOT_ALLOWED
    assert ses.sent_messages == []


def test_a_stage_without_a_sender_mails_nobody(ses: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTICE_SENDER")
    env.reset()
    assert mail.send_mail("alice@example.com", "s", "t") is mail.MailOutcome.DISABLED
    assert ses.sent_messages == []


def test_an_empty_allow_list_mails_every_domain(ses: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTICE_RECIPIENT_DOMAINS", "")
    env.reset()
    assert mail.send_mail("dave@anywhere.test", "s", "t") is mail.MailOutcome.SENT


def test_ses_refusing_the_sender_is_a_rejection_not_an_error(ses: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTICE_SENDER", "unverified@dev.mangaassist.example")
    env.reset()
    assert mail.send_mail("alice@example.com", "s", "t") is mail.MailOutcome.REJECTED


def test_throttling_raises_so_the_queue_retries(ses: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    class Throttled:
        def send_email(self, **_: Any) -> None:
            raise ClientError({"Error": {"Code": "TooManyRequestsException", "Message": "slow"}}, "SendEmail")

    monkeypatch.setattr(mail, "sesv2", Throttled)
    with pytest.raises(ClientError):
        mail.send_mail("alice@example.com", "s", "t")


def test_addresses_are_masked_in_logs() -> None:
    assert mail.masked("alice@example.com") == "a***@example.com"
