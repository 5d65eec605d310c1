"""``continue``: the customer asks for the rest of a reply that stopped before the model had finished it.

Client frame::

    {"action": "continue"}

A reply stops early at the model's output budget (Bedrock's stopReason ``max_tokens``) or at the
reply's deadline. It is stored as it is, and its ``final`` frame says so: ``"stopped":
"max_tokens"`` (or ``"deadline"``) and ``"can_continue": true``. The Message Lambda hands a
``continue`` frame here:

1. The frame is validated, and it passes the gate of a model call (:mod:`lambdas.ws.gate`): a
   customer, a connection that names the session, the rate buckets and the day's token budget.
2. The session must accept turns and have no agent (nor one waiting to take it), and its newest
   turn must be a reply that stopped early. Refused with an error frame, nothing changed:
   ``nothing_to_continue``, ``session_in_handoff``, ``session_closed``, ``session_not_ready``.
   The cut reply is then claimed (:meth:`~lambdas.shared.store.turns.Turns.claim_continuation`):
   a second ``continue`` while the first is answered gets ``already_continuing``.
3. A ``continuing`` frame names the reply to continue; the model gets the transcript and an
   instruction to go on from where the reply stopped (the instruction is not stored), and the
   rest streams like any reply: ``delta`` frames, then ``final`` with ``continues`` (the cut
   reply's turn number). It is stored as the next turn; it may stop early again, and be continued.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from aws_lambda_powertools import Logger
from botocore.exceptions import BotoCoreError, ClientError

from contracts.chat import CONTINUE
from lambdas.shared import keys
from lambdas.shared.logs import masked_formatter
from lambdas.shared.records import TURN_ACCEPTING, WAITING_STATUSES, Role, Session, SessionStatus, Turn
from lambdas.shared.settings import settings
from lambdas.shared.store import AcceptedMessage, ChatContext, DynamoSessionStore
from lambdas.ws.frames import FrameError, RouteContext, error_frame, read_frame
from lambdas.ws.gate import SESSION_CLOSED, Refused, admitted

logger = Logger(logger_formatter=masked_formatter())

Send = Callable[[Mapping[str, Any]], bool]
#: Streams the rest of the cut reply (its turn number second) and returns the outcome.
Answer = Callable[[AcceptedMessage, int], str]

#: Seconds beyond the reply's deadline a continuation may take to store what it wrote.
LEASE_MARGIN_SECONDS: Final = 5

#: What the model is asked after the transcript; the customer's turns are untouched by it.
CONTINUE_PROMPT: Final = (
    "Your previous answer was cut off. Continue it exactly where it stopped, without repeating any of it "
    "and without starting over."
)

NOTHING_TO_CONTINUE: Final = error_frame(
    "nothing_to_continue",
    "There is no reply to continue: the latest reply was complete. Send a new message instead; nothing was changed.",
)
IN_HANDOFF: Final = error_frame(
    "session_in_handoff",
    "A support agent is handling this chat, so the assistant cannot continue its reply; nothing was changed.",
)
NOT_CONTINUED: Final = error_frame(
    "continue_failed",
    "We could not continue the reply because of a problem on our side; nothing was changed. Try again.",
)
ALREADY_CONTINUING: Final = error_frame(
    "already_continuing",
    "This reply is already being continued: its rest is on its way. Nothing was changed.",
)


@dataclass(frozen=True)
class CutReply:
    """The newest turn, a reply cut short; ``accepted`` is what the rest is answered from."""

    turn: Turn
    accepted: AcceptedMessage


def wants_continue(body: str | None) -> bool:
    """Whether a frame asks to continue (a malformed frame does not: the message path reports it)."""
    try:
        return read_frame(body).get("action") == CONTINUE
    except FrameError:
        return False


def continuing_frame(cut: CutReply) -> dict[str, Any]:
    """The rest of reply ``turn_number`` (to the customer's turn ``reply_to``) follows, as deltas then ``final``."""
    return {
        "type": "continuing",
        "session_id": cut.turn.session_id,
        "reply_to": cut.accepted.turn.turn_number,
        "turn_number": cut.turn.turn_number,
    }


def handle_continue(store: DynamoSessionStore, ctx: RouteContext, body: str | None, send: Send, answer: Answer) -> str:
    """Run a continue frame (see the module docstring); returns the outcome (for logs and tests)."""
    try:
        read_frame(body)
    except FrameError as err:
        send(error_frame(err.code, str(err)))
        return f"refused:{err.code}"
    try:
        cut = _cut_reply(store, ctx)
    except Refused as refused:
        send(refused.frame)
        return refused.outcome
    except (ClientError, BotoCoreError):
        logger.exception("continue not read")
        send(NOT_CONTINUED)
        return "continue_failed"
    logger.info("continuing", extra={"session_id": cut.turn.session_id, "turn_number": cut.turn.turn_number})
    if not send(continuing_frame(cut)):
        return "gone"
    return answer(cut.accepted, cut.turn.turn_number)


def _cut_reply(store: DynamoSessionStore, ctx: RouteContext) -> CutReply:
    """The session's newest turn if it is a reply cut short, with the context to continue it; else Refused."""
    asking = admitted(store, ctx)  # the rest of a reply is written by the model
    session = store.sessions.get_session(asking.session_id)
    if session is None or session.customer_id != asking.customer_id or session.status not in TURN_ACCEPTING:
        raise Refused(SESSION_CLOSED, "refused:session_closed")
    if session.status == SessionStatus.HANDOFF or _agent_waits(store, session):
        raise Refused(IN_HANDOFF, "refused:session_in_handoff")
    turns = store.turns.turns_before(session.session_id, session.turn_count + 1, limit=settings().context_turns)
    last = turns[-1] if turns else None
    question = next((t for t in reversed(turns) if t.role == Role.USER), None)
    if last is None or last.role != Role.ASSISTANT or not last.stopped or question is None:
        raise Refused(NOTHING_TO_CONTINUE, "refused:nothing_to_continue")
    # The message function's whole run bounds a continuation: past it, one that failed frees the turn.
    if not store.turns.claim_continuation(session.session_id, last.turn_number, lease_seconds=_lease_seconds()):
        raise Refused(ALREADY_CONTINUING, "refused:already_continuing")
    ask = Turn(session.session_id, last.turn_number + 1, Role.USER, CONTINUE_PROMPT, last.created_at, last.ttl)
    context = ChatContext([*turns, ask], store.turns.latest_summary(session.session_id))
    return CutReply(last, AcceptedMessage(session, question, context))


def _lease_seconds() -> int:
    """How long a claim on a cut reply holds: the reply's deadline plus the time to store it."""
    return settings().reply_deadline_seconds + LEASE_MARGIN_SECONDS


def _agent_waits(store: DynamoSessionStore, session: Session) -> bool:
    """Whether the session's handoff still waits for its agent (who will answer, not the model)."""
    if session.current_handoff_id is None:
        return False
    handoff = store.table.get(keys.handoff_key(session.session_id, session.current_handoff_id))
    return handoff is not None and handoff.get("status") in WAITING_STATUSES
