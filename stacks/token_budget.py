"""The ``token_budget`` block of a stage: how many model tokens one customer's chat may spend in a UTC day.

Every reply's tokens (input and output, as the model reports them) are added to the customer's
count of the day; a message sent once the count has reached the budget is refused before it is
stored or reaches the model, with the time the budget resets (the next UTC midnight). The budget
bounds what one customer can cost a day, whatever the rate limits allow
(docs/operations.md says how to size it).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from stacks.errors import ConfigError

#: The budget's range: at least one token; at most a billion (far past any chat's day).
_LOW, _HIGH = 1, 1_000_000_000


@dataclass(frozen=True)
class TokenBudgetConfig:
    """``daily_tokens_per_customer``: the model tokens one customer may spend in a UTC day (a whole number >= 1)."""

    daily_tokens_per_customer: int = 200_000

    def validate(self, stage: str) -> None:
        """Raise ConfigError naming ``token_budget.daily_tokens_per_customer`` when it is not a positive integer."""
        value = self.daily_tokens_per_customer
        if isinstance(value, bool) or not isinstance(value, int) or not _LOW <= value <= _HIGH:
            raise ConfigError(
                f"stage '{stage}': token_budget.daily_tokens_per_customer must be a whole number in "
                f"{_LOW}..{_HIGH:_} (given {value!r})"
            )


def token_budget(stage: str, raw: Any) -> TokenBudgetConfig:
    """The ``token_budget`` block of a stage entry (validated with the stage)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"stage '{stage}': token_budget must be an object (given {raw!r})")
    known = {f.name for f in fields(TokenBudgetConfig)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"stage {stage!r}: unknown token_budget keys {unknown}; allowed keys are {sorted(known)}")
    return TokenBudgetConfig(**raw)
