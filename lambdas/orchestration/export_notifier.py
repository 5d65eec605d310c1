"""Export-notification queue consumer: tells the requester that their export is ready, or was refused.

The export workflow publishes to its notification topic when an export completes
(``event_type`` ``export_completed``, with the export ARN and the S3 location) and when the
reviewer rejects it (``export_rejected``). Both carry ``request``: the execution's input, whose
``requested_by_email`` the API fills from the caller's verified e-mail claim (never from the
body); an execution started without it (a console start, a test) has none.

Channel: one e-mail to that address through the stage's mailer (:mod:`lambdas.shared.mail`).
When it cannot go (the stage has no sender, the address is outside the stage's allow-list, SES
refuses it, or there is no address) the notice is not lost: the same facts are the execution's
outcome, which the requester reads with ``GET /executions/{id}`` (status, and the location or the
rejection), and the unmailed notice is logged and counted (metric ``ExportNoticesUnmailed``) so
operations see requesters who must look themselves.

Exactly once per notice: the body is handled under Powertools' idempotency utility keyed on
``notice_id`` (the execution ARN and the event type), with the stage's table as its store. A
redelivered message finds the completed record and sends nothing; a crash after SES accepted the
mail but before the record was marked complete leaves the record "in progress" until the
function's timeout passes, after which a redelivery mails again: a duplicate in that window,
never a loss. Throttling and 5xx from SES raise, so SQS retries the message (then its DLQ alarms).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig
from aws_lambda_powertools.utilities.typing import LambdaContext

from lambdas.shared import idempotency, mail, queue_body
from lambdas.shared.logs import masked_formatter
from lambdas.shared.tracing import tracer

logger = Logger(logger_formatter=masked_formatter())
metrics = Metrics()
processor = BatchProcessor(event_type=EventType.SQS)

EXPORT_COMPLETED: Final = "export_completed"
EXPORT_REJECTED: Final = "export_rejected"
#: A notice is remembered for a week: SQS keeps a message at most 14 days, but a redelivery
#: after the DLQ's 3 receives cannot happen, so a week covers every retry by far.
NOTICE_MEMORY_SECONDS: Final = 7 * 86400


class InvalidNotice(ValueError):
    """A message that is not an export notice; its record fails alone and reaches the DLQ."""


@dataclass(frozen=True)
class ExportNotice:
    event_type: str
    execution: str
    requested_by: str
    email: str | None
    export_arn: str | None = None
    s3_location: str | None = None

    @property
    def notice_id(self) -> str:
        return f"{self.execution}#{self.event_type}"

    def subject(self) -> str:
        if self.event_type == EXPORT_COMPLETED:
            return "Your MangaAssist data export is ready"
        return "Your MangaAssist data export was not approved"

    def text(self) -> str:
        name = self.execution.rsplit(":", 1)[-1]
        if self.event_type == EXPORT_COMPLETED:
            return (
                f"The data export {name} you requested is complete.\n\n"
                f"Location: {self.s3_location}\nExport: {self.export_arn}\n\n"
                "The objects are encrypted with the stage's data key; read them with a role that may "
                "decrypt it."
            )
        return (
            f"The data export {name} you requested was rejected by its reviewer (or its review expired), "
            "so nothing was exported. Ask the reviewer, or request it again with a clearer reason."
        )


def parse(body: str) -> ExportNotice:
    """The notice a queue body carries (raw delivery, or an SNS envelope); InvalidNotice otherwise."""
    try:
        data = queue_body.json_object(body)
    except ValueError as err:
        raise InvalidNotice(str(err)) from None
    event_type, execution = data.get("event_type"), data.get("execution")
    if event_type not in (EXPORT_COMPLETED, EXPORT_REJECTED):
        raise InvalidNotice(f"event_type must be {EXPORT_COMPLETED} or {EXPORT_REJECTED} (given {event_type!r})")
    if not isinstance(execution, str) or not execution.startswith("arn:"):
        raise InvalidNotice("execution must be the export execution's ARN")
    raw_request = data.get("request")
    request: dict[str, Any] = raw_request if isinstance(raw_request, dict) else {}
    email = request.get("requested_by_email")
    notice = ExportNotice(
        event_type=event_type,
        execution=execution,
        requested_by=str(data.get("requested_by") or request.get("requested_by") or "unknown"),
        email=email if isinstance(email, str) and "@" in email else None,
        export_arn=_opt(data.get("export_arn")),
        s3_location=_opt(data.get("s3_location")),
    )
    if event_type == EXPORT_COMPLETED and not (notice.export_arn and notice.s3_location):
        raise InvalidNotice("an export_completed notice needs export_arn and s3_location")
    return notice


def _opt(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def tell(notice: ExportNotice, send: Callable[[str, str, str], mail.MailOutcome] | None = None) -> str:
    """Mail the requester; the outcome's value, or ``no_address`` (see the module docstring)."""
    if notice.email is None:
        outcome = "no_address"
    else:
        outcome = (send or mail.send_mail)(notice.email, notice.subject(), notice.text()).value
    if outcome != mail.MailOutcome.SENT.value:
        metrics.add_metric(name="ExportNoticesUnmailed", unit=MetricUnit.Count, value=1)
        logger.warning(
            "export notice not mailed; the requester reads it with GET /executions/{id}",
            extra={"outcome": outcome, "event_type": notice.event_type, "execution": notice.execution},
        )
    return outcome


IDEMPOTENCY: Final = IdempotencyConfig(event_key_jmespath="notice_id", expires_after_seconds=NOTICE_MEMORY_SECONDS)


#: ``tell`` once per notice, on the stage's table (Powertools idempotency).
_tell_once = idempotency.once(
    lambda notice: tell(ExportNotice(**{k: v for k, v in notice.items() if k != "notice_id"})), config=IDEMPOTENCY
)


def record_handler(record: SQSRecord) -> str:
    notice = parse(record.body)
    outcome = _tell_once({**notice.__dict__, "notice_id": notice.notice_id})
    logger.info("export notice", extra={"event_type": notice.event_type, "outcome": outcome})
    return str(outcome)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    IDEMPOTENCY.register_lambda_context(context)
    return process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)
