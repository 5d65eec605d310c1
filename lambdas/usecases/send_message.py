"""A customer's chat message, before anyone answers it: admitted, then stored once as the session's next turn.

1. Admission, one round trip (:meth:`~lambdas.shared.store.chat.Chat.admit_message`): the
   connection's ``CONN#`` record must exist and name the customer, and one token is taken from
   the connection's bucket and one from the customer's (the stage's rates), all at once.
2. Acceptance, two round trips (:meth:`~lambdas.shared.store.chat.Chat.accept_message`): the turn
   number is reserved by a conditional write on the session (it must accept turns and be the
   customer's), then the turn is stored while the model's context is read. With a
   ``client_message_id`` the turn is stored once however often the message is sent
   (:func:`lambdas.shared.idempotency.replay`).

What happened is one :class:`Received`; a refused message stored nothing, and never reaches the
model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from aws_lambda_powertools import Logger
from botocore.exceptions import BotoCoreError, ClientError

from lambdas.shared import idempotency
from lambdas.shared.errors import SessionClosed, SessionNotFound
from lambdas.shared.logs import masked_formatter
from lambdas.shared.settings import settings
from lambdas.shared.store import AcceptedMessage, DynamoSessionStore, MessageAdmission, Rate

logger = Logger(logger_formatter=masked_formatter())

STORED: Final = "stored"
DUPLICATE: Final = "duplicate"
NOT_READY: Final = "not_ready"
RATE_LIMITED: Final = "rate_limited"
SESSION_CLOSED: Final = "session_closed"
NOT_SAVED: Final = "not_saved"
CLIENT_MESSAGE_ID_REUSED: Final = "refused:client_message_id_reused"
CLIENT_MESSAGE_ID_BUSY: Final = "refused:client_message_id_busy"


@dataclass(frozen=True)
class Received:
    """What became of a customer's message.

    ``outcome``: :data:`STORED` (``accepted`` holds the stored turn and the model's context),
    :data:`DUPLICATE` (a resend of a keyed message stored before; ``session_id`` and
    ``turn_number`` name it) or a refusal that stored nothing (:data:`NOT_READY`,
    :data:`RATE_LIMITED` with ``retry_after_seconds``, :data:`SESSION_CLOSED`, :data:`NOT_SAVED`,
    :data:`CLIENT_MESSAGE_ID_REUSED`, :data:`CLIENT_MESSAGE_ID_BUSY`).
    """

    outcome: str
    accepted: AcceptedMessage | None = None
    session_id: str | None = None
    turn_number: int | None = None
    retry_after_seconds: int = 0


def admit(store: DynamoSessionStore, connection_id: str, customer_id: str) -> MessageAdmission:
    """The caller's connection and a token from its bucket and its customer's, at the stage's rates."""
    config = settings()
    return store.chat.admit_message(
        connection_id,
        customer_id,
        per_connection=Rate(config.chat_connection_messages_per_minute, config.chat_connection_burst),
        per_customer=Rate(config.chat_customer_messages_per_minute, config.chat_customer_burst),
    )


def receive(
    store: DynamoSessionStore, connection_id: str, customer_id: str, text: str, client_message_id: str | None
) -> Received:
    """Admit the message and store it as the session's next turn (see the module docstring)."""
    try:
        gate = admit(store, connection_id, customer_id)
    except (ClientError, BotoCoreError):
        logger.exception("message not admitted")
        return Received(NOT_SAVED)
    if gate.connection is None:
        return Received(NOT_READY)
    if not gate.admission.admitted:
        return Received(RATE_LIMITED, retry_after_seconds=gate.admission.retry_after_seconds)
    session_id = gate.connection.session_id
    stored: list[AcceptedMessage] = []

    def accept() -> dict[str, Any]:
        accepted = store.chat.accept_message(session_id, customer_id, text, context_turns=settings().context_turns)
        stored.append(accepted)
        return {"turn_number": accepted.turn.turn_number}

    try:
        answer = idempotency.replay(customer_id, f"sendMessage {session_id}", client_message_id, {"text": text}, accept)
    except (SessionClosed, SessionNotFound):
        return Received(SESSION_CLOSED, session_id=session_id)
    except idempotency.KeyReused:
        return Received(CLIENT_MESSAGE_ID_REUSED, session_id=session_id)
    except idempotency.StillRunning:
        return Received(CLIENT_MESSAGE_ID_BUSY, session_id=session_id)
    except Exception:
        logger.exception("user turn not stored", extra={"session_id": session_id})
        return Received(NOT_SAVED, session_id=session_id)
    if not stored:  # a resend of a message stored before (only a keyed one is replayed): nothing new
        return Received(DUPLICATE, session_id=session_id, turn_number=int(answer["turn_number"]))
    return Received(STORED, stored[0], session_id=session_id, turn_number=stored[0].turn.turn_number)
