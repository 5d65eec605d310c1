"""SessionStarted rule target: EMF metrics of sessions started (and resumed after a handoff).

The rule matches ``new_status`` active. A session that is new (``old_status`` "none") counts as
``SessionsStarted``; one that comes back from a human agent (``old_status`` handoff) counts as
``SessionsResumed``, so the started figure is not inflated by handoff returns.

The metrics leave as EMF log lines, so the function makes no AWS call and loads neither boto3
nor the X-Ray SDK; Lambda's active tracing records the invocation.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.data_classes import EventBridgeEvent
from aws_lambda_powertools.utilities.typing import LambdaContext

from lambdas.events.messages import NO_STATUS
from lambdas.shared.logs import masked_formatter

logger = Logger(logger_formatter=masked_formatter())
metrics = Metrics()


def metric_name(detail: dict[str, Any]) -> str | None:
    """The metric a SessionStatusChanged detail counts towards, or None."""
    if detail.get("new_status") != "active":
        return None
    return "SessionsStarted" if detail.get("old_status") in (None, NO_STATUS) else "SessionsResumed"


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    detail = EventBridgeEvent(event).detail
    name = metric_name(detail)
    if name is not None:
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=1)
    return {"metric": name}
