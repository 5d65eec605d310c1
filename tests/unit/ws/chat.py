"""What the WebSocket handler tests share: API Gateway events, an onboarded connection, a sent frame."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import boto3

from embedded.events import authorizer_context, lambda_context, ws_event
from lambdas.shared import env
from lambdas.shared.records import Turn
from lambdas.ws import message, onboarding
from tests.support.identity import TokenIssuer
from tests.support.websocket import DOMAIN, STAGE

CONN = "L0SM9cOFvHcCIhw="


def customer_context(customer_id: str, role: str = "customer") -> dict[str, Any]:
    """What the $connect authorizer puts in ``requestContext.authorizer`` for a signed-in user."""
    return authorizer_context(customer_id, customer_id=customer_id, role=role)


ALICE = customer_context("alice")


OTHER_CONN = "M1TN0dPGwIdDJix="


ISSUER = TokenIssuer()


OTHER_POOL = TokenIssuer(issuer="https://cognito-idp.us-east-1.amazonaws.com/us-east-1_OtherPool")


CTX = lambda_context("ws-test")


def onboarded(customer: str = "alice", connection_id: str = CONN, session_id: str | None = None) -> str:
    """Run the onboarding step for a connection as the workflow would; returns the session id."""
    result = onboarding.handler(
        {
            "step": "onboard",
            "connection_id": connection_id,
            "customer_id": customer,
            "session_id": session_id,
            "domain_name": DOMAIN,
            "stage": STAGE,
        },
        CTX,
    )
    return str(result["session_id"])


def send(text: Any, connection_id: str = CONN, customer: str = "alice") -> dict[str, Any]:
    body = json.dumps({"action": "sendMessage", "text": text})
    return message.handler(
        ws_event("sendMessage", connection_id=connection_id, body=body, authorizer=customer_context(customer)), CTX
    )


def executions() -> list[dict[str, Any]]:
    sfn = boto3.client("stepfunctions", region_name="us-east-1")
    arn = env.require("ONBOARDING_STATE_MACHINE_ARN")
    return [
        sfn.describe_execution(executionArn=e["executionArn"])
        for e in sfn.list_executions(stateMachineArn=arn)["executions"]
    ]


def roles(turns: Sequence[Turn]) -> list[str]:
    return [str(t.role) for t in turns]
