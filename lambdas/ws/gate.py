"""The gate a chat frame passes before it asks the model again: ``rewind`` and ``continue``.

Both are a customer's frames on the chat's connection that end in a model call, so both pass what
a message passes (:func:`lambdas.usecases.send_message.admit`): the caller is a customer, the
connection names a session, the customer's and the connection's rate buckets admit, and the
day's tokens are not spent. A refused frame stores nothing, calls no model and says why. (A message
passes the same checks in the round trip that stores its turn, in the Message Lambda itself.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, NamedTuple

from lambdas.shared.store import DynamoSessionStore
from lambdas.usecases import send_message
from lambdas.ws.frames import RouteContext, error_frame, rate_limited_frame, token_budget_frame

FORBIDDEN: Final = error_frame(
    "forbidden", "This connection is not signed in as a customer. Reconnect with a customer token."
)
NOT_READY: Final = error_frame(
    "session_not_ready", "Your chat session is still starting. Please try again in a moment."
)
SESSION_CLOSED: Final = error_frame("session_closed", "This chat session has ended. Reconnect to start a new one.")


class Admitted(NamedTuple):
    """Who may ask the model once more, and in which session."""

    session_id: str
    customer_id: str


class Refused(Exception):
    """A frame that changes nothing: ``frame`` tells the customer why, ``outcome`` names it (logs, tests)."""

    def __init__(self, frame: Mapping[str, Any], outcome: str) -> None:
        super().__init__(outcome)
        self.frame = frame
        self.outcome = outcome


def admitted(store: DynamoSessionStore, ctx: RouteContext) -> Admitted:
    """The customer and the session the connection names, once the gate admits one more model call.

    Refused (:class:`Refused`) with the frame that says why not: nothing is stored, no model called.

    AWS errors of the admission's reads and writes propagate: the caller answers them with its own
    ``..._failed`` frame.
    """
    customer_id = ctx.customer_id
    if customer_id is None:
        raise Refused(FORBIDDEN, "refused:forbidden")
    gate = send_message.admit(store, ctx.connection_id, customer_id)
    if gate.connection is None:
        raise Refused(NOT_READY, send_message.NOT_READY)
    if not gate.admission.admitted:
        raise Refused(rate_limited_frame(gate.admission.retry_after_seconds), send_message.RATE_LIMITED)
    spent = send_message.budget_spent(store, gate)
    if spent is not None:
        raise Refused(token_budget_frame(*spent), send_message.OVER_BUDGET)
    return Admitted(gate.connection.session_id, customer_id)
