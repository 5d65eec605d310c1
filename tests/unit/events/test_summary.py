"""Rolling summary generator: interval logic, exact window, idempotency, Bedrock throttling (Stubber)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber

from lambdas.events import summary
from lambdas.shared import env
from lambdas.shared.bedrock import BedrockUnavailable, converse_text
from lambdas.shared.records import Summary, Turn
from lambdas.shared.store import DynamoSessionStore

MODEL = "anthropic.claude-3-haiku-20240307-v1:0"


class RecordingGenerator:
    """A summariser that remembers what it was given."""

    def __init__(self) -> None:
        self.calls: list[tuple[Summary | None, list[int]]] = []

    def __call__(self, previous: Summary | None, turns: list[Turn]) -> str:
        self.calls.append((previous, [t.turn_number for t in turns]))
        return f"summary of {turns[0].turn_number}..{turns[-1].turn_number}"


@pytest.fixture
def session_with_turns(store: DynamoSessionStore) -> tuple[str, DynamoSessionStore]:
    session = store.sessions.create_session("cust-1")
    for n in range(1, 26):
        store.turns.add_turn(session.session_id, "user" if n % 2 else "assistant", f"message {n}")
    return session.session_id, store


@pytest.mark.parametrize(
    ("turn", "expected"),
    [(10, (1, 1, 10)), (20, (2, 11, 20)), (30, (3, 21, 30)), (9, None), (11, None), (5, None)],
)
def test_window_is_the_last_interval_turns_ending_at_a_multiple(turn: int, expected: Any) -> None:
    assert summary.window(turn, 10) == expected


def test_summarises_exactly_the_window_with_the_previous_summary(
    session_with_turns: tuple[str, DynamoSessionStore],
) -> None:
    session_id, store = session_with_turns
    generate = RecordingGenerator()
    # Given summary 1 exists
    assert summary.summarise(store.turns, session_id, 10, interval=10, generate=generate).status == "generated"
    # When turn 20 triggers
    outcome = summary.summarise(store.turns, session_id, 20, interval=10, generate=generate)
    # Then turns 11..20 (and nothing else) were summarised, with summary 1 as context
    assert outcome == summary.Outcome("generated", 2)
    previous, numbers = generate.calls[-1]
    assert numbers == list(range(11, 21))
    assert previous is not None
    assert previous.summary_number == 1
    stored = store.turns.latest_summary(session_id)
    assert stored is not None
    assert (stored.summary_number, stored.window_start, stored.window_end) == (2, 11, 20)
    assert stored.turn_count_at_summary == 20


def test_a_replayed_trigger_changes_nothing_and_calls_no_model(
    session_with_turns: tuple[str, DynamoSessionStore],
) -> None:
    session_id, store = session_with_turns
    generate = RecordingGenerator()
    summary.summarise(store.turns, session_id, 10, interval=10, generate=generate)
    before = store.turns.latest_summary(session_id)
    # When the same trigger comes again
    outcome = summary.summarise(store.turns, session_id, 10, interval=10, generate=generate)
    # Then the stored summary is untouched and the model was called once in all
    assert outcome.status == "exists"
    assert store.turns.latest_summary(session_id) == before
    assert len(generate.calls) == 1


def test_a_concurrent_duplicate_keeps_the_first_summary(session_with_turns: tuple[str, DynamoSessionStore]) -> None:
    # Given a duplicate that passed the "already done?" check before the first one wrote
    session_id, store = session_with_turns
    store.turns.put_summary(
        session_id, 1, summary_text="first", window_start=1, window_end=10, turn_count_at_summary=10
    )

    class Stale:
        def __getattr__(self, name: str) -> Any:
            return getattr(store.turns, name)

        def latest_summary(self, _session_id: str) -> None:
            return None

    # When it writes too
    outcome = summary.summarise(Stale(), session_id, 10, interval=10, generate=RecordingGenerator())
    # Then the conditional write kept the first text
    assert outcome.status == "exists"
    latest = store.turns.latest_summary(session_id)
    assert latest is not None
    assert latest.summary_text == "first"


def test_turns_off_the_interval_are_skipped_without_reading(store: DynamoSessionStore) -> None:
    generate = RecordingGenerator()
    outcome = summary.summarise(store.turns, "no-such-session", 7, interval=10, generate=generate)
    assert outcome.status == "skipped"
    assert generate.calls == []


def test_extractive_summariser_keeps_context_and_turns() -> None:
    previous = Summary("s", 1, "earlier talk", 1, 10, 10, 0, 0)
    turns = [Turn("s", 11, "user", "x" * 500, 0, 0)]  # type: ignore[arg-type]
    text = summary.extractive_summary(previous, turns)
    assert text.splitlines()[0] == "earlier talk"
    assert len(text.splitlines()[1]) == len("user: ") + summary.EXTRACT_CHARS


@pytest.mark.parametrize("payload", [None, {}, {"session_id": "s"}, {"session_id": "s", "turn_number": 0}, []])
def test_fails_on_a_payload_that_is_not_a_trigger(payload: Any) -> None:
    with pytest.raises(summary.InvalidTrigger):
        summary.parse_trigger(payload)


# -- Bedrock -----------------------------------------------------------------------------------


def converse_response(text: str) -> dict[str, Any]:
    return {
        "output": {"message": {"role": "assistant", "content": [{"text": text}]}},
        "stopReason": "end_turn",
        "usage": {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15},
        "metrics": {"latencyMs": 100},
    }


@pytest.fixture
def bedrock() -> Iterator[tuple[Any, Stubber]]:
    client = boto3.client("bedrock-runtime", region_name="us-east-1")
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


def test_throttling_is_retried_with_bounded_jittered_backoff(bedrock: tuple[Any, Stubber]) -> None:
    client, stubber = bedrock
    stubber.add_client_error("converse", service_error_code="ThrottlingException", http_status_code=429)
    stubber.add_client_error("converse", service_error_code="ServiceUnavailableException", http_status_code=503)
    stubber.add_response("converse", converse_response("  The customer asked about volume 3.  "))
    sleeps: list[float] = []
    text = converse_text(client, MODEL, "prompt", sleep=sleeps.append, rand=lambda: 0.5, base_seconds=1, cap_seconds=8)
    assert text == "The customer asked about volume 3."
    assert sleeps == [0.5, 1.0]


def test_throttling_that_never_ends_raises_after_the_last_attempt(bedrock: tuple[Any, Stubber]) -> None:
    client, stubber = bedrock
    for _ in range(3):
        stubber.add_client_error("converse", service_error_code="ThrottlingException", http_status_code=429)
    sleeps: list[float] = []
    with pytest.raises(BedrockUnavailable, match="after 3 attempts"):
        converse_text(client, MODEL, "prompt", attempts=3, sleep=sleeps.append, rand=lambda: 1.0)
    assert len(sleeps) == 2


def test_fails_at_once_on_an_error_a_retry_cannot_fix(bedrock: tuple[Any, Stubber]) -> None:
    client, stubber = bedrock
    stubber.add_client_error("converse", service_error_code="ValidationException", http_status_code=400)
    with pytest.raises(Exception, match="ValidationException"):
        converse_text(client, MODEL, "prompt", sleep=lambda _: pytest.fail("must not sleep"))


@pytest.fixture
def configure(
    session_with_turns: tuple[str, DynamoSessionStore], bedrock: tuple[Any, Stubber], monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., None]]:
    """Set the summary function's environment (on the test's table, a model, and ``NAME=value`` more)
    and its stubbed Bedrock client without backoff sleeps; the settings are read again after the test."""
    _, store = session_with_turns
    client, _ = bedrock

    def settings(**more: str) -> None:
        for name, value in {"TABLE_NAME": store.table.table_name, "BEDROCK_MODEL_ID": MODEL, **more}.items():
            monkeypatch.setenv(name, value)
        env.reset()
        monkeypatch.setattr(summary, "bedrock_client", lambda: client)
        monkeypatch.setattr(summary, "store", lambda: store)
        monkeypatch.setattr("lambdas.shared.bedrock.time.sleep", lambda _: None)

    yield settings
    env.reset()


def test_handler_summarises_with_bedrock_and_raises_for_the_dlq_when_throttled(
    session_with_turns: tuple[str, DynamoSessionStore],
    bedrock: tuple[Any, Stubber],
    configure: Callable[..., None],
) -> None:
    # Given the summary function configured with a model, its Bedrock client stubbed
    session_id, store = session_with_turns
    _, stubber = bedrock
    configure(SUMMARY_INTERVAL="10")
    stubber.add_response(
        "converse",
        converse_response("Rolling summary."),
        {
            "modelId": MODEL,
            "messages": [
                {
                    "role": "user",
                    "content": [{"text": summary.build_prompt(None, store.turns.turns_between(session_id, 1, 10))}],
                }
            ],
            "system": [{"text": summary.SYSTEM_PROMPT}],
            "inferenceConfig": {"maxTokens": 512, "temperature": 0.2},
        },
    )
    context = type(
        "Ctx", (), {"function_name": "f", "memory_limit_in_mb": 128, "invoked_function_arn": "a", "aws_request_id": "r"}
    )()
    # When turn 10 triggers
    result = summary.handler({"session_id": session_id, "turn_number": 10, "event_id": "e"}, context)
    # Then the model's text is stored as summary 1
    assert result["status"] == "generated"
    latest = store.turns.latest_summary(session_id)
    assert latest is not None
    assert latest.summary_text == "Rolling summary."
    # And when Bedrock stays throttled for turn 20, the handler raises (Lambda retries, then the DLQ)
    for _ in range(4):
        stubber.add_client_error("converse", service_error_code="ThrottlingException", http_status_code=429)
    with pytest.raises(BedrockUnavailable):
        summary.handler({"session_id": session_id, "turn_number": 20, "event_id": "e2"}, context)
    latest = store.turns.latest_summary(session_id)
    assert latest is not None
    assert latest.summary_number == 1


def test_handler_names_the_stages_guardrail_and_keeps_a_blocked_summary_out(
    session_with_turns: tuple[str, DynamoSessionStore],
    bedrock: tuple[Any, Stubber],
    configure: Callable[..., None],
) -> None:
    # Given the summary function of a stage whose guardrail is version 4 of gr0abc123
    session_id, store = session_with_turns
    _, stubber = bedrock
    configure(SUMMARY_INTERVAL="10", BEDROCK_GUARDRAIL_ID="gr0abc123", BEDROCK_GUARDRAIL_VERSION="4")
    guardrail = {"guardrailIdentifier": "gr0abc123", "guardrailVersion": "4"}
    first_window = summary.build_prompt(None, store.turns.turns_between(session_id, 1, 10))
    stubber.add_response(
        "converse",
        converse_response("The customer asked about volume 3."),
        {
            "modelId": MODEL,
            "messages": [{"role": "user", "content": [{"text": first_window}]}],
            "system": [{"text": summary.SYSTEM_PROMPT}],
            "inferenceConfig": {"maxTokens": 512, "temperature": 0.2},
            "guardrailConfig": guardrail,
        },
    )
    blocked = converse_response("Sorry, I can't show that reply because it held payment details.")
    stubber.add_response("converse", {**blocked, "stopReason": "guardrail_intervened"})
    context = type(
        "Ctx", (), {"function_name": "f", "memory_limit_in_mb": 128, "invoked_function_arn": "a", "aws_request_id": "r"}
    )()
    # When turns 10 and 20 close their windows, the second summary blocked by the guardrail
    summary.handler({"session_id": session_id, "turn_number": 10, "event_id": "e"}, context)
    result = summary.handler({"session_id": session_id, "turn_number": 20, "event_id": "e2"}, context)
    # Then the first summary is the model's, written under the guardrail (the Stubber checked the request)
    # And the blocked one rolls the first forward with a note, never the guardrail's blocked message
    assert result["status"] == "generated"
    latest = store.turns.latest_summary(session_id)
    assert latest is not None
    assert latest.summary_number == 2
    assert latest.summary_text.startswith("The customer asked about volume 3. ")
    assert "payment details" not in latest.summary_text


FALLBACK = "global.anthropic.claude-sonnet-4-6"
END_OF_LIFE = (
    "This model version has reached the end of its life. Please refer to the AWS documentation for more details."
)


@pytest.mark.parametrize(
    ("primary_errors", "code", "status", "message", "reason"),
    [
        (4, "ThrottlingException", 429, "Too many requests, please wait before trying again.", "throttled"),
        (1, "ResourceNotFoundException", 404, END_OF_LIFE, "end_of_life"),
    ],
)
def test_a_summary_the_primary_cannot_write_comes_from_the_fallback_and_is_counted(
    session_with_turns: tuple[str, DynamoSessionStore],
    bedrock: tuple[Any, Stubber],
    configure: Callable[..., None],
    capsys: pytest.CaptureFixture[str],
    primary_errors: int,
    code: str,
    status: int,
    message: str,
    reason: str,
) -> None:
    # Given a primary model that fails (throttled past its attempts, or past its end of life) and a fallback
    session_id, store = session_with_turns
    _, stubber = bedrock
    configure(BEDROCK_FALLBACK_MODEL_ID=FALLBACK)
    for _ in range(primary_errors):
        stubber.add_client_error(
            "converse", service_error_code=code, service_message=message, http_status_code=status,
            expected_params={"modelId": MODEL, "messages": ANY, "system": ANY, "inferenceConfig": ANY},
        )  # fmt: skip
    stubber.add_response(
        "converse",
        converse_response("Written by the fallback."),
        {"modelId": FALLBACK, "messages": ANY, "system": ANY, "inferenceConfig": ANY},
    )
    # When the summary of turns 1..10 is written
    text = summary._generator(summary.settings())(None, store.turns.turns_between(session_id, 1, 10))
    # Then it is the fallback's, and the fallback is a metric with its reason
    assert text == "Written by the fallback."
    emitted = capsys.readouterr().out
    assert '"ModelFallbacks":[1.0]' in emitted
    assert f'"ModelFallback_{reason}":[1.0]' in emitted


def test_a_summary_refused_for_a_reason_the_fallback_shares_is_not_retried_there(
    session_with_turns: tuple[str, DynamoSessionStore], bedrock: tuple[Any, Stubber], configure: Callable[..., None]
) -> None:
    session_id, store = session_with_turns
    _, stubber = bedrock
    configure(BEDROCK_FALLBACK_MODEL_ID=FALLBACK)
    stubber.add_client_error("converse", service_error_code="AccessDeniedException", http_status_code=403)
    with pytest.raises(Exception, match="AccessDeniedException"):
        summary._generator(summary.settings())(None, store.turns.turns_between(session_id, 1, 10))
