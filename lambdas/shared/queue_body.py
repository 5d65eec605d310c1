"""The JSON object an SQS message body carries, whether SNS delivered it raw or in its envelope.

A subscription with raw message delivery puts the published message in the body as it is; one
without wraps it in SNS's ``Notification`` envelope, whose ``Message`` holds it as a string. The
queue consumers read either, so a subscription's setting never decides whether a message is read.
"""

from __future__ import annotations

import json
from typing import Any


def json_object(body: str) -> dict[str, Any]:
    """The object ``body`` carries; ``ValueError`` says why there is none (not JSON, not an object)."""
    try:
        data: Any = json.loads(body)
        if isinstance(data, dict) and data.get("Type") == "Notification" and "Message" in data:
            data = json.loads(data["Message"])
    except (TypeError, ValueError) as err:
        raise ValueError(f"body is not JSON: {err}") from None
    if not isinstance(data, dict):
        raise ValueError("body must be a JSON object")
    return data
