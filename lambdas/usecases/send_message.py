"""A customer's chat message, before anyone answers it: admitted, then stored once as the session's next turn.

1. Admission, one round trip (:meth:`~lambdas.shared.store.chat.Chat.admit_message`): the
   connection's ``CONN#`` record must exist and name the customer, one token is taken from the
   connection's bucket and one from the customer's (the stage's rates), the customer's tokens of
   the day must be below the stage's daily budget (a read), and a message with a
   ``client_message_id`` looks up the record a first send of it left, all at once.
2. Acceptance, two round trips (:meth:`~lambdas.shared.store.chat.Chat.accept_message`): the turn
   number is reserved by a conditional write on the session (it must accept turns and be the
   customer's), then the turn is stored while the model's context is read. With a
   ``client_message_id`` the turn and its sent record are one transaction, so the turn is stored
   once however often, or however concurrently, the message is sent: a resend gets the first
   send's turn number, whether the admission found its record or the transaction did.

What happened is one :class:`Received`; a refused message stored nothing, and never reaches the
model. The checks decide in this order: ready, rate, a resend, the budget (a resend of a message
stored before costs no tokens, so it is answered even over the budget).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from aws_lambda_powertools import Logger
from botocore.exceptions import BotoCoreError, ClientError

from lambdas.shared.errors import SessionClosed, SessionNotFound
from lambdas.shared.logs import masked_formatter
from lambdas.shared.records import TokenUsage
from lambdas.shared.settings import settings
from lambdas.shared.store import AcceptedMessage, DynamoSessionStore, MessageAdmission, Rate, SentBefore, SentMessage

logger = Logger(logger_formatter=masked_formatter())

STORED: Final = "stored"
DUPLICATE: Final = "duplicate"
NOT_READY: Final = "not_ready"
RATE_LIMITED: Final = "rate_limited"
OVER_BUDGET: Final = "token_budget_exhausted"
SESSION_CLOSED: Final = "session_closed"
NOT_SAVED: Final = "not_saved"
CLIENT_MESSAGE_ID_REUSED: Final = "refused:client_message_id_reused"


@dataclass(frozen=True)
class Received:
    """What became of a customer's message.

    ``outcome``: :data:`STORED` (``accepted`` holds the stored turn and the model's context),
    :data:`DUPLICATE` (a resend of a keyed message stored before; ``session_id`` and
    ``turn_number`` name it) or a refusal that stored nothing (:data:`NOT_READY`,
    :data:`RATE_LIMITED` with ``retry_after_seconds``, :data:`OVER_BUDGET` with
    ``retry_after_seconds`` and ``resets_at``, :data:`SESSION_CLOSED`, :data:`NOT_SAVED`,
    :data:`CLIENT_MESSAGE_ID_REUSED`).
    """

    outcome: str
    accepted: AcceptedMessage | None = None
    session_id: str | None = None
    turn_number: int | None = None
    retry_after_seconds: int = 0
    resets_at: str | None = None


def admit(
    store: DynamoSessionStore, connection_id: str, customer_id: str, client_message_id: str | None = None
) -> MessageAdmission:
    """The caller's connection, a token from its bucket and its customer's, the budget and a first send, at once."""
    config = settings()
    return store.chat.admit_message(
        connection_id,
        customer_id,
        per_connection=Rate(config.chat_connection_messages_per_minute, config.chat_connection_burst),
        per_customer=Rate(config.chat_customer_messages_per_minute, config.chat_customer_burst),
        token_budget=config.chat_daily_token_budget,
        client_message_id=client_message_id,
    )


def resent(sent: SentMessage, session_id: str, text: str) -> Received:
    """A message whose ``client_message_id`` was stored before: the same message again, or the id reused."""
    if sent.same(session_id, text):
        return Received(DUPLICATE, session_id=session_id, turn_number=sent.turn_number)
    return Received(CLIENT_MESSAGE_ID_REUSED, session_id=session_id)


def budget_spent(store: DynamoSessionStore, gate: MessageAdmission) -> tuple[int, str] | None:
    """Seconds to wait and the reset time (ISO) when the customer's tokens of the day are spent, else None.

    Everything that calls the model on a customer's behalf (a message, a rewind, a continue) asks it.
    """
    if gate.budget is None or gate.budget.admitted:
        return None
    return max(1, gate.budget.resets_at - store.table.now()), gate.budget.resets_at_iso


def spend(store: DynamoSessionStore, customer_id: str, usage: TokenUsage | None) -> None:
    """Add a stored reply's tokens to its customer's budget of the day; a failure is logged, the reply stands."""
    if usage is None:
        return
    try:
        store.budgets.spend_tokens(customer_id, usage)
    except (ClientError, BotoCoreError):
        logger.exception("reply tokens not added to the customer's budget")


def receive(
    store: DynamoSessionStore, connection_id: str, customer_id: str, text: str, client_message_id: str | None
) -> Received:
    """Admit the message and store it as the session's next turn (see the module docstring)."""
    try:
        gate = admit(store, connection_id, customer_id, client_message_id)
    except (ClientError, BotoCoreError):
        logger.exception("message not admitted")
        return Received(NOT_SAVED)
    if gate.connection is None:
        return Received(NOT_READY)
    if not gate.admission.admitted:
        return Received(RATE_LIMITED, retry_after_seconds=gate.admission.retry_after_seconds)
    session_id = gate.connection.session_id
    if gate.sent is not None and gate.sent.session_id == session_id:
        return resent(gate.sent, session_id, text)
    spent = budget_spent(store, gate)
    if spent is not None:
        return Received(OVER_BUDGET, session_id=session_id, retry_after_seconds=spent[0], resets_at=spent[1])
    try:
        accepted = store.chat.accept_message(
            session_id, customer_id, text, context_turns=settings().context_turns, client_message_id=client_message_id
        )
    except SentBefore as raced:  # another send of this message stored it first
        if raced.sent is None:
            return Received(NOT_SAVED, session_id=session_id)
        return resent(raced.sent, session_id, text)
    except (SessionClosed, SessionNotFound):
        return Received(SESSION_CLOSED, session_id=session_id)
    except Exception:
        logger.exception("user turn not stored", extra={"session_id": session_id})
        return Received(NOT_SAVED, session_id=session_id)
    return Received(STORED, accepted, session_id=session_id, turn_number=accepted.turn.turn_number)
