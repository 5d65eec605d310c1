"""Clients the WebSocket handlers share, created lazily and once per container."""

from __future__ import annotations

from typing import Any

from lambdas.shared import aws
from lambdas.shared.settings import store as store


def stepfunctions() -> Any:
    return aws.client("stepfunctions")
