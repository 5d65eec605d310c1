"""BASELINE for `make bench` only, never deployed: the chat reply as it was before streaming.

The message is admitted and stored exactly as the message Lambda does it (the same store calls),
then the model answers in one Converse call, the whole reply is stored, and only then is it
posted, as one ``message`` frame. So the customer reads nothing until the model has written its
last token. Only the reply differs from the Lambda's path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from bench.baseline_message import WholeReply
from lambdas.shared.records import Role
from lambdas.shared.store import DynamoSessionStore, Rate
from lambdas.ws.frames import message_frame

Send = Callable[[Mapping[str, Any]], bool]


def handle_message(
    store: DynamoSessionStore,
    model: WholeReply,
    connection_id: str,
    customer_id: str,
    text: str,
    send: Send,
    *,
    per_connection: Rate,
    per_customer: Rate,
    context_turns: int,
) -> str:
    """Admit, store, reply in one piece, store the reply, post it; returns the outcome."""
    gate = store.chat.admit_message(
        connection_id, customer_id, per_connection=per_connection, per_customer=per_customer
    )
    if gate.connection is None or not gate.admission.admitted:
        return "refused"
    accepted = store.chat.accept_message(gate.connection.session_id, customer_id, text, context_turns=context_turns)
    if accepted.context is None:
        return "handoff"
    reply = model.reply(accepted.context.turns, summary=accepted.context.summary)
    turn = store.turns.add_turn(accepted.session.session_id, Role.ASSISTANT, reply)
    frame = message_frame(role="assistant", session_id=turn.session_id, turn_number=turn.turn_number, text=reply)
    return "replied" if send(frame) else "gone"
