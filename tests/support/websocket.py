"""The frames moto's WebSocket management API received, and the API the test events come from.

Usage::

    event = ws_event("sendMessage", connection_id="L0SM9cOFvHcCIhw=", body=...)  # embedded.events
    frames = sent_frames("L0SM9cOFvHcCIhw=")     # inside mock_aws(): every frame posted so far
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from moto.apigatewaymanagementapi.models import apigatewaymanagementapi_backends
from moto.core.models import DEFAULT_ACCOUNT_ID

from embedded.events import DEFAULT_API

STAGE = DEFAULT_API.stage
REGION = DEFAULT_API.region
DOMAIN = DEFAULT_API.domain
ENDPOINT = DEFAULT_API.endpoint


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
