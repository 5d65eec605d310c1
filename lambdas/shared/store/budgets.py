"""What the chat's admission checks beside the rate: the customer's daily token budget, and messages sent before.

Token budget: one item per customer and UTC day, ``LIMIT#customer#<id>`` / ``TOKENS#<YYYY-MM-DD>``,
holding the model's tokens (input and output, as the model reported them) spent on the customer's
replies that day. A message is admitted by a read of that item in the admission's one parallel
step (``tokens`` below the budget, or no item yet); the reply's tokens are added after it is
written, which creates the item on the day's first reply. The check only reads: nothing of it
needs writing, and a read costs a fifth of a write (one read unit against one write unit, billed
at a fifth of the price on demand). The budget is therefore exceeded by at most the replies already
being written when it is reached. The item expires a day after its day ends.

Sent messages: a message sent with a ``client_message_id`` leaves ``LIMIT#customer#<id>`` /
``SENT#<client_message_id>`` (its session, turn number and a digest of its text), written in the
same transaction as its turn, so a turn and its record exist together or not at all. A resend
finds it in the admission's parallel step: the same text in the same session is the stored turn
again, other text is a reused id. The record is kept as long as Powertools' idempotency records
(:data:`lambdas.shared.idempotency.REQUEST_MEMORY_SECONDS`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from lambdas.shared import keys
from lambdas.shared.records import TokenUsage
from lambdas.shared.schema import PARTITION_KEY, TTL_ATTRIBUTE
from lambdas.shared.serialize import marshal_item
from lambdas.shared.store.expressions import Expr, Update
from lambdas.shared.store.table import Aggregate, Transaction, require_id

DAY_SECONDS: Final = 24 * 3600
#: How long a sent message's record answers a resend (as long as an idempotency record).
SENT_MEMORY_SECONDS: Final = 24 * 3600


@dataclass(frozen=True)
class BudgetCheck:
    """The token budget's decision on a message: admitted, the tokens spent today, and when the day ends.

    ``resets_at``: the next UTC midnight, epoch seconds (when a refused customer may chat again).
    """

    admitted: bool
    used: int
    resets_at: int

    @property
    def resets_at_iso(self) -> str:
        """``resets_at`` as ISO 8601 UTC text, ``2026-11-29T00:00:00Z``."""
        return datetime.fromtimestamp(self.resets_at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class SentMessage:
    """A message stored before under a ``client_message_id``: its session, its turn and its text's digest."""

    session_id: str
    turn_number: int
    text_digest: str

    def same(self, session_id: str, text: str) -> bool:
        """True when ``text`` sent to ``session_id`` is this message again."""
        return self.session_id == session_id and self.text_digest == text_digest(text)


def text_digest(text: str) -> str:
    """SHA-256 of a message's text: what a resend is compared with (the text itself is never kept here)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def utc_day(epoch_seconds: int) -> tuple[str, int]:
    """``(YYYY-MM-DD, next midnight in epoch seconds)`` of the UTC day holding ``epoch_seconds``."""
    moment = datetime.fromtimestamp(epoch_seconds, UTC)
    midnight = datetime(moment.year, moment.month, moment.day, tzinfo=UTC) + timedelta(days=1)
    return moment.strftime("%Y-%m-%d"), int(midnight.timestamp())


def _require_budget(budget: int) -> int:
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise ValueError(f"budget must be an int >= 1 (given {budget!r})")
    return budget


class Budgets(Aggregate):
    """A customer's daily token budgets and sent messages (see the module docstring)."""

    def check_tokens(self, customer_id: str, *, budget: int) -> BudgetCheck:
        """The admission's check: one consistent GetItem; admitted while today's tokens are below ``budget``."""
        require_id(customer_id, "customer_id")
        _require_budget(budget)
        day, resets_at = utc_day(self.table.now())
        item = self.table.get(keys.token_budget_key(customer_id, day))
        used = int((item or {}).get("tokens", 0))
        return BudgetCheck(used < budget, used, resets_at)

    def spend_tokens(self, customer_id: str, usage: TokenUsage) -> None:
        """Add a reply's tokens to the customer's budget of the day it was written (one UpdateItem)."""
        require_id(customer_id, "customer_id")
        day, resets_at = utc_day(self.table.now())
        update = Update(Expr())
        update.set("day", day)
        update.set(TTL_ATTRIBUTE, resets_at + DAY_SECONDS)
        update.add("tokens", usage.total)
        update.add("input_tokens", usage.input_tokens)
        update.add("output_tokens", usage.output_tokens)
        update.add("replies", 1)
        self.table.client.update_item(
            TableName=self.table.table_name,
            Key=marshal_item(keys.token_budget_key(customer_id, day)),
            UpdateExpression=update.expression(),
            **update.expr.params(),
        )

    def sent_message(self, customer_id: str, client_message_id: str) -> SentMessage | None:
        """The message sent before under ``client_message_id`` (one consistent GetItem), or None."""
        require_id(customer_id, "customer_id")
        item = self.table.get(keys.sent_message_key(customer_id, client_message_id))
        if item is None or int(item.get(TTL_ATTRIBUTE, 0)) <= self.table.now():
            return None  # expired (TTL deletes within days, not at once): a new message
        return SentMessage(str(item["session_id"]), int(item["turn_number"]), str(item["text_digest"]))

    def sent_in(self, tx: Transaction, customer_id: str, client_message_id: str, message: SentMessage) -> None:
        """Add the record of ``message`` to ``tx`` (action ``sent``); it fails while another live one holds the id.

        A record of another session, or an expired one, is replaced: the id names one message per
        session, for :data:`SENT_MEMORY_SECONDS`.
        """
        now = self.table.now()
        item: dict[str, Any] = {
            **keys.sent_message_key(customer_id, client_message_id),
            "session_id": message.session_id,
            "turn_number": message.turn_number,
            "text_digest": message.text_digest,
            "created_at": now,
            TTL_ATTRIBUTE: now + SENT_MEMORY_SECONDS,
        }
        expr = Expr()
        condition = (
            f"attribute_not_exists({expr.n(PARTITION_KEY)}) OR {expr.n('session_id')} <> {expr.v(message.session_id)} "
            f"OR {expr.n(TTL_ATTRIBUTE)} <= {expr.v(now)}"
        )
        tx.put("sent", item, condition=condition, expr=expr)
