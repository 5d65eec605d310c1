"""The handoff message the router publishes and the three queue consumers read.

Body (JSON), also the customer-notification contract ``{"session_id", "event_type", "text", ...}``:
``session_id``, ``handoff_id``, ``event_type`` (the router's handoff | queued | assigned |
escalated | completed, or one of the workflow's notices), ``agent_id`` (or null),
``reason``, ``priority``, ``event_id`` (the stream record's id), and for ``completed`` the
``resolution`` and ``outcome``. ``text`` (what to tell the customer) is present in the notices the
handoff workflow sends to the customer queue itself; for the router's events the customer
notifier writes the text.
Queues subscribe with raw message delivery, so the SQS body is this JSON; an SNS envelope
(``Type: Notification``) is unwrapped too, so a subscription without raw delivery also works.

The message vocabulary (``event_type`` values, the escalation reason, the attribute names) and
the vocabulary of the session event the router puts on the event bus are defined once in
:mod:`contracts.messages`, which the stacks' SNS filter policies read too; they are re-exported
here for the router, the handoff steps and the consumers.
"""

from __future__ import annotations

from dataclasses import dataclass

from contracts.messages import (
    AGENT_BROADCAST_EVENTS,
    ATTR_AGENT_ID,
    ATTR_EVENT_TYPE,
    ATTR_REASON,
    CUSTOMER_EVENTS,
    EVENT_ASSIGNED,
    EVENT_CLOSED,
    EVENT_ESCALATED,
    EVENT_ESCALATION,
    EVENT_HANDOFF,
    EVENT_HANDOFF_ASSIGNED,
    EVENT_HANDOFF_CONTEXT,
    EVENT_HANDOFF_FAILED,
    EVENT_HANDOFF_STARTED,
    EVENT_HANDOFF_WAITING,
    EVENT_QUEUED,
    EVENT_SOURCE,
    NO_STATUS,
    REASON_ESCALATED,
    STATUS_CHANGED,
)
from lambdas.shared import queue_body

__all__ = [
    "AGENT_BROADCAST_EVENTS",
    "ATTR_AGENT_ID",
    "ATTR_EVENT_TYPE",
    "ATTR_REASON",
    "CUSTOMER_EVENTS",
    "EVENT_ASSIGNED",
    "EVENT_CLOSED",
    "EVENT_ESCALATED",
    "EVENT_ESCALATION",
    "EVENT_HANDOFF",
    "EVENT_HANDOFF_ASSIGNED",
    "EVENT_HANDOFF_CONTEXT",
    "EVENT_HANDOFF_FAILED",
    "EVENT_HANDOFF_STARTED",
    "EVENT_HANDOFF_WAITING",
    "EVENT_QUEUED",
    "EVENT_SOURCE",
    "NO_STATUS",
    "REASON_ESCALATED",
    "STATUS_CHANGED",
    "HandoffMessage",
    "InvalidMessage",
    "parse_body",
]


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
    resolution: str | None = None
    outcome: str | None = None


def parse_body(body: str) -> HandoffMessage:
    try:
        data = queue_body.json_object(body)
    except ValueError as err:
        raise InvalidMessage(str(err)) from None
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
        resolution=opt("resolution"),
        outcome=opt("outcome"),
    )
