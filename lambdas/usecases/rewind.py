"""A customer takes back what followed one of their messages (editing it, or not) so the assistant answers it again.

Shared by the REST route (``POST /sessions/{id}/rewind``) and the chat's ``rewind`` action. The
rewind itself is :meth:`lambdas.shared.store.chat.Chat.rewind`: one conditional transaction that
removes the later turns and the summaries that covered them and moves the session's turn counter
back, refused whole when anything was stored meanwhile, during a handoff, or when the tail is
longer than one transaction holds. With a key (``Idempotency-Key``, ``client_message_id``) it
happens once: a retry gets the first answer again and changes nothing (:func:`lambdas.shared.idempotency.replay`).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aws_lambda_powertools import Logger

from lambdas.shared import env, idempotency
from lambdas.shared.logs import masked_formatter
from lambdas.shared.records import Role
from lambdas.shared.responder import BLOCKED_REPLY, Guardrail, ReplyEnd, Responder, ResponderError, responder_for
from lambdas.shared.settings import settings
from lambdas.shared.settings import store as stage_store
from lambdas.shared.store import DynamoSessionStore, Rewound
from lambdas.usecases import send_message

logger = Logger(logger_formatter=masked_formatter())


@dataclass(frozen=True)
class Rewind:
    """What a rewind request came to.

    ``rewound``: the rewind this request made, to be answered; None when it is a retry of a
    keyed request that rewound before (nothing changed now). ``answer``: the request's answer,
    the same for the first request and every retry: ``session_id``, ``turn_number``,
    ``removed_turns``, ``removed_summaries``.
    """

    rewound: Rewound | None
    answer: dict[str, Any]


def rewind(
    store: DynamoSessionStore,
    session_id: str,
    customer_id: str,
    turn_number: int,
    text: str | None,
    key: str | None,
    *,
    reply: Callable[[Rewound], dict[str, Any] | None] | None = None,
) -> Rewind:
    """Rewind the customer's session to ``turn_number`` (with ``text`` as its new text); once per ``key``.

    Raises the store's errors (see :meth:`lambdas.shared.store.chat.Chat.rewind`) and the
    idempotency ones (KeyReused, StillRunning, InvalidKey); nothing changed in any of them.
    ``reply``: answers the rewound turn as part of the request (its result is the answer's
    ``reply``, replayed to a retry too); without it the caller answers (the chat streams it).
    """
    made: list[Rewound] = []

    def act() -> dict[str, Any]:
        rewound = store.chat.rewind(session_id, customer_id, turn_number, text, context_turns=settings().context_turns)
        made.append(rewound)
        answer = {
            "session_id": session_id,
            "turn_number": rewound.turn.turn_number,
            "removed_turns": list(rewound.removed_turns),
            "removed_summaries": list(rewound.removed_summaries),
        }
        if reply is not None:
            answer["reply"] = reply(rewound)
        return answer

    request = {"turn_number": turn_number, "text": text}
    answer = idempotency.replay(customer_id, f"rewind {session_id}", key, request, act)
    return Rewind(made[0] if made else None, answer)


def take_model_call() -> int:
    """One call from the stage's cap on model calls (a random bucket): 0 when admitted, else seconds to wait."""
    config = settings()
    admission = stage_store().limits.take_model_call(
        per_second=config.model_calls_per_second, buckets=config.model_call_buckets, pick=random.randrange
    )
    return 0 if admission.admitted else admission.retry_after_seconds


@env.once
def stage_responder() -> Responder:
    """The stage's responder for a whole reply (Bedrock when ``BEDROCK_MODEL_ID`` is set, else the echo).

    Bedrock replies come from the fallback model when the primary fails (``BEDROCK_FALLBACK_MODEL_ID``)
    and pass the stage's cap on model calls first (:func:`take_model_call`); the model has
    ``BEDROCK_DEADLINE_SECONDS`` (the function timeout less 10 s).
    """
    return _responder(settings().bedrock_deadline_seconds)


@env.once
def chat_responder() -> Responder:
    """The chat's streamed responder: :func:`stage_responder`, but with the longest reply's budget and deadline.

    A reply has ``REPLY_MAX_TOKENS`` output tokens and ``REPLY_DEADLINE_SECONDS`` (both derived
    from the stage's capacity target, docs/capacity.md), past which it stops, to be continued.
    """
    config = settings()
    return _responder(config.reply_deadline_seconds, max_output_tokens=config.reply_max_tokens)


def _responder(deadline_seconds: int, **budget: Any) -> Responder:
    config = settings()
    options: dict[str, Any] = dict(budget)
    if config.bedrock_guardrail_id is not None and config.bedrock_guardrail_version is not None:
        options["guardrail"] = Guardrail(config.bedrock_guardrail_id, config.bedrock_guardrail_version)
    return responder_for(
        config.bedrock_model_id,
        fallback_model_id=config.bedrock_fallback_model_id,
        admit=take_model_call,
        max_context_tokens=config.context_max_tokens,
        attempts=config.bedrock_attempts,
        deadline_seconds=float(deadline_seconds),
        **options,
    )


def whole_reply(store: DynamoSessionStore, model: Responder, rewound: Rewound) -> dict[str, Any] | None:
    """Answer the rewound turn at once, for a caller that cannot be streamed to; None when the model could not.

    The reply is stored as the next turn only if the session was not rewound again meanwhile
    (SessionChanged otherwise); a withheld reply is stored and returned as the fixed notice.
    Returns ``{"turn_number", "text", "blocked"}``.
    """
    end, pieces = ReplyEnd("end_turn"), []
    try:
        for piece in model.stream(rewound.context.turns, summary=rewound.context.summary):
            if isinstance(piece, ReplyEnd):
                end = piece
            else:
                pieces.append(piece)
    except ResponderError as err:
        logger.warning("no reply to a rewound turn", extra={"reason": err.reason})
        return None
    text = BLOCKED_REPLY if end.blocked else "".join(pieces)
    if not text.strip():
        return None
    session_id = rewound.session.session_id
    turn = store.turns.add_turn(session_id, Role.ASSISTANT, text, rewinds=rewound.session.rewinds, usage=end.usage)
    send_message.spend(store, rewound.session.customer_id, end.usage)
    return {"turn_number": turn.turn_number, "text": text, "blocked": end.blocked}
