"""WebSocket route events shaped as API Gateway sends them, and the frames moto's management API received.

Usage::

    event = ws_event("sendMessage", connection_id="L0SM9cOFvHcCIhw=", body='{"action": ...}')
    frames = sent_frames("L0SM9cOFvHcCIhw=")     # inside mock_aws(): every frame posted so far
"""

from __future__ import annotations

import json
import uuid
from typing import Any
from urllib.parse import quote

from moto.apigatewaymanagementapi.models import apigatewaymanagementapi_backends
from moto.core.models import DEFAULT_ACCOUNT_ID

API_ID = "a1b2c3d4e5"
STAGE = "dev"
REGION = "us-east-1"
DOMAIN = f"{API_ID}.execute-api.{REGION}.amazonaws.com"
ENDPOINT = f"https://{DOMAIN}/{STAGE}"
REQUEST_TIME_EPOCH = 1_767_225_600_000

_EVENT_TYPES = {"$connect": "CONNECT", "$disconnect": "DISCONNECT"}


def ws_event(
    route_key: str,
    *,
    connection_id: str = "L0SM9cOFvHcCIhw=",
    body: str | None = None,
    customer_id: str | None = "alice",
    role: str = "customer",
    query: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Lambda proxy event of a WebSocket route (``$connect``, ``$disconnect`` or a message route).

    ``customer_id`` None leaves out the authorizer context (an API without an authorizer).
    """
    event_type = _EVENT_TYPES.get(route_key, "MESSAGE")
    context: dict[str, Any] = {
        "routeKey": route_key,
        "eventType": event_type,
        "extendedRequestId": "Bxq3LGsoIAMF" + uuid.uuid4().hex[:4],
        "requestTime": "01/Jan/2026:00:00:00 +0000",
        "messageDirection": "IN",
        "stage": STAGE,
        "connectedAt": REQUEST_TIME_EPOCH,
        "requestTimeEpoch": REQUEST_TIME_EPOCH,
        "identity": {"sourceIp": "203.0.113.9", "userAgent": "Mozilla/5.0"},
        "requestId": "Bxq3LGsoIAMF" + uuid.uuid4().hex[:8] + "=",
        "domainName": DOMAIN,
        "connectionId": connection_id,
        "apiId": API_ID,
    }
    if customer_id is not None:
        context["authorizer"] = {
            "principalId": customer_id,
            "customer_id": customer_id,
            "role": role,
            "integrationLatency": 12,
        }
    event: dict[str, Any] = {"requestContext": context, "isBase64Encoded": False}
    if event_type == "CONNECT":
        headers = {"Host": DOMAIN, "Sec-WebSocket-Version": "13", "Origin": "http://localhost:3000"}
        event["headers"] = headers
        event["multiValueHeaders"] = {k: [v] for k, v in headers.items()}
        if query:
            event["queryStringParameters"] = dict(query)
            event["multiValueQueryStringParameters"] = {k: [v] for k, v in query.items()}
    elif event_type == "DISCONNECT":
        context["disconnectStatusCode"] = 1001
        context["disconnectReason"] = "Going away"
        event["headers"] = {"Host": DOMAIN}
        event["multiValueHeaders"] = {"Host": [DOMAIN]}
    else:
        context["messageId"] = "Bxq3ccfmoAMCIYw="
        event["body"] = body
    return event


def authorizer_event(token: str | None, *, connection_id: str = "L0SM9cOFvHcCIhw=") -> dict[str, Any]:
    """The REQUEST authorizer event of a WebSocket ``$connect`` (identity source: ``token`` query)."""
    event = ws_event(
        "$connect", connection_id=connection_id, customer_id=None, query={"token": token} if token else None
    )
    event["type"] = "REQUEST"
    event["methodArn"] = f"arn:aws:execute-api:{REGION}:{DEFAULT_ACCOUNT_ID}:{API_ID}/{STAGE}/$connect"
    return event


def sent_frames(connection_id: str) -> list[dict[str, Any]]:
    """Every frame moto's management API received for the connection, in order (call inside mock_aws)."""
    backend = apigatewaymanagementapi_backends[DEFAULT_ACCOUNT_ID][REGION]
    # moto keys a connection by the id as it appears in the request path (URL-encoded).
    connection = backend.connections.get(connection_id) or backend.connections.get(quote(connection_id, safe=""))
    if connection is None:
        return []
    data = connection.data.decode("utf-8")
    decoder = json.JSONDecoder()
    frames, position = [], 0
    while position < len(data):
        frame, position = decoder.raw_decode(data, position)
        frames.append(frame)
    return frames
