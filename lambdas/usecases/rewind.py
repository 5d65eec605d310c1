"""A customer takes back what followed one of their messages (editing it, or not) so the assistant answers it again.

Shared by the REST route (``POST /sessions/{id}/rewind``) and the chat's ``rewind`` action. The
rewind itself is :meth:`lambdas.shared.store.chat.Chat.rewind`: one conditional transaction that
removes the later turns and the summaries that covered them and moves the session's turn counter
back, refused whole when anything was stored meanwhile, during a handoff, or when the tail is
longer than one transaction holds. With a key (``Idempotency-Key``, ``client_message_id``) it
happens once: a retry gets the first answer again and changes nothing (:func:`lambdas.shared.idempotency.replay`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lambdas.shared import idempotency
from lambdas.shared.settings import settings
from lambdas.shared.store import DynamoSessionStore, Rewound


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
) -> Rewind:
    """Rewind the customer's session to ``turn_number`` (with ``text`` as its new text); once per ``key``.

    Raises the store's errors (see :meth:`lambdas.shared.store.chat.Chat.rewind`) and the
    idempotency ones (KeyReused, StillRunning, InvalidKey); nothing changed in any of them.
    """
    made: list[Rewound] = []

    def act() -> dict[str, Any]:
        rewound = store.chat.rewind(session_id, customer_id, turn_number, text, context_turns=settings().context_turns)
        made.append(rewound)
        return {
            "session_id": session_id,
            "turn_number": rewound.turn.turn_number,
            "removed_turns": list(rewound.removed_turns),
            "removed_summaries": list(rewound.removed_summaries),
        }

    request = {"turn_number": turn_number, "text": text}
    answer = idempotency.replay(customer_id, f"rewind {session_id}", key, request, act)
    return Rewind(made[0] if made else None, answer)
