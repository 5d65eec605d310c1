"""The ``model_resilience`` block of a stage: a fallback model, and a stage-wide cap on model calls.

A reply (and a rolling summary) whose model throttles, is not ready, times out or has reached its
end of life is written by the fallback model instead; the fallback must be a different model,
listed in :data:`stacks.models.MODEL_CARDS` and Active on the day the stage is synthesized. Every
chat reply first takes a token from the stage's model-call buckets (``model_calls_per_second``
in all, split over ``model_call_buckets`` table items so that no one item is a hot key), and a
customer who finds them empty is told to retry in a few seconds instead of meeting Bedrock's own
throttling (docs/operations.md says how to size both).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from datetime import UTC, date, datetime
from typing import Any

from stacks.errors import ConfigError
from stacks.models import DEFAULT_FALLBACK_MODEL_ID, MODEL_CARDS, foundation_model_of, model_id_problem

#: The numeric settings and their ranges. 1000 calls a second is far above any Bedrock quota a
#: chat of this size gets; a bucket item takes at most about 1000 writes a second (one partition).
_BOUNDS: dict[str, tuple[int, int]] = {
    "model_calls_per_second": (1, 1000),
    "model_call_buckets": (1, 16),
    "fallback_alarm_threshold": (1, 10_000),
}


@dataclass(frozen=True)
class ModelResilienceConfig:
    """The fallback model and the stage-wide cap on model calls.

    ``fallback_model_id`` None: no fallback (a failing model's error reaches the customer as before);
    a stage without a model (the echo responder) ignores it.
    ``model_calls_per_second``: the chat's model calls a second across the stage, below the
    account's Bedrock quota for the model (requests per minute / 60, less headroom for the
    summaries, which do not take tokens) and at least the replies of the stage's capacity target
    (:meth:`check_carries`).
    ``model_call_buckets``: the table items the cap is split over (each ``model_calls_per_second /
    buckets``); 1 keeps it exact, more spreads the writes of a busy stage.
    ``fallback_alarm_threshold``: fallbacks in five minutes that raise the alarm.
    """

    fallback_model_id: str | None = DEFAULT_FALLBACK_MODEL_ID
    model_calls_per_second: int = 10
    model_call_buckets: int = 1
    fallback_alarm_threshold: int = 5

    def validate(self, stage: str, primary: str | None, *, today: date | None = None) -> None:
        """Raise ConfigError naming ``model_resilience.<key>``; ``today`` defaults to the UTC date of the synth."""
        for key, (low, high) in _BOUNDS.items():
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise _fail(stage, key, f"must be a whole number in {low}..{high}", value)
        if self.model_call_buckets > self.model_calls_per_second:
            raise _fail(
                stage,
                "model_call_buckets",
                f"must not exceed model_calls_per_second ({self.model_calls_per_second}): a bucket admits "
                "at least one call a second",
                self.model_call_buckets,
            )
        if self.fallback_model_id is not None:
            self._validate_fallback(stage, primary, today or datetime.now(UTC).date())

    def check_carries(self, stage: str, messages_per_second: float) -> None:
        """ConfigError unless the cap admits the replies of the stage's capacity target.

        ``messages_per_second``: the target's own load (``capacity``, without headroom). A cap
        below it would answer ``busy`` to customers the stage is built for; the account's Bedrock
        quota must then be raised to at least the cap (docs/capacity.md).
        """
        needed = math.ceil(messages_per_second)
        if self.model_calls_per_second < needed:
            raise _fail(
                stage,
                "model_calls_per_second",
                f"must be at least {needed}: the stage's capacity target sends {messages_per_second:.1f} "
                "messages a second, each a model call, and a lower cap answers busy to the customers it is "
                "built for",
                self.model_calls_per_second,
            )

    def _validate_fallback(self, stage: str, primary: str | None, today: date) -> None:
        fallback = self.fallback_model_id
        problem = model_id_problem(fallback)
        if problem is not None or not isinstance(fallback, str):
            raise _fail(stage, "fallback_model_id", problem or "must be a model id", fallback)
        if primary is not None and foundation_model_of(fallback) == foundation_model_of(primary):
            raise _fail(
                stage,
                "fallback_model_id",
                f"must be another model than bedrock_model_id ({primary!r}): the same model throttles and retires "
                "with it",
                fallback,
            )
        card = MODEL_CARDS.get(foundation_model_of(fallback))
        if card is None:
            raise _fail(
                stage,
                "fallback_model_id",
                f"must be a model whose lifecycle was checked (stacks/models.py MODEL_CARDS: {sorted(MODEL_CARDS)})",
                fallback,
            )
        if not card.active_on(today):
            raise _fail(stage, "fallback_model_id", f"names {card.name}, which is not Active on {today}", fallback)


def _fail(stage: str, key: str, rule: str, given: Any) -> ConfigError:
    return ConfigError(f"stage '{stage}': model_resilience.{key} {rule} (given {given!r})")


def model_resilience(stage: str, raw: Any) -> ModelResilienceConfig:
    """The ``model_resilience`` block of a stage entry (validated with the stage, which knows the primary)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"stage '{stage}': model_resilience must be an object (given {raw!r})")
    known = {f.name for f in fields(ModelResilienceConfig)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"stage {stage!r}: unknown model_resilience keys {unknown}; allowed keys are {sorted(known)}")
    return ModelResilienceConfig(**raw)
