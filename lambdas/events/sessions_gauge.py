"""Every minute: the sessions in progress now, as gauges ``SessionsActive`` and ``SessionsInHandoff``.

Counted on the sparse StatusIndex (one Select COUNT Query per status, over its small projected
rows), so the figure is right by construction: a running sum of the stream's +1/-1 would drift
with every redelivered, lost or expired change and never recover, and a Scan would read the whole
table. The function may Query that index and nothing else.
"""

from __future__ import annotations

from typing import Any, Final

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from lambdas.shared.logs import masked_formatter
from lambdas.shared.records import SessionStatus
from lambdas.shared.settings import store as store
from lambdas.shared.store import preload

preload("sessions")  # used by its invocations: loaded at init, not by the first one
logger = Logger(logger_formatter=masked_formatter())
metrics = Metrics()

#: What the gauge counts: metric name -> session status.
GAUGES: Final = {"SessionsActive": SessionStatus.ACTIVE, "SessionsInHandoff": SessionStatus.HANDOFF}


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, int]:
    """The sessions in each counted status now, as one gauge each."""
    counts = {name: store().sessions.count_by_status(status) for name, status in GAUGES.items()}
    for name, value in counts.items():
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
    return counts
