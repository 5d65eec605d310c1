"""The handoff message the router publishes and the three queue consumers read.

Body (JSON), also the customer-notification contract ``{"session_id", "event_type", "text", ...}``:
``session_id``, ``handoff_id``, ``event_type`` (handoff | assigned), ``agent_id`` (or null),
``reason``, ``priority``, ``event_id`` (the stream record's id), and for ``completed`` the
``resolution`` and ``outcome``. ``text`` (what to tell the customer) is present in the notices the
handoff workflow sends to the customer queue itself; for the router's events the customer
notifier writes the text.
Queues subscribe with raw message delivery, so the SQS body is this JSON; an SNS envelope
(``Type: Notification``) is unwrapped too, so a subscription without raw delivery also works.

The message vocabulary (``event_type`` values, the escalation reason, the attribute names) is
defined here once; the router, the handoff steps, the consumers and the stacks' SNS filter
policies import it. So is the vocabulary of the session event the router puts on the event bus,
which the metrics function reads without loading the router's code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

#: The session event on the bus: its source, detail type, and the ``old_status`` of a new session.
EVENT_SOURCE: Final = "mangaassist.sessions"
STATUS_CHANGED: Final = "SessionStatusChanged"
NO_STATUS: Final = "none"

#: Message attributes of the handoff topic, which its queues' filter policies match.
ATTR_EVENT_TYPE: Final = "event_type"
ATTR_AGENT_ID: Final = "agent_id"
ATTR_REASON: Final = "reason"

#: The router: a HANDOFF# record was created.
EVENT_HANDOFF: Final = "handoff"
#: The router: a HANDOFF# record got a (new) agent.
EVENT_ASSIGNED: Final = "assigned"
#: The router: a HANDOFF# record's status became ``escalated`` (no agent accepted in time).
EVENT_ESCALATED: Final = "escalated"
#: The router: a HANDOFF# record's status became ``completed`` (its agent or an admin closed it).
EVENT_CLOSED: Final = "completed"
#: The handoff workflow: a customer waits for any agent (no agent_id yet).
EVENT_HANDOFF_WAITING: Final = "handoff_waiting"
#: The handoff workflow: the transcript and summary for the assigned agent.
EVENT_HANDOFF_CONTEXT: Final = "handoff_context"
#: The handoff workflow: an agent was assigned (to the agent).
EVENT_HANDOFF_ASSIGNED: Final = "handoff_assigned"
#: The handoff workflow's customer notices.
EVENT_HANDOFF_STARTED: Final = "handoff_started"
EVENT_HANDOFF_FAILED: Final = "handoff_failed"
#: The escalation consumer, on the managers' own topic.
EVENT_ESCALATION: Final = "escalation"
#: A reason no caller may give: it is the status an escalated handoff takes, and a handoff whose
#: reason read like its status would be ambiguous in every listing.
REASON_ESCALATED: Final = "escalated"

#: What the customer-notification queue receives from the router: the changes of a handoff the
#: customer is told of that the workflow does not tell (it sends started and failed itself).
CUSTOMER_EVENTS: Final = (EVENT_ESCALATED, EVENT_CLOSED)
#: Broadcasts to every agent's console (no agent_id), besides messages that carry an agent_id.
AGENT_BROADCAST_EVENTS: Final = (EVENT_HANDOFF_WAITING,)


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
        resolution=opt("resolution"),
        outcome=opt("outcome"),
    )
