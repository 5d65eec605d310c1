"""A customer's chat message, before the model is called: admitted, then accepted, in three round trips.

A reply is only as quick as what precedes the model call, so the message path is two operations
that each do their independent calls at once (a round trip of wall time each, however many
calls):

1. :meth:`Chat.admit_message`, one round trip (two during a burst): the connection record
   (``GetItem CONN#``) and a token from each of the two rate buckets, the connection's and the
   customer's (:mod:`.limits`), all at once.
2. :meth:`Chat.accept_message`, two round trips: the turn number is reserved on the session's
   META by the one conditional UpdateItem that also checks that the session accepts turns and
   is the customer's, and returns the session (so it is never read apart); then, at once, the
   PutItem of the turn and the two Queries of the model's context (the newest turns before it,
   and the latest summary).

Every check of the one-call-after-another design holds: the connection must exist and name the
customer, both buckets must admit, the turn is stored only by a conditional write on a session
that accepts turns, and its number comes from the atomic counter. Taking the two tokens at once
could charge a message a token the sequential order never took (the customer's, when the
connection's bucket refuses; both, when the connection is not ready), so those are given back.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from botocore.exceptions import BotoCoreError, ClientError

from lambdas.shared.records import Connection, Role, Session, SessionStatus, Summary, Turn
from lambdas.shared.store.connections import Connections
from lambdas.shared.store.limits import CONNECTION_SCOPE, CUSTOMER_SCOPE, Admission, Limits
from lambdas.shared.store.table import MAX_PAGE_SIZE, TableCore, require_id, require_limit
from lambdas.shared.store.turns import Turns, checked_turn

#: The model's context holds at most this many turns (the newest, the customer's message last).
MAX_CONTEXT_TURNS: Final = MAX_PAGE_SIZE + 1


@dataclass(frozen=True)
class Rate:
    """A message-rate limit: ``per_minute`` sustained and ``burst`` at once (both ints >= 1)."""

    per_minute: int
    burst: int


@dataclass(frozen=True)
class MessageAdmission:
    """The decision on a message before anything is stored.

    ``connection``: the caller's connection record when it exists and names the customer; None
    when the chat is not ready for this caller (onboarding has not recorded the connection, or
    it is another customer's). ``admission``: the rate limits' decision, the connection's bucket
    first (its refusal is the one reported when both refuse).
    """

    connection: Connection | None
    admission: Admission

    @property
    def admitted(self) -> bool:
        return self.connection is not None and self.admission.admitted


@dataclass(frozen=True)
class ChatContext:
    """What the model answers from: the newest turns, chronological, and the latest summary (or None)."""

    turns: list[Turn]
    summary: Summary | None


@dataclass(frozen=True)
class AcceptedMessage:
    """A stored customer message.

    ``session``: as the reservation of the turn number left it; its ``status`` says who answers.
    ``turn``: the stored turn. ``context``: the model's context, the turn last; None when the
    session is in a handoff (an agent answers, so nothing is read for the model).
    """

    session: Session
    turn: Turn
    context: ChatContext | None


class Chat:
    """The message path's two operations (see the module docstring), over the turns, connections and limits."""

    def __init__(self, table: TableCore, *, turns: Turns, connections: Connections, limits: Limits) -> None:
        self.table = table
        self.turns = turns
        self.connections = connections
        self.limits = limits

    def admit_message(
        self, connection_id: str, customer_id: str, *, per_connection: Rate, per_customer: Rate
    ) -> MessageAdmission:
        """Find the caller's connection and take a token from both of its buckets, in one round trip.

        A refused message keeps exactly the tokens the sequential order (connection record, then
        the connection's bucket, then the customer's) would have taken: a message that is not
        ready takes none, and one the connection's bucket refuses takes none of the customer's.
        Messages of one customer racing each other can be refused where the sequential order would
        have admitted one: a message the connection's bucket refuses holds a customer token until
        it gives it back. The error is always on the strict side (never more than either bucket
        allows), and the refused message is told when to retry.
        Raises ClientError/BotoCoreError when a read or a token could not be taken at all.
        """
        require_id(connection_id, "connection_id")
        require_id(customer_id, "customer_id")
        connection, by_connection, by_customer = self.table.together(
            lambda: self.connections.get_connection(connection_id),
            lambda: self.limits.take_message_token(
                CONNECTION_SCOPE, connection_id, per_minute=per_connection.per_minute, burst=per_connection.burst
            ),
            lambda: self.limits.take_message_token(
                CUSTOMER_SCOPE, customer_id, per_minute=per_customer.per_minute, burst=per_customer.burst
            ),
        )
        if connection is not None and connection.customer_id != customer_id:
            connection = None
        give_back: list[Callable[[], None]] = []
        if connection is None and by_connection.admitted:
            give_back.append(
                lambda: self.limits.give_back_message_token(
                    CONNECTION_SCOPE, connection_id, per_minute=per_connection.per_minute
                )
            )
        if (connection is None or not by_connection.admitted) and by_customer.admitted:
            give_back.append(
                lambda: self.limits.give_back_message_token(
                    CUSTOMER_SCOPE, customer_id, per_minute=per_customer.per_minute
                )
            )
        self._give_back(give_back)
        return MessageAdmission(connection, by_connection if not by_connection.admitted else by_customer)

    def _give_back(self, calls: list[Callable[[], None]]) -> None:
        """Return the tokens at once; one that cannot be returned stays spent (stricter, never looser)."""
        guarded = [_ignoring_aws_errors(call) for call in calls]
        if len(guarded) == 2:
            self.table.together(guarded[0], guarded[1])
        elif guarded:
            guarded[0]()

    def accept_message(self, session_id: str, customer_id: str, text: str, *, context_turns: int) -> AcceptedMessage:
        """Store the customer's message as the session's next turn and read the model's context: two round trips.

        1. :meth:`.Turns.reserve_turn` with ``customer_id``: refuses (SessionNotFound, SessionClosed)
           with nothing written and the counter unmoved.
        2. At once: :meth:`.Turns.put_turn`, and, unless the session is in a handoff, the newest
           ``context_turns - 1`` turns before it (:meth:`.Turns.turns_before`) and the latest summary.

        ``context_turns``: 1..101, how many turns the model sees, this message included.
        Raises InvalidInput before anything is written; when the PutItem fails its error is
        raised (the number is burnt: a gap, never a duplicate) and the reads are discarded.
        """
        require_id(session_id, "session_id")
        require_limit(context_turns, MAX_CONTEXT_TURNS)
        checked_turn(Role.USER, text)
        session = self.turns.reserve_turn(session_id, customer_id=customer_id)
        number = session.turn_count
        if session.status == SessionStatus.HANDOFF:
            return AcceptedMessage(session, self.turns.put_turn(session_id, number, Role.USER, text), None)
        turn, earlier, summary = self.table.together(
            lambda: self.turns.put_turn(session_id, number, Role.USER, text),
            lambda: self.turns.turns_before(session_id, number, limit=context_turns - 1) if context_turns > 1 else [],
            lambda: self.turns.latest_summary(session_id),
        )
        return AcceptedMessage(session, turn, ChatContext([*earlier, turn], summary))


def _ignoring_aws_errors(call: Callable[[], None]) -> Callable[[], None]:
    """``call``, where an AWS error leaves the token spent: the limit is briefly stricter, never looser."""

    def guarded() -> None:
        with contextlib.suppress(ClientError, BotoCoreError):
            call()

    return guarded
