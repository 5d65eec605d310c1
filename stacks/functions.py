"""How every stack builds its Lambda functions: one code asset, the stage's runtime settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aws_cdk import Duration
from aws_cdk import aws_logs as logs
from constructs import Construct

from constructs_lib import SharedFunction
from stacks.config import StageConfig

#: The one directory every function's code asset is packaged from.
LAMBDAS_DIR = Path(__file__).resolve().parent.parent / "lambdas"

_RETENTION = {
    1: logs.RetentionDays.ONE_DAY, 3: logs.RetentionDays.THREE_DAYS, 5: logs.RetentionDays.FIVE_DAYS,
    7: logs.RetentionDays.ONE_WEEK, 14: logs.RetentionDays.TWO_WEEKS, 30: logs.RetentionDays.ONE_MONTH,
    60: logs.RetentionDays.TWO_MONTHS, 90: logs.RetentionDays.THREE_MONTHS, 120: logs.RetentionDays.FOUR_MONTHS,
    150: logs.RetentionDays.FIVE_MONTHS, 180: logs.RetentionDays.SIX_MONTHS, 365: logs.RetentionDays.ONE_YEAR,
    400: logs.RetentionDays.THIRTEEN_MONTHS, 545: logs.RetentionDays.EIGHTEEN_MONTHS,
    731: logs.RetentionDays.TWO_YEARS, 1096: logs.RetentionDays.THREE_YEARS, 1827: logs.RetentionDays.FIVE_YEARS,
    2192: logs.RetentionDays.SIX_YEARS, 2557: logs.RetentionDays.SEVEN_YEARS, 2922: logs.RetentionDays.EIGHT_YEARS,
    3288: logs.RetentionDays.NINE_YEARS, 3653: logs.RetentionDays.TEN_YEARS,
}  # fmt: skip


def log_retention(days: int) -> logs.RetentionDays:
    """The CloudWatch Logs retention enum member for ``config.log_retention_days``."""
    if days not in _RETENTION:
        raise ValueError(f"log_retention_days must be one of {sorted(_RETENTION)} (given {days})")
    return _RETENTION[days]


def stage_function(
    scope: Construct,
    construct_id: str,
    config: StageConfig,
    *,
    handler: str,
    environment: dict[str, str],
    **options: Any,
) -> SharedFunction:
    """A function from the shared asset with the stage's timeout, memory and log retention.

    ``options`` go to :class:`SharedFunction` and win over the stage defaults (a longer timeout,
    a service name, a log key, an on-failure destination, ...).
    """
    settings: dict[str, Any] = {
        "timeout": Duration.seconds(config.lambda_timeout_seconds),
        "memory_size": config.lambda_memory_mb,
        "log_retention": log_retention(config.log_retention_days),
        **options,
    }
    return SharedFunction(
        scope, construct_id, code_root=LAMBDAS_DIR, handler=handler, environment=environment, **settings
    )
