"""The ``guardrail`` block of a stage: whether the stage creates its own Bedrock guardrail.

A stage's model calls (chat replies, rewound turns, rolling summaries) are screened by one
guardrail, chosen by exactly one of:

- ``guardrail.create`` true: the stage creates its own (stacks/guardrail.py) that masks personal
  data in what the model reads and blocks payment details in what it writes; a stage without a
  model (``bedrock_model_id: null``, the echo responder) makes no model call, so creates none;
- ``bedrock_guardrail_id`` and ``bedrock_guardrail_version`` (stacks/config.py): a guardrail the
  account already has, brought by the operator;
- neither: no guardrail (the calls are not screened).

docs/guardrail.md says what the created guardrail masks and blocks and what it costs.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from stacks.errors import ConfigError

#: Bedrock's bounds on a guardrail's blocked messaging (CreateGuardrail: 1..500 characters).
MESSAGE_MAX_CHARS = 500

DEFAULT_BLOCKED_INPUT = (
    "Sorry, I can't take that message. Please leave payment details, bank details and passwords out "
    "of the chat: the shop never needs them here."
)
DEFAULT_BLOCKED_OUTPUT = (
    "Sorry, I can't show that reply because it held payment details. I'm happy to help with manga, "
    "orders, shipping and returns."
)


@dataclass(frozen=True)
class GuardrailConfig:
    """Whether the stage creates its own guardrail, and what it tells a customer when it blocks."""

    create: bool = False
    # What Bedrock answers instead when a customer's message, or the model's reply, is blocked.
    blocked_input_message: str = DEFAULT_BLOCKED_INPUT
    blocked_output_message: str = DEFAULT_BLOCKED_OUTPUT

    def validate(self, stage: str, *, existing_id: str | None) -> None:
        """Raise ConfigError naming ``guardrail.<key>`` when anything is off, or the choice is ambiguous."""
        if not isinstance(self.create, bool):
            raise _fail(stage, "create", "must be true or false", self.create)
        for key in ("blocked_input_message", "blocked_output_message"):
            value = getattr(self, key)
            if not isinstance(value, str) or not 1 <= len(value.strip()) <= MESSAGE_MAX_CHARS:
                raise _fail(stage, key, f"must be a text of 1..{MESSAGE_MAX_CHARS} characters", value)
        if not self.create:
            return
        if existing_id is not None:
            raise _fail(
                stage,
                "create",
                "is true and bedrock_guardrail_id names an existing guardrail: choose one (remove "
                "bedrock_guardrail_id/_version to use the stage's own, or set create false to bring yours)",
                True,
            )


def _fail(stage: str, key: str, rule: str, given: Any) -> ConfigError:
    return ConfigError(f"stage '{stage}': guardrail.{key} {rule} (given {given!r})")


def guardrail(stage: str, raw: Any) -> GuardrailConfig:
    """The ``guardrail`` block of a stage entry as a GuardrailConfig (validated with the stage)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"stage '{stage}': guardrail must be an object (given {raw!r})")
    known = {f.name for f in fields(GuardrailConfig)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"stage {stage!r}: unknown guardrail keys {unknown}; allowed keys are {sorted(known)}")
    return GuardrailConfig(**raw)
