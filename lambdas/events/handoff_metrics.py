"""HandoffChanged rule target: EMF metrics of the handoffs' life.

One invocation per ``HandoffChanged`` event (the router's, one per counted change of a
``HANDOFF#`` record). The counts ``HandoffsRequested``, ``HandoffsAssigned``,
``HandoffsEscalated``, ``HandoffsCompleted``, ``HandoffsFailed`` and the times (seconds)
``TimeToAssignment`` (requested -> assigned), ``TimeToFirstReply`` (assigned -> the agent's first
reply) and ``HandoffDuration`` (requested -> completed). Each is written twice: by ``service``
alone (what the alarms watch) and by ``service``, ``reason`` and ``priority``. Both dimensions are
bounded: a priority outside the API's enum and a reason outside the stage's
``handoff_metric_reasons`` (``METRIC_REASONS``) become ``other``, so a caller cannot mint metrics;
no customer, session or agent id is ever a dimension.

The metrics leave as EMF log lines: the function makes no AWS call. A detail it cannot read fails
the invocation, so EventBridge's retries and then the bus's dead-letter queue keep the event.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit
from aws_lambda_powertools.utilities.data_classes import EventBridgeEvent
from aws_lambda_powertools.utilities.typing import LambdaContext

from contracts import messages as vocabulary
from contracts.requests import PRIORITIES
from lambdas.shared import env
from lambdas.shared.env import optional_resource
from lambdas.shared.logs import masked_formatter

logger = Logger(logger_formatter=masked_formatter())
metrics = Metrics()

#: The dimension value of a reason or priority outside the bounded set.
OTHER: Final = "other"


class InvalidHandoffEvent(ValueError):
    """A HandoffChanged detail the metrics cannot read; the invocation fails and the event is retried, then kept."""


@dataclass(frozen=True)
class Measure:
    """One metric value: its name, unit and value."""

    name: str
    unit: MetricUnit
    value: float


def _seconds(detail: dict[str, Any], name: str) -> int | None:
    value = detail.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidHandoffEvent(f"{name} must be epoch seconds (given {value!r})")
    return value


def _span(detail: dict[str, Any], name: str, start: str, end: str) -> list[Measure]:
    """``end - start`` in seconds as metric ``name``; nothing when either is missing or they run backwards."""
    begin, finish = _seconds(detail, start), _seconds(detail, end)
    if begin is None or finish is None or finish < begin:
        return []
    return [Measure(name, MetricUnit.Seconds, float(finish - begin))]


def _count(name: str) -> Measure:
    return Measure(name, MetricUnit.Count, 1.0)


def handoff_measures(detail: dict[str, Any]) -> list[Measure]:
    """The metrics one HandoffChanged detail adds, in the order of its ``changes``."""
    changes = detail.get("changes")
    if not isinstance(changes, list) or not changes:
        raise InvalidHandoffEvent(f"changes must be a non-empty list of {list(vocabulary.HANDOFF_CHANGES)}")
    measures: list[Measure] = []
    for change in changes:
        if change == vocabulary.CHANGE_REQUESTED:
            measures.append(_count("HandoffsRequested"))
        elif change == vocabulary.CHANGE_ASSIGNED:
            measures += [_count("HandoffsAssigned"), *_span(detail, "TimeToAssignment", "requested_at", "assigned_at")]
        elif change == vocabulary.CHANGE_ESCALATED:
            measures.append(_count("HandoffsEscalated"))
        elif change == vocabulary.CHANGE_FIRST_REPLY:
            measures += _span(detail, "TimeToFirstReply", "assigned_at", "first_reply_at")
        elif change == vocabulary.CHANGE_COMPLETED:
            measures += [_count("HandoffsCompleted"), *_span(detail, "HandoffDuration", "requested_at", "closed_at")]
        elif change == vocabulary.CHANGE_FAILED:
            measures.append(_count("HandoffsFailed"))
        else:
            raise InvalidHandoffEvent(f"unknown change {change!r}; known: {list(vocabulary.HANDOFF_CHANGES)}")
    return measures


def handoff_dimensions(detail: dict[str, Any], reasons: frozenset[str]) -> dict[str, str]:
    """``reason`` and ``priority`` of the handoff, each ``other`` outside its bounded set."""
    reason, priority = detail.get("reason"), detail.get("priority")
    return {
        "reason": reason if isinstance(reason, str) and reason in reasons else OTHER,
        "priority": priority if isinstance(priority, str) and priority in PRIORITIES else OTHER,
    }


@env.once
def metric_reasons() -> frozenset[str]:
    """The reasons that are a dimension of their own (``METRIC_REASONS``, comma-separated; none when unset)."""
    raw = optional_resource("METRIC_REASONS") or ""
    return frozenset(r.strip() for r in raw.split(",") if r.strip())


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """One HandoffChanged event -> its metrics, by service and by reason and priority."""
    detail = EventBridgeEvent(event).detail
    measures = handoff_measures(detail)
    dimensions = handoff_dimensions(detail, metric_reasons())
    by_kind = EphemeralMetrics(namespace=metrics.namespace, service=metrics.service)
    for name, value in dimensions.items():
        by_kind.add_dimension(name=name, value=value)
    for m in measures:
        metrics.add_metric(name=m.name, unit=m.unit, value=m.value)
        by_kind.add_metric(name=m.name, unit=m.unit, value=m.value)
    by_kind.flush_metrics()
    logger.info("handoff metrics", extra={"changes": detail.get("changes"), **dimensions})
    return {"metrics": [m.name for m in measures], **dimensions}
