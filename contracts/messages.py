"""The vocabulary of the handoff messages and of the session events on the bus.

The stream router, the handoff workflow's steps and the queue consumers write and read these
names (``lambdas.events.messages`` holds the message body and its parser); the Events stack's SNS
filter policies and the handoff workflow's notification states match the same names, so a filter
cannot fall behind the messages it selects.
"""

from __future__ import annotations

from typing import Final

#: The session event on the bus: its source, detail type, and the ``old_status`` of a new session.
EVENT_SOURCE: Final = "mangaassist.sessions"
STATUS_CHANGED: Final = "SessionStatusChanged"
NO_STATUS: Final = "none"

#: The handoff event on the bus (same source): one per change of a ``HANDOFF#`` record that the
#: handoff metrics count. ``changes`` lists what happened, in the order the record went through it.
HANDOFF_CHANGED: Final = "HandoffChanged"
CHANGE_REQUESTED: Final = "requested"
CHANGE_ASSIGNED: Final = "assigned"
CHANGE_ESCALATED: Final = "escalated"
CHANGE_FIRST_REPLY: Final = "first_reply"
CHANGE_COMPLETED: Final = "completed"
CHANGE_FAILED: Final = "failed"
HANDOFF_CHANGES: Final = (
    CHANGE_REQUESTED,
    CHANGE_ASSIGNED,
    CHANGE_ESCALATED,
    CHANGE_FIRST_REPLY,
    CHANGE_COMPLETED,
    CHANGE_FAILED,
)

#: Message attributes of the handoff topic, which its queues' filter policies match.
ATTR_EVENT_TYPE: Final = "event_type"
ATTR_AGENT_ID: Final = "agent_id"
ATTR_REASON: Final = "reason"

#: The router: a HANDOFF# record was created with its agent.
EVENT_HANDOFF: Final = "handoff"
#: The router: a HANDOFF# record was created waiting for an agent (to the customer: you are queued;
#: the agents hear of it from the workflow's handoff_waiting).
EVENT_QUEUED: Final = "queued"
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
CUSTOMER_EVENTS: Final = (EVENT_QUEUED, EVENT_ESCALATED, EVENT_CLOSED)
#: Broadcasts to every agent's console (no agent_id), besides messages that carry an agent_id.
AGENT_BROADCAST_EVENTS: Final = (EVENT_HANDOFF_WAITING,)
