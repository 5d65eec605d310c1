"""Settings and clients the WebSocket handlers share, created lazily and once per container."""

from __future__ import annotations

from typing import Any

import boto3
from botocore.config import Config

from lambdas.shared import env
from lambdas.shared.store import DynamoSessionStore


@env.once
def store() -> DynamoSessionStore:
    """The SessionStore on ``TABLE_NAME``; TTL and cleanup sharding from the stage config."""
    return DynamoSessionStore(
        env.require("TABLE_NAME"),
        ttl_hours=env.integer("SESSION_TTL_HOURS", 24, low=1, high=24 * 365),
        cleanup_shards=env.integer("CLEANUP_SHARDS", 8, low=1, high=64),
    )


@env.once
def stepfunctions() -> Any:
    return boto3.client("stepfunctions", config=Config(retries={"mode": "standard", "max_attempts": 3}))
