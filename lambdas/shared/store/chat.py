"""A customer's chat message, before the model is called: admitted, then accepted, in three round trips.

A reply is only as quick as what precedes the model call, so the message path is two operations
that each do their independent calls at once (a round trip of wall time each, however many
calls):

1. :meth:`Chat.admit_message`, one round trip (two during a burst): the connection record
   (``GetItem CONN#``), a token from each of the two rate buckets, the connection's and the
   customer's (:mod:`.limits`), a read of the token budget and, for a message with a
   ``client_message_id``, the record of a message sent before under it (:mod:`.budgets`), all at
   once.
2. :meth:`Chat.accept_message`, two round trips: the turn number is reserved on the session's
   META by the one conditional UpdateItem that also checks that the session accepts turns and
   is the customer's, and returns the session (so it is never read apart); then, at once, the
   PutItem of the turn (a transaction with its sent record, for a message with a
   ``client_message_id``) and the two Queries of the model's context (the newest turns before
   it, and the latest summary).

A customer who edits a message or asks for another answer rewinds the session first
(:meth:`Chat.rewind`): one conditional transaction removes what came after that turn, and the
turn is answered again from the context it returns.

Every check of the one-call-after-another design holds: the connection must exist and name the
customer, both buckets must admit, the turn is stored only by a conditional write on a session
that accepts turns, and its number comes from the atomic counter. Taking the two tokens at once
could charge a message a token the sequential order never took (the customer's, when the
connection's bucket refuses; both, when the connection is not ready), so those are given back.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from botocore.exceptions import BotoCoreError, ClientError

from lambdas.shared import keys
from lambdas.shared.errors import (
    InvalidInput,
    RewindTooLong,
    SessionChanged,
    SessionClosed,
    SessionInHandoff,
    SessionNotFound,
)
from lambdas.shared.records import WAITING_STATUSES, Connection, Role, Session, SessionStatus, Summary, Turn
from lambdas.shared.schema import PARTITION_KEY, SORT_KEY, TTL_ATTRIBUTE
from lambdas.shared.store.budgets import BudgetCheck, Budgets, SentMessage, text_digest
from lambdas.shared.store.connections import Connections
from lambdas.shared.store.expressions import Expr, Update
from lambdas.shared.store.limits import CONNECTION_SCOPE, CUSTOMER_SCOPE, Admission, Limits
from lambdas.shared.store.table import (
    MAX_PAGE_SIZE,
    Cancelled,
    TableCore,
    Transaction,
    require_id,
    require_limit,
)
from lambdas.shared.store.turns import Turns, checked_turn

#: The model's context holds at most this many turns (the newest, the customer's message last).
MAX_CONTEXT_TURNS: Final = MAX_PAGE_SIZE + 1
#: TransactWriteItems' limit: a rewind is one transaction, the session's own write included.
MAX_TRANSACTION_ACTIONS: Final = 100


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
    first (its refusal is the one reported when both refuse). ``budget``: the token budget's
    decision (None when none was checked). ``sent``: the message sent before under the
    ``client_message_id``, when there is one.
    """

    connection: Connection | None
    admission: Admission
    budget: BudgetCheck | None = None
    sent: SentMessage | None = None

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
    session is in a handoff (an agent answers, so nothing is read for the model) or waits for one
    (``waiting``: the handoff is queued or escalated, and its agent will read the turn).
    """

    session: Session
    turn: Turn
    context: ChatContext | None
    waiting: bool = False


@dataclass(frozen=True)
class Rewound:
    """A session rewound to one of its customer's turns, ready to be answered again.

    ``session``: as the rewind left it (``turn_count`` is the turn's number). ``turn``: the
    customer's turn, now the last one (with the edited text, when there was one).
    ``removed_turns`` / ``removed_summaries``: the numbers of what was removed, ascending.
    ``context``: what the model answers the turn from, the turn last.
    """

    session: Session
    turn: Turn
    removed_turns: tuple[int, ...]
    removed_summaries: tuple[int, ...]
    context: ChatContext


class SentBefore(Exception):
    """Another send of this ``client_message_id`` stored its turn first (the two raced): ``sent`` names it."""

    def __init__(self, sent: SentMessage | None) -> None:
        super().__init__("a message with this client_message_id was stored meanwhile")
        self.sent = sent


class Chat:
    """The message path's two operations (see the module docstring), over the turns, connections and limits."""

    def __init__(
        self, table: TableCore, *, turns: Turns, connections: Connections, limits: Limits, budgets: Budgets
    ) -> None:
        self.table = table
        self.turns = turns
        self.connections = connections
        self.limits = limits
        self.budgets = budgets

    def admit_message(
        self,
        connection_id: str,
        customer_id: str,
        *,
        per_connection: Rate,
        per_customer: Rate,
        token_budget: int | None = None,
        client_message_id: str | None = None,
    ) -> MessageAdmission:
        """Find the caller's connection, take a token from both of its buckets and check the rest, in one round trip.

        With ``token_budget`` the customer's tokens of the day are checked by a read of the
        day's budget item; with ``client_message_id`` the record of a message sent before under it
        is read. Both run at once with the rest; a message a limit refuses keeps its place in the
        others (the strict side, as below).

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
        connection, by_connection, by_customer, budget, sent = self.table.together(
            lambda: self.connections.get_connection(connection_id),
            lambda: self.limits.take_message_token(
                CONNECTION_SCOPE, connection_id, per_minute=per_connection.per_minute, burst=per_connection.burst
            ),
            lambda: self.limits.take_message_token(
                CUSTOMER_SCOPE, customer_id, per_minute=per_customer.per_minute, burst=per_customer.burst
            ),
            lambda: self.budgets.check_tokens(customer_id, budget=token_budget) if token_budget is not None else None,
            lambda: self.budgets.sent_message(customer_id, client_message_id) if client_message_id else None,
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
        rate = by_connection if not by_connection.admitted else by_customer
        return MessageAdmission(connection, rate, budget, sent)

    def _give_back(self, calls: list[Callable[[], None]]) -> None:
        """Return the tokens at once; one that cannot be returned stays spent (stricter, never looser)."""
        guarded = [_ignoring_aws_errors(call) for call in calls]
        if len(guarded) == 2:
            self.table.together(guarded[0], guarded[1])
        elif guarded:
            guarded[0]()

    def accept_message(
        self, session_id: str, customer_id: str, text: str, *, context_turns: int, client_message_id: str | None = None
    ) -> AcceptedMessage:
        """Store the customer's message as the session's next turn and read the model's context: two round trips.

        1. :meth:`.Turns.reserve_turn` with ``customer_id``: refuses (SessionNotFound, SessionClosed)
           with nothing written and the counter unmoved.
        2. At once: :meth:`.Turns.put_turn`, and, unless the session is in a handoff, the newest
           ``context_turns - 1`` turns before it (:meth:`.Turns.turns_before`) and the latest summary;
           with them the session's current handoff when it has one: a customer whose handoff
           still waits for an agent is not answered by the model either (``waiting``), and the
           context read alongside is dropped (a read, never a round trip more).

        ``context_turns``: 1..101, how many turns the model sees, this message included.
        ``client_message_id``: the turn is written with its sent record in one transaction
        (:meth:`_store_turn`); SentBefore when another send of it won.
        Raises InvalidInput before anything is written; when the PutItem fails its error is
        raised (the number is burnt: a gap, never a duplicate) and the reads are discarded.
        """
        require_id(session_id, "session_id")
        require_limit(context_turns, MAX_CONTEXT_TURNS)
        checked_turn(Role.USER, text)
        session = self.turns.reserve_turn(session_id, customer_id=customer_id)
        number = session.turn_count
        if session.status == SessionStatus.HANDOFF:
            return AcceptedMessage(session, self._store_turn(session, text, customer_id, client_message_id), None)
        handoff_id = session.current_handoff_id
        turn, earlier, summary, handoff = self.table.together(
            lambda: self._store_turn(session, text, customer_id, client_message_id),
            lambda: self.turns.turns_before(session_id, number, limit=context_turns - 1) if context_turns > 1 else [],
            lambda: self.turns.latest_summary(session_id),
            lambda: self.table.get(keys.handoff_key(session_id, handoff_id)) if handoff_id else None,
        )
        if handoff is not None and handoff.get("status") in WAITING_STATUSES:
            return AcceptedMessage(session, turn, None, waiting=True)
        return AcceptedMessage(session, turn, ChatContext([*earlier, turn], summary))

    def _store_turn(self, session: Session, text: str, customer_id: str, client_message_id: str | None) -> Turn:
        """The customer's turn numbered ``session.turn_count``: one PutItem, or with ``client_message_id`` one
        transaction of that Put and the message's sent record (:meth:`.Budgets.sent_in`).

        The transaction is refused when a live record of this session holds the id: another send
        of the message won the race, and SentBefore names what it stored (one read, only then).
        The number this send reserved is burnt (a gap, never a duplicate).
        """
        session_id, number = session.session_id, session.turn_count
        if not client_message_id:
            return self.turns.put_turn(session_id, number, Role.USER, text)
        now = self.table.now()
        turn = Turn(session_id, number, Role.USER, text, now, now + self.table.ttl_seconds)
        tx = Transaction(self.table.table_name)
        self.turns.put_in(tx, turn)
        self.budgets.sent_in(tx, customer_id, client_message_id, SentMessage(session_id, number, text_digest(text)))
        try:
            self.table.commit(tx)
        except Cancelled as cancelled:
            if "sent" not in cancelled.failed:
                raise
            raise SentBefore(self.budgets.sent_message(customer_id, client_message_id)) from None
        return turn

    def rewind(
        self, session_id: str, customer_id: str, turn_number: int, text: str | None, *, context_turns: int
    ) -> Rewound:
        """Remove everything after the customer's turn ``turn_number`` (and edit it), in one transaction.

        Reads the session and, at once, its turns from ``turn_number`` on and its summaries; then
        one TransactWriteItems: the session's META (``turn_count`` back to ``turn_number``,
        ``rewinds`` + 1) conditioned on ``turn_count`` being what was read, the session being
        ``active`` and the customer's; a Put of the edited turn when ``text`` is given; a Delete
        of every later turn and of every summary whose window reaches past the turn (or covers it,
        when it is edited). Any message or reply stored meanwhile moves ``turn_count``, so the
        transaction is refused and nothing changes (SessionChanged); a reply computed before the
        rewind is refused when it is stored (:meth:`.Turns.reserve_turn` with ``rewinds``).

        Raises InvalidInput (bad arguments, a turn that is not the customer's), SessionNotFound
        (also another customer's session), SessionInHandoff, SessionClosed, SessionChanged (also
        when the newest turn's number is reserved but the turn is not stored yet), RewindTooLong
        (more than one transaction holds: nothing is removed). Then reads the model's context.
        """
        require_id(session_id, "session_id")
        require_id(customer_id, "customer_id")
        require_limit(context_turns, MAX_CONTEXT_TURNS)
        if isinstance(turn_number, bool) or not isinstance(turn_number, int) or turn_number < 1:
            raise InvalidInput(f"turn_number must be a turn number >= 1 (given {turn_number!r})")
        if text is not None:
            checked_turn(Role.USER, text)
        session = self._rewindable(session_id, customer_id)
        last = session.turn_count
        if turn_number > last:
            raise InvalidInput(f"turn_number must name a turn of the session, 1..{last} (given {turn_number})")
        tail, summaries = self.table.together(
            lambda: self.turns.turns_between(session_id, turn_number, last),
            lambda: self._summaries(session_id),
        )
        if not tail or tail[0].turn_number != turn_number or tail[0].role != Role.USER:
            raise InvalidInput(f"turn {turn_number} is not one of the customer's messages; rewind to one of those")
        if tail[-1].turn_number != last:  # the newest number is reserved, its turn not stored yet
            raise SessionChanged(session_id)
        edge = turn_number - 1 if text is not None else turn_number
        stale = [s for s in summaries if s.window_end > edge]
        removed = [t.turn_number for t in tail[1:]]
        room = MAX_TRANSACTION_ACTIONS - 1 - (text is not None)
        if len(removed) + len(stale) > room:
            raise RewindTooLong(session_id, turn_number, len(removed) + len(stale), room)
        now = self.table.now()
        turn = (
            tail[0]
            if text is None
            else dataclasses.replace(tail[0], content=text, created_at=now, ttl=now + self.table.ttl_seconds)
        )
        tx = self._rewind_transaction(session, turn, last, now, edited=text is not None)
        for number in removed:
            tx.delete(f"turn {number}", keys.turn_key(session_id, number))
        for summary in stale:
            tx.delete(f"summary {summary.summary_number}", keys.summary_key(session_id, summary.summary_number))
        try:
            self.table.commit(tx)
        except Cancelled:
            self._rewindable(session_id, customer_id)  # raises what moved, if the status or owner did
            raise SessionChanged(session_id) from None
        kept = [s for s in summaries if s.window_end <= edge]
        earlier = self.turns.turns_before(session_id, turn_number, limit=context_turns - 1) if context_turns > 1 else []
        after = dataclasses.replace(
            session,
            turn_count=turn_number,
            updated_at=now,
            ttl=now + self.table.ttl_seconds,
            rewinds=session.rewinds + 1,
        )
        context = ChatContext([*earlier, turn], kept[-1] if kept else None)
        return Rewound(after, turn, tuple(removed), tuple(s.summary_number for s in stale), context)

    def _rewindable(self, session_id: str, customer_id: str) -> Session:
        """The customer's session, when it may be rewound (active); else the error that says why not."""
        item = self.table.get(keys.session_key(session_id))
        if item is None or item.get("customer_id") != customer_id:
            raise SessionNotFound(session_id)  # another customer's session is not told apart
        session = Session.from_item(item)
        if session.status == SessionStatus.HANDOFF:
            raise SessionInHandoff(session_id)
        if session.status != SessionStatus.ACTIVE:
            raise SessionClosed(session_id, str(session.status))
        return session

    def _summaries(self, session_id: str) -> list[Summary]:
        """Every summary of the session, by number (one Query; a summary covers ten or more turns)."""
        expr = Expr()
        return [
            Summary.from_item(item)
            for item in self.table.query(
                KeyConditionExpression=(
                    f"{expr.n(PARTITION_KEY)} = {expr.v(keys.session_pk(session_id))} AND "
                    f"begins_with({expr.n(SORT_KEY)}, {expr.v(keys.SUMMARY_PREFIX)})"
                ),
                **expr.params(),
            )
        ]

    def _rewind_transaction(self, session: Session, turn: Turn, last: int, now: int, *, edited: bool) -> Transaction:
        """The rewind's META update (conditioned on the turn count read) and, when edited, the turn's Put."""
        tx = Transaction(self.table.table_name)
        expr = Expr()
        update = Update(expr)
        update.set("turn_count", turn.turn_number)
        update.set("updated_at", now)
        update.set(TTL_ATTRIBUTE, now + self.table.ttl_seconds)
        update.add("rewinds", 1)
        condition = (
            f"{expr.n('turn_count')} = {expr.v(last)} AND {expr.n('status')} = {expr.v(str(SessionStatus.ACTIVE))} "
            f"AND {expr.n('customer_id')} = {expr.v(session.customer_id)}"
        )
        tx.update("session", keys.session_key(session.session_id), update, condition=condition)
        if edited:
            tx.put("turn", turn.to_item())
        return tx


def _ignoring_aws_errors(call: Callable[[], None]) -> Callable[[], None]:
    """``call``, where an AWS error leaves the token spent: the limit is briefly stricter, never looser."""

    def guarded() -> None:
        with contextlib.suppress(ClientError, BotoCoreError):
            call()

    return guarded
