"""The Bedrock models a stage may name: id shapes, inference profiles, and the models past their end of life.

Kept apart from the stage settings because it is a catalogue that changes with Amazon Bedrock's
model lifecycle (Active, Legacy, end of life), not with the app: a model that reaches its end of
life is added to :data:`RETIRED_MODELS`, and every stage naming it then fails ``cdk synth`` with
the date, instead of failing every chat after a deploy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date

#: Prefixes of Amazon Bedrock's cross-region (system-defined) inference profile ids
#: (``global.anthropic...``): geographic ones keep a request in their geography, ``global.``
#: routes it to any commercial region. Any other id names a foundation model in the stack's region.
INFERENCE_PROFILE_PREFIXES = ("us.", "eu.", "apac.", "jp.", "au.", "us-gov.", "global.")
#: A foundation-model id (``anthropic.claude-haiku-4-5-20251001-v1:0``), optionally behind one of
#: the profile prefixes above; Bedrock's own pattern for a model id, without ARNs.
_MODEL_ID = re.compile(r"^[a-z0-9-]{1,63}(\.[a-z0-9-]{1,63}){1,3}(:[a-z0-9-]{1,63}){0,2}$")

#: The model a stage uses unless cdk.json names another: Claude Haiku 4.5 through its global
#: cross-region inference profile, callable from any commercial source region (docs/deploy.md
#: says which pages were checked, when, and how to keep requests in one geography instead).
DEFAULT_BEDROCK_MODEL_ID = "global.anthropic.claude-haiku-4-5-20251001-v1:0"


@dataclass(frozen=True)
class RetiredModel:
    """A model Amazon Bedrock no longer serves: calls to it fail with ResourceNotFoundException."""

    name: str
    end_of_life: str  # ISO date of the end of life on Amazon Bedrock
    where: str = ""  # where the end of life applies, when not in every region


#: Foundation models past their end of life on Amazon Bedrock, by model id (a profile id is
#: matched by the model behind its prefix). docs/deploy.md names the page each date comes from.
RETIRED_MODELS: dict[str, RetiredModel] = {
    "anthropic.claude-3-haiku-20240307-v1:0": RetiredModel(
        "Claude 3 Haiku", "2026-09-10", "in most regions (ca-central-1, eu-central-2 and sa-east-1 still serve it)"
    ),
    "anthropic.claude-3-5-haiku-20241022-v1:0": RetiredModel("Claude 3.5 Haiku", "2026-06-19"),
    "anthropic.claude-3-7-sonnet-20250219-v1:0": RetiredModel("Claude 3.7 Sonnet", "2026-04-28"),
}


def foundation_model_of(model_id: str) -> str:
    """The foundation-model id behind ``model_id``: itself, or a profile id without its prefix."""
    if model_id.startswith(INFERENCE_PROFILE_PREFIXES):
        return model_id.split(".", 1)[1]
    return model_id


def model_id_problem(model_id: object) -> str | None:
    """Why ``model_id`` cannot answer a chat (not a model id, or a model past its end of life), or None."""
    if not isinstance(model_id, str) or not _MODEL_ID.fullmatch(model_id):
        return (
            "must be a Bedrock model id such as 'anthropic.claude-haiku-4-5-20251001-v1:0', the same behind a "
            f"cross-region inference profile prefix ({', '.join(INFERENCE_PROFILE_PREFIXES)}), "
            "or null (echo responder)"
        )
    retired = RETIRED_MODELS.get(foundation_model_of(model_id))
    if retired is None:
        return None
    return (
        f"names {retired.name}, which reached its end of life on Amazon Bedrock on {retired.end_of_life}"
        f"{' ' + retired.where if retired.where else ''}, so its calls fail; use a current model such as "
        f"'{DEFAULT_BEDROCK_MODEL_ID}'"
    )


@dataclass(frozen=True)
class ModelCard:
    """A model's lifecycle on Amazon Bedrock: its name, launch, and (once announced) Legacy and end of life."""

    name: str
    launched: date
    legacy_from: date | None = None  # the day it turns Legacy on Bedrock, once announced
    end_of_life: date | None = None  # the day Bedrock stops serving it, once announced

    def active_on(self, day: date) -> bool:
        """Launched by ``day`` and neither Legacy nor past its end of life then."""
        if day < self.launched:
            return False
        return all(limit is None or day < limit for limit in (self.legacy_from, self.end_of_life))


#: Models whose lifecycle was checked (docs/deploy.md names the page each date comes from), by
#: foundation-model id; a stage's fallback model must be one of them and Active on the deploy date.
MODEL_CARDS: dict[str, ModelCard] = {
    "anthropic.claude-haiku-4-5-20251001-v1:0": ModelCard("Claude Haiku 4.5", date(2025, 10, 16)),
    "anthropic.claude-sonnet-4-6": ModelCard("Claude Sonnet 4.6", date(2026, 2, 17)),
}

#: The fallback a stage uses unless cdk.json names another: Claude Sonnet 4.6 through its global
#: cross-region inference profile (the specification's Haiku -> Sonnet fallback).
DEFAULT_FALLBACK_MODEL_ID = "global.anthropic.claude-sonnet-4-6"
