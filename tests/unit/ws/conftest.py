"""The WebSocket handlers environment on moto: the table and the onboarding state machine."""

from __future__ import annotations

import json
from collections.abc import Iterator

import boto3
import pytest

from lambdas.shared import env
from lambdas.shared.store import DynamoSessionStore


@pytest.fixture
def ws(table_name: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[DynamoSessionStore]:
    """The handlers' environment on moto (table, Express state machine); yields a store to inspect."""
    machine = boto3.client("stepfunctions", region_name="us-east-1").create_state_machine(
        name="onboarding",
        definition=json.dumps({"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}}),
        roleArn="arn:aws:iam::123456789012:role/sfn",
        type="EXPRESS",
    )["stateMachineArn"]
    for key, value in {
        "TABLE_NAME": table_name,
        "SESSION_TTL_HOURS": "24",
        "CLEANUP_SHARDS": "8",
        "ONBOARDING_STATE_MACHINE_ARN": machine,
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("BEDROCK_MODEL_ID", raising=False)
    env.reset()
    yield DynamoSessionStore(table_name)
    env.reset()
