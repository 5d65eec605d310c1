"""Rolling summary generator, invoked asynchronously by the stream router.

Payload: ``{"session_id": str, "turn_number": int, "event_id": str}``, sent only for turn numbers
that are multiples of the interval. For turn N it summarises exactly turns N-interval+1..N (one
SK-range Query), with the previous summary as context, and stores ``SUMMARY#<N/interval>`` with
a conditional write (a retried or replayed trigger changes nothing).

Why an async Invoke and not a bus event: the summary has exactly one consumer, and an async
invoke gives the Lambda service's own retries plus an on-failure destination (an SQS DLQ) whose
message carries the original payload, session id included; a bus event would add a rule, a
target DLQ and a second retry layer for the same guarantee. Failures (Bedrock still throttled
after bounded retries, DynamoDB errors) raise, so after the async retries the payload lands in
the DLQ and is never lost silently.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import ClientError

from lambdas.shared.bedrock import (
    BedrockUnavailable,
    GuardrailIntervened,
    bedrock_client,
    converse_text,
    fallback_reason,
)
from lambdas.shared.logs import masked_formatter
from lambdas.shared.records import Summary, Turn
from lambdas.shared.responder import count_fallback
from lambdas.shared.settings import Settings, settings
from lambdas.shared.settings import store as store
from lambdas.shared.summaries import window as window
from lambdas.shared.tracing import tracer

logger = Logger(logger_formatter=masked_formatter())

SYSTEM_PROMPT = (
    "You summarise customer-support chats of a manga shop. Write 3-5 plain sentences covering the "
    "topics, decisions and open questions. Never invent facts; never include payment details."
)
EXTRACT_CHARS = 160


class SummaryStore(Protocol):
    """What summarising needs of the store (DynamoSessionStore satisfies it; mypy checks the handler)."""

    def latest_summary(self, session_id: str) -> Summary | None: ...
    def turns_between(self, session_id: str, first: int, last: int) -> list[Turn]: ...
    def put_summary(
        self,
        session_id: str,
        summary_number: int,
        *,
        summary_text: str,
        window_start: int,
        window_end: int,
        turn_count_at_summary: int,
    ) -> Summary: ...


class InvalidTrigger(ValueError):
    """The payload is not a summary trigger (missing session id or turn number)."""


@dataclass(frozen=True)
class Outcome:
    status: str  # generated | exists | skipped
    summary_number: int | None = None
    reason: str | None = None


def build_prompt(previous: Summary | None, turns: list[Turn]) -> str:
    lines = [f"{t.role}: {t.content}" for t in turns]
    context = f"Summary so far:\n{previous.summary_text}\n\n" if previous else ""
    return f"{context}New conversation segment:\n" + "\n".join(lines) + "\n\nWrite the updated rolling summary."


def extractive_summary(previous: Summary | None, turns: list[Turn]) -> str:
    """The echo summariser (no model configured): previous summary + the start of each turn."""
    parts = [previous.summary_text] if previous else []
    parts += [f"{t.role}: {t.content[:EXTRACT_CHARS]}" for t in turns]
    return "\n".join(parts)[-4000:]


def summarise(
    session_store: SummaryStore,
    session_id: str,
    turn_number: int,
    *,
    interval: int,
    generate: Any,
) -> Outcome:
    """Generate and store the summary that turn ``turn_number`` closes (see the module docstring).

    ``generate(previous, turns) -> str`` writes the text (Bedrock or the extractive fallback).
    """
    bounds = window(turn_number, interval)
    if bounds is None:
        return Outcome("skipped", reason=f"turn {turn_number} is not a multiple of {interval}")
    number, first, last = bounds
    latest = session_store.latest_summary(session_id)
    if latest is not None and latest.summary_number >= number:
        # Done already (a replay), or a later summary exists and already rolled past this window.
        return Outcome("exists", latest.summary_number)
    turns = session_store.turns_between(session_id, first, last)
    if not turns:
        return Outcome("skipped", number, reason=f"turns {first}..{last} are gone")
    text = generate(latest, turns)
    stored = session_store.put_summary(
        session_id,
        number,
        summary_text=text,
        window_start=first,
        window_end=last,
        turn_count_at_summary=turn_number,
    )
    return Outcome("generated" if stored.summary_text == text else "exists", number)


def _generator(cfg: Settings) -> Any:
    if cfg.bedrock_model_id is None:
        return extractive_summary
    model_id, fallback_id = cfg.bedrock_model_id, cfg.bedrock_fallback_model_id
    guardrail = None
    if cfg.bedrock_guardrail_id is not None and cfg.bedrock_guardrail_version is not None:
        guardrail = (cfg.bedrock_guardrail_id, cfg.bedrock_guardrail_version)

    def generate(previous: Summary | None, turns: list[Turn]) -> str:
        prompt = build_prompt(previous, turns)
        try:
            return converse_text(bedrock_client(), model_id, prompt, system=SYSTEM_PROMPT, guardrail=guardrail)
        except GuardrailIntervened:
            # The model wrote what the guardrail withholds (payment details): the summary rolls the
            # previous one forward with a note, never the blocked text nor the turns themselves.
            return withheld_summary(previous)
        except (BedrockUnavailable, ClientError) as err:
            cause = err.__cause__ if isinstance(err, BedrockUnavailable) else err
            reason = fallback_reason(cause) if isinstance(cause, Exception) else None
            if fallback_id is None or reason is None:
                raise
            logger.warning("summary from the fallback model", extra={"reason": reason, "model_id": fallback_id})
            count_fallback(reason)
            try:
                return converse_text(bedrock_client(), fallback_id, prompt, system=SYSTEM_PROMPT, guardrail=guardrail)
            except GuardrailIntervened:
                return withheld_summary(previous)

    return generate


def withheld_summary(previous: Summary | None) -> str:
    """The summary of a window whose model summary the guardrail blocked."""
    note = "A part of the conversation held details the assistant does not keep."
    return f"{previous.summary_text} {note}" if previous else note


def parse_trigger(event: Any) -> tuple[str, int]:
    if not isinstance(event, dict):
        raise InvalidTrigger("the payload must be an object")
    session_id, turn_number = event.get("session_id"), event.get("turn_number")
    if not isinstance(session_id, str) or not session_id:
        raise InvalidTrigger("session_id is required")
    if isinstance(turn_number, bool) or not isinstance(turn_number, int) or turn_number < 1:
        raise InvalidTrigger(f"turn_number must be a positive integer (given {turn_number!r})")
    return session_id, turn_number


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    cfg = settings()
    session_id, turn_number = parse_trigger(event)
    logger.append_keys(session_id=session_id, turn_number=turn_number)
    outcome = summarise(store().turns, session_id, turn_number, interval=cfg.summary_interval, generate=_generator(cfg))
    logger.info("summary", extra={"status": outcome.status, "summary_number": outcome.summary_number})
    return {"status": outcome.status, "summary_number": outcome.summary_number, "reason": outcome.reason}
