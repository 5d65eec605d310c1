"""Responders: the context sent to the model, Converse retries, and the echo fallback."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber

from embedded.services.bedrock_stream import Refusal, StreamAnswers, refusal, reply_events, stream_error, tokens
from lambdas.shared.records import Role, Summary, TokenUsage, Turn
from lambdas.shared.responder import (
    SYSTEM_PROMPT,
    BedrockResponder,
    CappedResponder,
    EchoResponder,
    FallbackResponder,
    Guardrail,
    ReplyEnd,
    ResponderError,
    build_messages,
    responder_for,
)

MODEL = "anthropic.claude-3-haiku-20240307-v1:0"


def turn(number: int, role: str, text: str) -> Turn:
    return Turn(session_id="s-1", turn_number=number, role=Role(role), content=text, created_at=0, ttl=0)


def converse_response(text: str) -> dict[str, Any]:
    return {
        "output": {"message": {"role": "assistant", "content": [{"text": text}]}},
        "stopReason": "end_turn",
        "usage": {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15},
        "metrics": {"latencyMs": 120},
    }


def bedrock(**options: Any) -> tuple[BedrockResponder, Stubber, list[float]]:
    client = boto3.client("bedrock-runtime", region_name="us-east-1")
    sleeps: list[float] = []
    defaults: dict[str, Any] = {"client": client, "sleep": sleeps.append, "rand": lambda: 1.0}
    defaults.update(options)
    return BedrockResponder(MODEL, **defaults), Stubber(client), sleeps


# ------------------------------------------------------------------ context


def test_messages_map_roles_merge_runs_and_start_with_the_customer() -> None:
    # Given a greeting, two customer turns in a row, an agent turn and a system note
    turns = [
        turn(1, "assistant", "Hi, I'm MangaAssist!"),
        turn(2, "user", "Looking for Frieren"),
        turn(3, "user", "volume 3"),
        turn(4, "agent", "It ships Friday."),
        turn(5, "system", "An agent joined."),
        turn(6, "user", "Thanks!"),
    ]
    # When the Converse messages are built
    messages = build_messages(turns, max_tokens=1000)
    # Then the leading greeting is dropped, runs merge, agents speak as assistant, system is out
    assert messages == [
        {"role": "user", "content": [{"text": "Looking for Frieren\n\nvolume 3"}]},
        {"role": "assistant", "content": [{"text": "(human agent) It ships Friday."}]},
        {"role": "user", "content": [{"text": "Thanks!"}]},
    ]


def test_messages_keep_only_the_newest_turns_within_the_token_budget() -> None:
    turns = [turn(n, "user" if n % 2 else "assistant", "x" * 400) for n in range(1, 21)]
    messages = build_messages(turns, max_tokens=350)
    # 400 chars ~ 101 tokens: three turns fit, and the first kept must be a user turn
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert all(len(m["content"][0]["text"]) == 400 for m in messages)


def test_newest_turn_is_kept_truncated_when_it_alone_exceeds_the_budget() -> None:
    messages = build_messages([turn(1, "user", "y" * 10_000)], max_tokens=100)
    assert messages == [{"role": "user", "content": [{"text": "y" * 400}]}]


def test_request_has_the_system_prompt_the_summary_and_the_model() -> None:
    responder, _, _ = bedrock()
    summary = Summary(
        session_id="s-1",
        summary_number=1,
        summary_text="Customer collects Frieren.",
        window_start=1,
        window_end=10,
        turn_count_at_summary=10,
        created_at=0,
        ttl=0,
    )
    request = responder.request([turn(11, "user", "Next volume?")], summary=summary)
    assert request["modelId"] == MODEL
    assert request["system"][0] == {"text": SYSTEM_PROMPT}
    assert "manga" in SYSTEM_PROMPT
    assert request["system"][1] == {"text": "Summary of the earlier conversation: Customer collects Frieren."}
    assert request["messages"] == [{"role": "user", "content": [{"text": "Next volume?"}]}]
    assert request["inferenceConfig"] == {"maxTokens": 512, "temperature": 0.3}


def test_fails_request_without_a_customer_message() -> None:
    responder, _, _ = bedrock()
    with pytest.raises(ResponderError) as raised:
        responder.request([turn(1, "assistant", "Hi")])
    assert raised.value.reason == "empty"


# ------------------------------------------------------------------ Converse


def test_reply_is_the_models_text() -> None:
    responder, stub, sleeps = bedrock()
    stub.add_response(
        "converse",
        converse_response("Volume 3 is out."),
        {"modelId": MODEL, **dict.fromkeys(("system", "messages", "inferenceConfig"), ANY)},
    )
    with stub:
        assert responder.reply([turn(1, "user", "Is volume 3 out?")]) == "Volume 3 is out."
    assert sleeps == []


def test_throttling_is_retried_with_full_jitter_backoff() -> None:
    responder, stub, sleeps = bedrock(attempts=3)
    stub.add_client_error("converse", "ThrottlingException", http_status_code=429)
    stub.add_client_error("converse", "ServiceUnavailableException", http_status_code=503)
    stub.add_response("converse", converse_response("Here you go."))
    with stub:
        assert responder.reply([turn(1, "user", "hi")]) == "Here you go."
    assert sleeps == [0.25, 0.5]


def test_throttling_past_the_attempts_raises_throttled() -> None:
    responder, stub, sleeps = bedrock(attempts=2)
    for _ in range(2):
        stub.add_client_error("converse", "ThrottlingException", http_status_code=429)
    with stub, pytest.raises(ResponderError) as raised:
        responder.reply([turn(1, "user", "hi")])
    assert raised.value.reason == "throttled"
    assert len(sleeps) == 1


def test_no_retry_starts_after_the_deadline() -> None:
    now = [0.0]
    responder, stub, sleeps = bedrock(attempts=5, deadline_seconds=1.0, clock=lambda: now[0])

    def late_sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += 10

    responder._sleep = late_sleep
    for _ in range(2):
        stub.add_client_error("converse", "ThrottlingException", http_status_code=429)
    with stub, pytest.raises(ResponderError):
        responder.reply([turn(1, "user", "hi")])
    assert len(sleeps) == 1  # the second failure came after the deadline: no third call


def test_validation_errors_are_not_retried() -> None:
    responder, stub, sleeps = bedrock()
    stub.add_client_error("converse", "AccessDeniedException", http_status_code=403)
    with stub, pytest.raises(ResponderError) as raised:
        responder.reply([turn(1, "user", "hi")])
    assert raised.value.reason == "unavailable"
    assert "AccessDenied" in str(raised.value)
    assert sleeps == []


def test_empty_model_output_is_an_error() -> None:
    responder, stub, _ = bedrock()
    stub.add_response("converse", converse_response("   "))
    with stub, pytest.raises(ResponderError) as raised:
        responder.reply([turn(1, "user", "hi")])
    assert raised.value.reason == "empty"


# ------------------------------------------------------------------ ConverseStream


def streaming(*answers: Any, **options: Any) -> tuple[BedrockResponder, StreamAnswers, list[float]]:
    """A Bedrock responder whose client answers ConverseStream with ``answers``, in order."""
    client = boto3.client("bedrock-runtime", region_name="us-east-1")
    sleeps: list[float] = []
    defaults: dict[str, Any] = {"client": client, "sleep": sleeps.append, "rand": lambda: 1.0}
    defaults.update(options)
    return BedrockResponder(MODEL, **defaults), StreamAnswers(client, *answers), sleeps


def test_stream_yields_the_text_as_written_then_how_it_ended_and_the_tokens_the_model_reported() -> None:
    events = reply_events("Volume 3 is out in March.", stop_reason="max_tokens", input_tokens=1234)
    responder, answers, _ = streaming(events)
    pieces = list(responder.stream([turn(1, "user", "Is volume 3 out?")]))
    assert pieces[:-1] == tokens("Volume 3 is out in March.")
    assert pieces[-1] == ReplyEnd("max_tokens", TokenUsage(1234, len(tokens("Volume 3 is out in March."))))
    assert not pieces[-1].blocked
    # the request is the Converse request, sent to ConverseStream without a guardrail
    assert answers.requests[0]["modelId"] == MODEL
    assert "guardrailConfig" not in answers.requests[0]
    assert answers.streams[0].closed


def test_a_stream_without_usage_ends_without_usage_and_a_malformed_usage_is_ignored() -> None:
    text = "Volume 3 is out."
    plain = [e for e in reply_events(text) if "metadata" not in e]
    malformed = [*plain, {"metadata": {"usage": {"inputTokens": -1, "outputTokens": 2, "totalTokens": 1}}}]
    responder, _, _ = streaming(plain, malformed)
    assert list(responder.stream([turn(1, "user", "hi")]))[-1] == ReplyEnd("end_turn", None)
    assert list(responder.stream([turn(1, "user", "hi")]))[-1] == ReplyEnd("end_turn", None)


def test_stream_names_the_stages_guardrail_screening_synchronously() -> None:
    guardrail = Guardrail("gr0abc123", "3")
    responder, answers, _ = streaming(reply_events("ok"), guardrail=guardrail)
    list(responder.stream([turn(1, "user", "hi")]))
    assert answers.requests[0]["guardrailConfig"] == {
        "guardrailIdentifier": "gr0abc123",
        "guardrailVersion": "3",
        "streamProcessingMode": "sync",
    }
    # and Converse names it too (without the stream's mode, which Converse does not take)
    assert responder.request([turn(1, "user", "hi")])["guardrailConfig"] == {
        "guardrailIdentifier": "gr0abc123",
        "guardrailVersion": "3",
    }


@pytest.mark.parametrize("stop_reason", ["guardrail_intervened", "content_filtered"])
def test_a_withheld_reply_ends_blocked_and_is_not_an_error(stop_reason: str) -> None:
    responder, _, _ = streaming(reply_events("Sorry, the model cannot answer.", stop_reason=stop_reason))
    *_, end = responder.stream([turn(1, "user", "something off-limits")])
    assert isinstance(end, ReplyEnd)
    assert end.stop_reason == stop_reason
    assert end.blocked


def test_opening_the_stream_is_retried_like_converse() -> None:
    responder, answers, sleeps = streaming(Refusal(), Refusal(), reply_events("Try Mob Psycho."))
    assert "".join(p for p in responder.stream([turn(1, "user", "hi")]) if isinstance(p, str)) == "Try Mob Psycho."
    assert sleeps == [0.25, 0.5]
    assert answers.pending == 0


def test_a_stream_that_cannot_open_raises_without_yielding() -> None:
    responder, _, _ = streaming(Refusal(), Refusal(), Refusal())
    with pytest.raises(ResponderError) as raised:
        next(responder.stream([turn(1, "user", "hi")]))
    assert raised.value.reason == "throttled"
    responder, _, _ = streaming(Refusal("ValidationException", 400))
    with pytest.raises(ResponderError) as raised:
        next(responder.stream([turn(1, "user", "hi")]))
    assert raised.value.reason == "unavailable"


def test_a_stream_that_breaks_midway_raises_interrupted_after_its_text_and_is_never_retried() -> None:
    # Given a stream that breaks after two pieces of text
    events = [*reply_events("Frieren is a fantasy series.")[:3], stream_error("modelStreamErrorException")]
    responder, answers, sleeps = streaming(events, reply_events("a second reply must not be asked for"))
    received: list[str | ReplyEnd] = []
    # When it is read
    with pytest.raises(ResponderError) as raised:
        received.extend(responder.stream([turn(1, "user", "What is Frieren?")]))
    # Then the text so far came through, then the error; no retry, and the stream was released
    assert received == tokens("Frieren is a fantasy series.")[:2]
    assert raised.value.reason == "interrupted"
    assert "modelStreamErrorException" in str(raised.value)
    assert (answers.pending, sleeps) == (1, [])
    assert answers.streams[0].closed


def test_a_reply_still_written_at_the_deadline_stops_there_and_can_be_continued() -> None:
    now = [0.0]

    def clock() -> float:
        now[0] += 3.0  # every reading of the clock is 3 s on: the first word comes 9 s in, the second 12 s in
        return now[0]

    responder, answers, _ = streaming(reply_events("one two three four five six"), clock=clock, deadline_seconds=10)
    pieces = list(responder.stream([turn(1, "user", "hi")]))
    assert pieces == ["one", ReplyEnd("deadline")]
    assert pieces[-1].can_continue  # type: ignore[union-attr]
    assert answers.streams[0].closed


def test_a_reply_with_no_text_by_the_deadline_is_given_up() -> None:
    now = [0.0]

    def clock() -> float:
        now[0] += 6.0  # every reading of the clock is 6 s on: the first event comes 12 s in, past the deadline
        return now[0]

    responder, answers, _ = streaming(reply_events("one two"), clock=clock, deadline_seconds=10)
    with pytest.raises(ResponderError) as raised:
        list(responder.stream([turn(1, "user", "hi")]))
    assert raised.value.reason == "timeout"
    assert answers.streams[0].closed


def test_only_a_reply_cut_at_its_budget_or_deadline_can_be_continued() -> None:
    assert [ReplyEnd(r).can_continue for r in ("max_tokens", "deadline", "end_turn", "guardrail_intervened")] == [
        True,
        True,
        False,
        False,
    ]


def test_closing_the_stream_early_releases_the_models_stream() -> None:
    responder, answers, _ = streaming(reply_events("A long answer about every volume of Frieren."))
    pieces = responder.stream([turn(1, "user", "hi")])
    next(pieces)
    pieces.close()  # type: ignore[attr-defined]
    assert answers.streams[0].closed


def test_echo_streams_its_reply_as_one_piece() -> None:
    pieces = list(EchoResponder().stream([turn(1, "user", "one")]))
    assert pieces == ["You said: one", ReplyEnd("end_turn")]


# ------------------------------------------------------------------ choice and echo


def test_stage_without_model_gets_the_echo_responder() -> None:
    assert isinstance(responder_for(None), EchoResponder)
    assert isinstance(responder_for("  "), EchoResponder)
    assert isinstance(responder_for(MODEL), BedrockResponder)


def test_echo_repeats_the_last_customer_message() -> None:
    echo = EchoResponder()
    assert echo.reply([turn(1, "user", "one"), turn(2, "assistant", "ok"), turn(3, "user", "two")]) == "You said: two"
    assert "help" in echo.reply([])


@pytest.mark.parametrize(("option", "value"), [("attempts", 0), ("max_context_tokens", 0)])
def test_fails_invalid_bounds(option: str, value: int) -> None:
    options: dict[str, Any] = {option: value}
    with pytest.raises(ValueError, match=">= 1"):
        BedrockResponder(MODEL, **options)


def test_fails_empty_model_id() -> None:
    with pytest.raises(ValueError, match="model_id"):
        BedrockResponder(" ")


# ------------------------------------------------------------------ fallback model and the cap on calls

FALLBACK = "global.anthropic.claude-sonnet-4-6"


def with_fallback(
    primary_answers: list[Any], fallback_answers: list[Any]
) -> tuple[FallbackResponder, StreamAnswers, StreamAnswers, list[str]]:
    """A fallback responder over two stubbed clients (one attempt on the primary, three on the fallback)."""
    primary, primary_stub, _ = streaming(*primary_answers, attempts=1)
    fallback, fallback_stub, _ = streaming(*fallback_answers)
    fallback.model_id = FALLBACK
    reasons: list[str] = []
    return FallbackResponder(primary, fallback, on_fallback=reasons.append), primary_stub, fallback_stub, reasons


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (refusal("throttled"), "throttled"),
        (Refusal("ModelNotReadyException", 429), "not_ready"),
        (Refusal("ModelTimeoutException", 408), "timeout"),
        (Refusal("InternalServerException", 500), "model_error"),
        (refusal("end_of_life"), "end_of_life"),
        (refusal("legacy"), "end_of_life"),
        (Refusal("ValidationException", 400, refusal("legacy").message), "end_of_life"),
    ],
)
def test_a_primary_that_fails_before_writing_hands_the_reply_to_the_fallback(answer: Refusal, reason: str) -> None:
    # Given a primary model that refuses once and a fallback that answers
    responder, primary, fallback, reasons = with_fallback([answer], [reply_events("Try Frieren.")])
    # When the reply is read
    pieces = list(responder.stream([turn(1, "user", "hi")]))
    # Then it is the fallback's, the primary was asked once, and the fallback was counted by reason
    assert "".join(p for p in pieces if isinstance(p, str)) == "Try Frieren."
    assert pieces[-1] == ReplyEnd("end_turn", TokenUsage(10, len(tokens("Try Frieren."))))
    assert [r["modelId"] for r in primary.requests] == [MODEL]
    assert [r["modelId"] for r in fallback.requests] == [FALLBACK]
    assert reasons == [reason]
    assert fallback.streams[0].closed


def test_a_primary_that_answers_is_the_reply_and_the_fallback_is_never_asked() -> None:
    responder, primary, fallback, reasons = with_fallback([reply_events("Volume 3 is out.")], [])
    assert "".join(p for p in responder.stream([turn(1, "user", "hi")]) if isinstance(p, str)) == "Volume 3 is out."
    assert (len(primary.requests), len(fallback.requests), reasons) == (1, 0, [])


@pytest.mark.parametrize("code", ["AccessDeniedException", "ValidationException", "ResourceNotFoundException"])
def test_a_refusal_another_model_would_share_is_not_handed_over(code: str) -> None:
    responder, _, fallback, reasons = with_fallback([Refusal(code, 400, "Malformed input request")], [])
    with pytest.raises(ResponderError) as raised:
        list(responder.stream([turn(1, "user", "hi")]))
    assert raised.value.reason == "unavailable"
    assert (fallback.requests, reasons) == ([], [])


def test_both_models_throttled_is_one_clear_error_after_the_fallbacks_retries() -> None:
    throttled = refusal("throttled")
    responder, primary, fallback, reasons = with_fallback([throttled], [throttled, throttled, throttled])
    with pytest.raises(ResponderError) as raised:
        list(responder.stream([turn(1, "user", "hi")]))
    assert raised.value.reason == "throttled"
    assert (len(primary.requests), len(fallback.requests), reasons) == (1, 3, ["throttled"])


def test_a_primary_that_breaks_midway_is_not_replayed_on_the_fallback() -> None:
    events = [*reply_events("Frieren is a fantasy series.")[:3], stream_error("modelStreamErrorException")]
    responder, _, fallback, reasons = with_fallback([events], [reply_events("a second reply")])
    with pytest.raises(ResponderError) as raised:
        list(responder.stream([turn(1, "user", "hi")]))
    assert raised.value.reason == "interrupted"
    assert (fallback.requests, reasons) == ([], [])


def test_closing_a_fallback_reply_early_releases_the_fallbacks_stream() -> None:
    responder, _, fallback, _ = with_fallback([refusal("throttled")], [reply_events("A long answer about Frieren.")])
    pieces = responder.stream([turn(1, "user", "hi")])
    next(pieces)
    pieces.close()  # type: ignore[attr-defined]
    assert fallback.streams[0].closed


def test_a_full_cap_refuses_busy_with_the_wait_and_calls_no_model() -> None:
    responder, answers, _ = streaming(reply_events("never asked"))
    capped = CappedResponder(responder, lambda: 4)
    with pytest.raises(ResponderError) as raised:
        next(iter(capped.stream([turn(1, "user", "hi")])))
    assert (raised.value.reason, raised.value.retry_after_seconds) == ("busy", 4)
    assert answers.requests == []
    admitted = CappedResponder(streaming(reply_events("ok"))[0], lambda: 0)
    assert [p for p in admitted.stream([turn(1, "user", "hi")]) if isinstance(p, str)] == ["ok"]


def test_stage_responder_with_a_fallback_tries_the_primary_once_and_the_fallback_with_the_stages_attempts() -> None:
    responder = responder_for(MODEL, fallback_model_id=FALLBACK, attempts=4, admit=lambda: 0)
    assert isinstance(responder, CappedResponder)
    inner = responder.inner
    assert isinstance(inner, FallbackResponder)
    assert isinstance(inner.primary, BedrockResponder)
    assert isinstance(inner.fallback, BedrockResponder)
    assert (inner.primary.model_id, inner.primary.attempts) == (MODEL, 1)
    assert (inner.fallback.model_id, inner.fallback.attempts) == (FALLBACK, 4)
    assert isinstance(responder_for(MODEL, fallback_model_id=None), BedrockResponder)
    assert isinstance(responder_for(None, fallback_model_id=FALLBACK, admit=lambda: 5), EchoResponder)
