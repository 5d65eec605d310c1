"""A CloudWatch dashboard built as titled rows of graphs, with an alarm status row on top."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from constructs import Construct

from constructs_lib.validation import PropErrors


class OpsDashboard(Construct):
    """One dashboard that shows a system at a glance.

    Example::

        board = OpsDashboard(self, "Dashboard", alarms=alarms.alarms)
        board.add_row("API", [("Requests", [api.metric_count()]), ("5XX", [api.metric_server_error()])])

    Args:
        dashboard_name: physical name. Defaults to a generated name (set one when people open it
            by name; it must be unique per account and region).
        alarms: alarms shown in a status row at the top. Defaults to none.
        period: aggregation period of every graph. Defaults to five minutes.
    """

    WIDTH = 24  # CloudWatch dashboards are 24 units wide

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        dashboard_name: str | None = None,
        alarms: Sequence[cloudwatch.IAlarm] = (),
        period: Duration | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self._errors = PropErrors(self)
        self.period = period or Duration.minutes(5)
        self.dashboard: cloudwatch.Dashboard = cloudwatch.Dashboard(
            self, "Resource", dashboard_name=dashboard_name, default_interval=Duration.hours(3)
        )
        if alarms:
            self.dashboard.add_widgets(
                cloudwatch.AlarmStatusWidget(title="Alarms", alarms=list(alarms), width=self.WIDTH, height=4)
            )

    def add_row(self, title: str, graphs: Sequence[tuple[str, Sequence[cloudwatch.IMetric]]]) -> None:
        """A titled row of line graphs; ``graphs`` is ``[(graph title, metrics), ...]`` (1..4 graphs)."""
        if not self._errors.check(
            1 <= len(graphs) <= 4, f"a row holds 1..4 graphs (given {len(graphs)} for {title!r}): split the row"
        ):
            return
        graphs = [
            (graph_title, metrics)
            for graph_title, metrics in graphs
            if self._errors.check(bool(metrics), f"graph {graph_title!r} in row {title!r} has no metric: give one")
        ]
        width = self.WIDTH // len(graphs)
        self.dashboard.add_widgets(cloudwatch.TextWidget(markdown=f"## {title}", width=self.WIDTH, height=1))
        self.dashboard.add_widgets(
            *[
                cloudwatch.GraphWidget(title=graph_title, left=list(metrics), width=width, height=6, period=self.period)
                for graph_title, metrics in graphs
            ]
        )
