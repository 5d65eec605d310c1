"""Notices by e-mail through Amazon SES, within what the stage allows: the one mailer of the functions.

``send_mail(to, subject, text)`` sends one plain-text message from the stage's sender
(``NOTICE_SENDER``) with its configuration set (``NOTICE_CONFIGURATION_SET``: reputation metrics,
bounce and complaint suppression, TLS required) and says what happened:

* ``SENT``: SES accepted it.
* ``DISABLED``: the stage has no sender (nobody is mailed on it).
* ``NOT_ALLOWED``: the address's domain is outside the stage's allow-list
  (``NOTICE_RECIPIENT_DOMAINS``, comma-separated; empty allows every domain). A development
  stage lists only its team's domains, so it is safe in the SES sandbox and never mails a real
  customer.
* ``REJECTED``: SES refused it for good (an unverified sender or recipient in the sandbox, a
  suppressed address, a malformed one). Retrying cannot help, so it is an outcome, not an error.

Throttling and SES 5xx raise, so the queue that delivered the notice retries it. The address is
never logged in full (``a***@example.com``).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Final

from aws_lambda_powertools import Logger
from botocore.exceptions import ClientError

from lambdas.shared import aws
from lambdas.shared.settings import optional_resource

logger = Logger(child=True)

#: SES error codes that no retry changes.
PERMANENT_ERRORS: Final = frozenset(
    {
        "MessageRejected",
        "MailFromDomainNotVerifiedException",
        "BadRequestException",
        "NotFoundException",
        "AccountSuspendedException",
        "SendingPausedException",
        "InvalidParameterValue",
    }
)


class MailOutcome(StrEnum):
    SENT = "sent"
    DISABLED = "disabled"
    NOT_ALLOWED = "not_allowed"
    REJECTED = "rejected"


def masked(address: str) -> str:
    """``alice@example.com`` -> ``a***@example.com``: enough to tell addresses apart in a log."""
    local, _, domain = address.partition("@")
    return f"{local[:1]}***@{domain}"


def allowed_domains() -> frozenset[str]:
    raw = optional_resource("NOTICE_RECIPIENT_DOMAINS") or ""
    return frozenset(d.strip().lower() for d in raw.split(",") if d.strip())


def may_mail(address: str) -> bool:
    """Whether the stage mails ``address`` at all (a sender is set and the domain is allowed)."""
    return _refusal(address) is None


def _refusal(address: str) -> MailOutcome | None:
    if optional_resource("NOTICE_SENDER") is None:
        return MailOutcome.DISABLED
    domains = allowed_domains()
    domain = address.rpartition("@")[2].lower()
    if "@" not in address or (domains and domain not in domains):
        return MailOutcome.NOT_ALLOWED
    return None


def sesv2() -> Any:
    return aws.client("sesv2")


def send_mail(to: str, subject: str, text: str) -> MailOutcome:
    """Send one plain-text notice (see the module docstring for the outcomes)."""
    refusal = _refusal(to)
    if refusal is not None:
        logger.info("notice not mailed", extra={"outcome": refusal.value, "to": masked(to)})
        return refusal
    request: dict[str, Any] = {
        "FromEmailAddress": optional_resource("NOTICE_SENDER"),
        "Destination": {"ToAddresses": [to]},
        "Content": {
            "Simple": {
                "Subject": {"Data": subject, "Charset": "UTF-8"},
                "Body": {"Text": {"Data": text, "Charset": "UTF-8"}},
            }
        },
    }
    configuration_set = optional_resource("NOTICE_CONFIGURATION_SET")
    if configuration_set:
        request["ConfigurationSetName"] = configuration_set
    try:
        response = sesv2().send_email(**request)
    except ClientError as err:
        code = err.response.get("Error", {}).get("Code", "")
        if code in PERMANENT_ERRORS:
            logger.warning("SES refused a notice", extra={"code": code, "to": masked(to)})
            return MailOutcome.REJECTED
        raise
    logger.info("notice mailed", extra={"to": masked(to), "message_id": response.get("MessageId")})
    return MailOutcome.SENT
