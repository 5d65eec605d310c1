"""The story's metrics step: the handoff that just closed, as the handoff metrics counted and timed it,
and the sessions in progress as the minute's gauge counted them.

Both read what the metric functions printed on the stage (their EMF lines, which Lambda sends to
their log groups and CloudWatch turns into metrics), not what the story expects to be there.
A mixin of :class:`local.story.Story`.
"""

from __future__ import annotations

import time
from typing import Any

from embedded.runtime import Invocation
from local.story.base import StoryParts, expect

HANDOFF_HANDLER = "lambdas.events.handoff_metrics.handler"
GAUGE_HANDLER = "lambdas.events.sessions_gauge.handler"
#: The handoff's whole life, as the story's handoff lives it: one of each, and the three times.
COUNTS = ("HandoffsRequested", "HandoffsAssigned", "HandoffsCompleted")
TIMES = ("TimeToAssignment", "TimeToFirstReply", "HandoffDuration")


def emf_values(calls: list[Invocation], dimensions: list[str]) -> dict[str, list[float]]:
    """Every value the calls printed as EMF under exactly ``dimensions``, by metric name."""
    found: dict[str, list[float]] = {}
    for call in calls:
        for document in call.emf():
            (directive,) = document["_aws"]["CloudWatchMetrics"]
            if [sorted(d) for d in directive["Dimensions"]] != [sorted(dimensions)]:
                continue
            for metric in directive["Metrics"]:
                value: Any = document[metric["Name"]]
                found.setdefault(metric["Name"], []).extend(value if isinstance(value, list) else [value])
    return found


class MetricsSteps(StoryParts):
    """The handoff metrics after a handoff completes (see the module docstring)."""

    def _handoff_calls(self, handoff_id: str) -> list[Invocation]:
        return [
            c
            for c in self.stage.calls.by_handler(HANDOFF_HANDLER)
            if c.error is None and (c.event.get("detail") or {}).get("handoff_id") == handoff_id
        ]

    def handoff_metrics_after_close(self) -> None:
        started, step = time.monotonic(), self.step("The closed handoff in the metrics; the sessions gauge")
        handoff_id = str(self.values["handoff_id"])

        def completed() -> bool:
            return "HandoffsCompleted" in emf_values(self._handoff_calls(handoff_id), ["service"])

        self.stage.settle(until=completed, timeout=20, wait_executions=False)
        calls = self._handoff_calls(handoff_id)
        overall = emf_values(calls, ["service"])
        counts = {name: sum(overall.get(name, [])) for name in (*COUNTS, "HandoffsEscalated", "HandoffsFailed")}
        expect(
            counts == {**dict.fromkeys(COUNTS, 1.0), "HandoffsEscalated": 0.0, "HandoffsFailed": 0.0},
            f"the handoff's counts are not one request, assignment and completion: {counts}",
        )
        times = {name: overall.get(name, []) for name in TIMES}
        expect(all(len(v) == 1 and v[0] >= 0 for v in times.values()), f"the handoff's times: {times}")
        by_kind = emf_values(calls, ["service", "reason", "priority"])
        expect(by_kind == overall, f"by reason and priority {by_kind} is not the overall {overall}")
        dimensions = {(d["reason"], d["priority"]) for c in calls for d in c.emf() if "reason" in d}
        expect(dimensions == {("general", "high")}, f"dimensions {dimensions}, not reason general, priority high")
        step.calls.append(f"{len(calls)} HandoffChanged events -> HandoffMetrics")
        step.changes.append(
            ", ".join(f"{name} {int(value)}" for name, value in counts.items() if value)
            + "; "
            + ", ".join(f"{name} {int(values[0])} s" for name, values in times.items())
            + " (reason general, priority high)"
        )
        self._gauge(step)
        self.done(step, started)

    def _gauge(self, step: Any) -> None:
        """Fire the minute's schedule once; the gauge counts this session among the active ones."""
        before = len(self.stage.calls.by_handler(GAUGE_HANDLER))
        (schedule,) = self.stage.all(
            "AWS::Events::Rule", where=lambda r: r.properties.get("ScheduleExpression") == "rate(1 minute)"
        )
        self.stage.fire_schedule(schedule)
        step.calls.append("schedule rate(1 minute) fired -> SessionsGauge")
        self.stage.settle(
            until=lambda: len(self.stage.calls.by_handler(GAUGE_HANDLER)) > before, timeout=20, wait_executions=False
        )
        call = self.stage.calls.by_handler(GAUGE_HANDLER)[-1]
        expect(call.error is None, f"the sessions gauge failed: {call.error!r}")
        gauges = emf_values([call], ["service"])
        active, in_handoff = gauges.get("SessionsActive", []), gauges.get("SessionsInHandoff", [])
        expect(len(active) == 1 and active[0] >= 1, f"SessionsActive {active} does not count this active session")
        expect(len(in_handoff) == 1, f"SessionsInHandoff {in_handoff}")
        step.changes.append(f"SessionsActive {int(active[0])}, SessionsInHandoff {int(in_handoff[0])}")
