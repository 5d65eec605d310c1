"""The handoff message the router publishes and the three queue consumers read.

Body (JSON), also the customer-notification contract ``{"session_id", "event_type", "text", ...}``:
``session_id``, ``handoff_id``, ``event_type`` (handoff | assigned), ``agent_id`` (or null),
``reason``, ``priority``, ``event_id`` (the stream record's id). ``text`` (what to tell the
customer) is present only in notices the handoff workflow sends to the customer queue; the
router's handoff events carry none, and the customer notifier skips bodies without text.
Queues subscribe with raw message delivery, so the SQS body is this JSON; an SNS envelope
(``Type: Notification``) is unwrapped too, so a subscription without raw delivery also works.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


class InvalidMessage(ValueError):
    """A queue message that is not a handoff message; its record is reported failed."""


@dataclass(frozen=True)
class HandoffMessage:
    session_id: str
    event_type: str
    text: str
    handoff_id: str | None = None
    agent_id: str | None = None
    reason: str | None = None
    priority: str = "normal"
    event_id: str | None = None


def parse_body(body: str) -> HandoffMessage:
    try:
        data: Any = json.loads(body)
        if isinstance(data, dict) and data.get("Type") == "Notification" and "Message" in data:
            data = json.loads(data["Message"])
    except (TypeError, ValueError) as err:
        raise InvalidMessage(f"body is not JSON: {err}") from None
    if not isinstance(data, dict):
        raise InvalidMessage("body must be a JSON object")
    session_id, event_type = data.get("session_id"), data.get("event_type")
    if not isinstance(session_id, str) or not session_id:
        raise InvalidMessage("session_id is required")
    if not isinstance(event_type, str) or not event_type:
        raise InvalidMessage("event_type is required")

    def opt(name: str) -> str | None:
        value = data.get(name)
        return None if value is None else str(value)

    return HandoffMessage(
        session_id=session_id,
        event_type=event_type,
        text=str(data.get("text") or ""),
        handoff_id=opt("handoff_id"),
        agent_id=opt("agent_id"),
        reason=opt("reason"),
        priority=str(data.get("priority") or "normal"),
        event_id=opt("event_id"),
    )
