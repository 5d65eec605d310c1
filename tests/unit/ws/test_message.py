"""lambdas.ws.message: sendMessage stores the customer turn, answers it as the model writes, refuses what it must."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from embedded.events import authorizer_context, ws_event
from embedded.round_trips import RoundTrips
from embedded.services.bedrock_stream import Refusal, StreamAnswers, reply_events, stream_error
from embedded.services.bedrock_stream import tokens as model_tokens
from lambdas.shared import connections, env, keys
from lambdas.shared.records import Role, SessionStatus, Summary, TokenUsage, Turn
from lambdas.shared.responder import (
    BedrockResponder,
    CappedResponder,
    EchoResponder,
    FallbackResponder,
    Guardrail,
    ReplyEnd,
)
from lambdas.shared.store import DynamoSessionStore
from lambdas.ws import message
from lambdas.ws.frames import MAX_TEXT_CHARS
from tests.support.websocket import ENDPOINT, sent_frames
from tests.unit.ws.chat import ALICE, CONN, CTX, OTHER_CONN, customer_context, onboarded, roles, send


def test_message_in_an_active_session_is_answered_stored_and_posted(ws: DynamoSessionStore) -> None:
    session_id = onboarded()
    assert send("Is Frieren volume 3 out?") == {"statusCode": 200}
    turns = ws.turns.list_turns(session_id).items
    assert roles(turns) == ["assistant", "user", "assistant"]
    assert turns[1].content == "Is Frieren volume 3 out?"
    assert turns[2].content == "You said: Is Frieren volume 3 out?"  # the stage has no model: echo
    # The echo streams its reply as one delta, then the final frame names the stored turn
    assert sent_frames(CONN) == [
        {
            "type": "delta",
            "session_id": session_id,
            "reply_to": 2,
            "offset": 0,
            "text": "You said: Is Frieren volume 3 out?",
        },
        {"type": "final", "role": "assistant", "session_id": session_id, "reply_to": 2, "turn_number": 3},
    ]


def _emitted_metrics(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """The EMF metrics the handler flushed: name -> value(s)."""
    emitted = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    return {m["Name"]: e[m["Name"]] for e in emitted for d in e["_aws"]["CloudWatchMetrics"] for m in d["Metrics"]}


class TimedResponder:
    """Echoes, and notes when the model was called (``time.perf_counter``)."""

    def __init__(self) -> None:
        self.called_at: list[float] = []

    def stream(self, turns: Sequence[Turn], *, summary: Summary | None = None) -> Iterator[str | ReplyEnd]:
        self.called_at.append(time.perf_counter())
        yield "answer"
        yield ReplyEnd("end_turn")


@pytest.mark.parametrize("with_id", [False, True], ids=["without_client_message_id", "with_client_message_id"])
def test_a_message_waits_three_round_trips_before_the_model_and_four_in_a_burst(
    ws: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch, with_id: bool
) -> None:
    # Given a chatting customer, and 50 ms of network time per AWS call of any client (calls made at
    # once overlap even when a busy machine starts the pool's threads late)
    onboarded()
    model = TimedResponder()
    monkeypatch.setattr(message, "responder", lambda: model)
    # When she writes once, then again at once (her buckets are then in a burst), as the chat page
    # does (with a client_message_id) or without one
    with RoundTrips.everywhere(latency=0.05) as first:
        send_with_id("Is Frieren volume 3 out?", "m-1") if with_id else send("Is Frieren volume 3 out?")
    with RoundTrips.everywhere(latency=0.05) as second:
        send_with_id("And volume 4?", "m-2") if with_id else send("And volume 4?")
    # Then the model was called after 3 round trips, then after 4 (the burst write of each bucket):
    # the connection, both buckets, the budget (and the sent record) at once; the turn number; the
    # turn (with its sent record: one transaction) and the context reads at once
    assert first.sequential(before=model.called_at[0]) == 3
    before_model = first.operations(before=model.called_at[0])
    assert len(before_model) == (9 if with_id else 8)
    assert ("TransactWriteItems" in before_model) is with_id
    assert second.sequential(before=model.called_at[1]) == 4
    assert [f["type"] for f in sent_frames(CONN)] == ["delta", "final", "delta", "final"]


def test_message_outcome_and_chat_turns_are_metrics(ws: DynamoSessionStore, capsys: pytest.CaptureFixture[str]) -> None:
    onboarded()
    capsys.readouterr()
    send("hello")
    # One ChatTurns per stored turn (the user's and the reply) feeds "chat turns per minute";
    # ReplyPosts counts the reply's frames (one delta and the final)
    assert _emitted_metrics(capsys) == {"ChatTurns": [1.0, 1.0], "Message_replied": [1.0], "ReplyPosts": [2.0]}


def test_a_handoff_message_counts_one_chat_turn(ws: DynamoSessionStore, capsys: pytest.CaptureFixture[str]) -> None:
    session_id = onboarded()
    ws.sessions.update_status(session_id, SessionStatus.HANDOFF)
    capsys.readouterr()
    send("Where is my order?")
    assert _emitted_metrics(capsys) == {"ChatTurns": [1.0], "Message_handoff": [1.0]}


class ExplodingResponder:
    def __init__(self, error: Exception) -> None:
        self.error = error
        self.calls = 0

    def stream(self, turns: Sequence[Turn], *, summary: Summary | None = None) -> Iterator[str | ReplyEnd]:
        self.calls += 1
        raise self.error
        yield ReplyEnd("end_turn")  # a generator, as the responders are


def test_message_in_a_handoff_session_goes_to_the_agent_without_a_model_call(
    ws: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a session an agent has taken over
    session_id = onboarded()
    ws.sessions.update_status(session_id, SessionStatus.HANDOFF)
    model = ExplodingResponder(AssertionError("the model must not be called"))
    monkeypatch.setattr(message, "responder", lambda: model)
    # When the customer writes
    send("Where is my order?")
    # Then the turn is stored for the agent, the customer is acknowledged, the model untouched
    turns = ws.turns.list_turns(session_id).items
    assert roles(turns) == ["assistant", "user"]
    assert model.calls == 0
    assert sent_frames(CONN) == [
        {
            "type": "ack",
            "session_id": session_id,
            "turn_number": 2,
            "status": "handoff",
            "message": message.HANDOFF_ACK,
        }
    ]


def test_message_while_the_handoff_waits_for_an_agent_is_kept_for_the_agent_not_answered_by_the_model(
    ws: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a customer queued for an agent (no agent free yet: the session is still active)
    session_id = onboarded()
    ws.handoffs.queue_handoff(
        session_id, handoff_id="h-1", reason="general", priority="normal", execution_arn=None, task_token="tok"
    )
    model = ExplodingResponder(AssertionError("the model must not be called"))
    monkeypatch.setattr(message, "responder", lambda: model)
    # When the customer writes while waiting
    send("Hello? Is anyone there?")
    # Then the turn is stored for the agent, the model untouched, and the customer told they wait
    assert roles(ws.turns.list_turns(session_id).items) == ["assistant", "user"]
    assert model.calls == 0
    assert sent_frames(CONN) == [
        {
            "type": "ack",
            "session_id": session_id,
            "turn_number": 2,
            "status": "handoff",
            "message": message.WAITING_ACK,
        }
    ]


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ("{not json", "invalid_frame"),
        ("[1, 2]", "invalid_frame"),
        ("", "invalid_frame"),
        (json.dumps({"action": "sendMessage"}), "invalid_text"),
        (json.dumps({"action": "sendMessage", "text": 42}), "invalid_text"),
        (json.dumps({"action": "sendMessage", "text": "   "}), "invalid_text"),
        (json.dumps({"action": "sendMessage", "text": "hi\u0000there"}), "invalid_text"),
        (json.dumps({"action": "sendMessage", "text": "bell\u0007"}), "invalid_text"),
        (json.dumps({"action": "sendMessage", "text": "rtl\u202eevil"}), "invalid_text"),
        (json.dumps({"action": "sendMessage", "text": "x" * (MAX_TEXT_CHARS + 1)}), "message_too_long"),
        ("x" * 100_000, "message_too_long"),
        (json.dumps({"action": "shout", "text": "hi"}), "unknown_action"),
    ],
)
def test_malformed_and_oversized_frames_get_an_error_frame_and_store_nothing(
    ws: DynamoSessionStore, body: str, code: str
) -> None:
    session_id = onboarded()
    message.handler(ws_event("sendMessage", body=body, authorizer=ALICE), CTX)
    [frame] = sent_frames(CONN)
    assert set(frame) == {"type", "code", "message"}
    assert (frame["type"], frame["code"]) == ("error", code)
    assert len(ws.turns.list_turns(session_id).items) == 1  # the greeting only


def test_a_message_of_exactly_the_limit_is_accepted(ws: DynamoSessionStore) -> None:
    session_id = onboarded()
    send("y" * MAX_TEXT_CHARS)
    assert roles(ws.turns.list_turns(session_id).items) == ["assistant", "user", "assistant"]


def test_multiline_text_is_accepted(ws: DynamoSessionStore) -> None:
    session_id = onboarded()
    send("line one\r\nline two\tend")
    assert ws.turns.list_turns(session_id).items[1].content == "line one\nline two\tend"


def test_bedrock_throttled_keeps_the_turn_and_tells_the_customer(
    ws: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a Bedrock responder whose every call is throttled
    client = boto3.client("bedrock-runtime", region_name="us-east-1")
    sleeps: list[float] = []
    model = BedrockResponder("anthropic.claude-3-haiku-20240307-v1:0", client=client, attempts=3, sleep=sleeps.append)
    monkeypatch.setattr(message, "responder", lambda: model)
    session_id = onboarded()
    with Stubber(client) as stub:
        for _ in range(3):
            stub.add_client_error("converse_stream", "ThrottlingException", http_status_code=429)
        # When the customer writes
        send("Recommend a shonen series")
        stub.assert_no_pending_responses()
    # Then the user's turn is stored, no reply is invented, and the customer gets a friendly error
    turns = ws.turns.list_turns(session_id).items
    assert roles(turns) == ["assistant", "user"]
    assert turns[1].content == "Recommend a shonen series"
    assert len(sleeps) == 2
    [frame] = sent_frames(CONN)
    assert frame == message.NO_REPLY
    assert "Throttling" not in frame["message"]


def test_bedrock_recovering_within_the_retries_answers(ws: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch) -> None:
    client = boto3.client("bedrock-runtime", region_name="us-east-1")
    model = BedrockResponder("m", client=client, attempts=3, sleep=lambda _: None)
    monkeypatch.setattr(message, "responder", lambda: model)
    session_id = onboarded()
    StreamAnswers(client, Refusal(), reply_events("Try Mob Psycho."))
    send("Recommend a shonen series")
    assert ws.turns.list_turns(session_id).items[-1].content == "Try Mob Psycho."
    assert "".join(f.get("text", "") for f in sent_frames(CONN) if f["type"] == "delta") == "Try Mob Psycho."


LONG_REPLY = (
    "Mob Psycho 100 is a great pick! It follows a shy middle-schooler with huge psychic powers. "
    "The art is loose and lively, and the fights are some of the best in the genre. "
    "All sixteen volumes are in stock, and the box set comes with a poster. "
    "If you liked One-Punch Man, you will enjoy it: it is by the same author."
)


@pytest.fixture
def bedrock(ws: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A Bedrock responder on a client whose ConverseStream answers come from the test."""
    client = boto3.client("bedrock-runtime", region_name="us-east-1")
    model = BedrockResponder("m", client=client, attempts=1, sleep=lambda _: None)
    monkeypatch.setattr(message, "responder", lambda: model)
    return client


def test_the_stages_guardrail_screens_the_chats_replies(
    ws: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in {
        "BEDROCK_MODEL_ID": "anthropic.claude-3-haiku-20240307-v1:0",
        "BEDROCK_GUARDRAIL_ID": "gr0abc123",
        "BEDROCK_GUARDRAIL_VERSION": "1",
    }.items():
        monkeypatch.setenv(name, value)
    env.reset()
    model = message.responder()
    assert isinstance(model, CappedResponder)  # under the stage's cap on model calls
    assert isinstance(model.inner, BedrockResponder)
    assert model.inner.guardrail == Guardrail("gr0abc123", "1")
    # With a fallback model, its replies are screened alike
    monkeypatch.setenv("BEDROCK_FALLBACK_MODEL_ID", "global.anthropic.claude-sonnet-4-6")
    env.reset()
    model = message.responder()
    assert isinstance(model, CappedResponder)
    assert isinstance(model.inner, FallbackResponder)
    for responder in (model.inner.primary, model.inner.fallback):
        assert isinstance(responder, BedrockResponder)
        assert responder.guardrail == Guardrail("gr0abc123", "1")
    fallback = model.inner.fallback
    assert isinstance(fallback, BedrockResponder)
    assert fallback.model_id == "global.anthropic.claude-sonnet-4-6"


def test_a_streamed_reply_arrives_in_far_fewer_posts_than_tokens_and_is_stored_once(
    ws: DynamoSessionStore, bedrock: Any
) -> None:
    # Given a model that answers in about 80 tokens
    session_id = onboarded()
    answers = StreamAnswers(bedrock, reply_events(LONG_REPLY))
    # When the customer writes
    send("Recommend a shonen series")
    # Then the deltas, in order, are the reply; the final frame names the turn that stores it
    frames = sent_frames(CONN)
    deltas, final = frames[:-1], frames[-1]
    assert {f["type"] for f in deltas} == {"delta"}
    assert "".join(f["text"] for f in deltas) == LONG_REPLY
    # And each delta says where its text starts, so a client can drop a repeated post
    assert [f["offset"] for f in deltas] == [len("".join(f["text"] for f in deltas[:n])) for n in range(len(deltas))]
    assert final == {"type": "final", "role": "assistant", "session_id": session_id, "reply_to": 2, "turn_number": 3}
    assert ws.turns.list_turns(session_id).items[-1].content == LONG_REPLY
    assert len(frames) <= len(model_tokens(LONG_REPLY)) // 10
    assert answers.streams[0].closed


def test_a_stream_that_breaks_midway_says_so_and_stores_only_the_customers_turn(
    ws: DynamoSessionStore, bedrock: Any
) -> None:
    # Given a model stream that breaks after a few tokens
    session_id = onboarded()
    StreamAnswers(bedrock, [*reply_events(LONG_REPLY)[:8], stream_error("modelStreamErrorException")])
    # When the customer writes
    send("Recommend a shonen series")
    # Then the text so far went out, then an error frame saying what happened; nothing partial is stored
    frames = sent_frames(CONN)
    assert frames[0]["type"] == "delta"
    assert frames[-1] == message.REPLY_INTERRUPTED
    assert LONG_REPLY.startswith("".join(f["text"] for f in frames[:-1]))
    assert roles(ws.turns.list_turns(session_id).items) == ["assistant", "user"]
    assert "modelStream" not in json.dumps(frames)


def test_a_stream_that_breaks_before_any_text_is_no_reply(ws: DynamoSessionStore, bedrock: Any) -> None:
    session_id = onboarded()
    StreamAnswers(bedrock, [{"messageStart": {"role": "assistant"}}, stream_error("throttlingException")])
    send("hello")
    assert sent_frames(CONN) == [message.NO_REPLY]
    assert roles(ws.turns.list_turns(session_id).items) == ["assistant", "user"]


def test_a_reply_the_guardrail_withholds_becomes_a_clear_notice_not_an_error(
    ws: DynamoSessionStore, bedrock: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a guardrail that intervenes after a few tokens went out
    session_id = onboarded()
    StreamAnswers(bedrock, reply_events("Here is how to", stop_reason="guardrail_intervened"))
    capsys.readouterr()
    # When the customer writes
    send("something off-limits")
    # Then the customer is told to replace the partial reply with the notice, which the transcript keeps
    frames = sent_frames(CONN)
    assert frames[-1] == {
        "type": "reply_blocked",
        "session_id": session_id,
        "reply_to": 2,
        "turn_number": 3,
        "text": message.BLOCKED_REPLY,
    }
    assert all(f["type"] == "delta" for f in frames[:-1])
    assert [t.content for t in ws.turns.list_turns(session_id).items][1:] == [
        "something off-limits",
        message.BLOCKED_REPLY,
    ]
    assert _emitted_metrics(capsys)["Message_blocked"] == [1.0]


def test_a_client_gone_mid_stream_stops_it_disconnects_the_session_and_stores_no_partial_reply(
    ws: DynamoSessionStore, bedrock: Any
) -> None:
    # Given a long reply, and a client that leaves after the first delta
    session_id = onboarded()
    answers = StreamAnswers(bedrock, reply_events(LONG_REPLY))
    with Stubber(connections.management_client(ENDPOINT)) as stub:
        stub.add_response("post_to_connection", {})
        stub.add_client_error("post_to_connection", "GoneException", http_status_code=410)
        send("Recommend a shonen series")
        stub.assert_no_pending_responses()
    # Then the stream was stopped and released, the session disconnected, the customer's turn kept
    assert answers.streams[0].closed
    session = ws.sessions.get_session(session_id)
    assert session is not None
    assert session.status == SessionStatus.DISCONNECTED
    assert ws.connections.get_connection(CONN) is None
    assert roles(ws.turns.list_turns(session_id).items) == ["assistant", "user"]


def test_gone_at_the_final_frame_disconnects_the_session_and_keeps_both_turns(ws: DynamoSessionStore) -> None:
    # Given a client that leaves once the whole reply was posted, before its final frame
    session_id = onboarded()
    with Stubber(connections.management_client(ENDPOINT)) as stub:
        stub.add_response("post_to_connection", {})
        stub.add_client_error("post_to_connection", "GoneException", http_status_code=410)
        send("Still there?")
    # Then the complete reply is stored with the customer's turn, and the session is disconnected
    session = ws.sessions.get_session(session_id)
    assert session is not None
    assert session.status == SessionStatus.DISCONNECTED
    assert session.disconnected_at is not None
    assert ws.connections.get_connection(CONN) is None
    assert roles(ws.turns.list_turns(session_id).items) == ["assistant", "user", "assistant"]


def test_unexpected_failure_after_storing_keeps_the_turn_and_leaks_nothing(
    ws: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(message, "responder", lambda: ExplodingResponder(RuntimeError("table arn:aws:dynamodb:...")))
    session_id = onboarded()
    send("hello")
    assert roles(ws.turns.list_turns(session_id).items) == ["assistant", "user"]
    [frame] = sent_frames(CONN)
    assert frame == message.REPLY_FAILED
    assert "arn" not in json.dumps(frame)


def test_message_before_onboarding_finished_asks_to_retry(ws: DynamoSessionStore) -> None:
    send("too early")
    assert sent_frames(CONN) == [message.NOT_READY]


def test_message_in_a_closed_session_is_refused(ws: DynamoSessionStore) -> None:
    session_id = onboarded()
    ws.sessions.update_status(session_id, SessionStatus.DELETED)
    send("anyone?")
    assert sent_frames(CONN) == [message.SESSION_CLOSED]
    assert len(ws.turns.list_turns(session_id).items) == 1


def test_message_on_another_customers_connection_is_refused(ws: DynamoSessionStore) -> None:
    session_id = onboarded("alice")
    send("hijack", customer="mallory")
    assert sent_frames(CONN) == [message.NOT_READY]
    assert len(ws.turns.list_turns(session_id).items) == 1


def test_message_without_a_customer_in_the_authorizer_context_is_refused_and_stores_nothing(
    ws: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a connection whose authorizer context names no customer (the ownership check has no subject)
    session_id = onboarded("alice")
    model = ExplodingResponder(AssertionError("the model must not be called"))
    monkeypatch.setattr(message, "responder", lambda: model)
    body = json.dumps({"action": "sendMessage", "text": "whose session is this?"})
    for context in (None, authorizer_context(None), authorizer_context(None, role="customer")):
        message.handler(ws_event("sendMessage", body=body, authorizer=context), CTX)
    # Then every message is refused with a clear frame; nothing is stored, the model is untouched
    assert sent_frames(CONN) == [message.NOT_AUTHORIZED] * 3
    assert message.NOT_AUTHORIZED["code"] == "forbidden"
    assert len(ws.turns.list_turns(session_id).items) == 1
    assert model.calls == 0


class CountingResponder:
    def __init__(self) -> None:
        self.calls = 0

    def stream(self, turns: Sequence[Turn], *, summary: Summary | None = None) -> Iterator[str | ReplyEnd]:
        self.calls += 1
        yield f"answer {self.calls}"
        yield ReplyEnd("end_turn")


@pytest.fixture
def limited(ws: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch) -> CountingResponder:
    """A stage allowing a burst of 5 per connection and 8 per customer, refilled once a minute."""
    for key, value in {
        "CHAT_CONNECTION_MESSAGES_PER_MINUTE": "1",
        "CHAT_CONNECTION_BURST": "5",
        "CHAT_CUSTOMER_MESSAGES_PER_MINUTE": "1",
        "CHAT_CUSTOMER_BURST": "8",
    }.items():
        monkeypatch.setenv(key, value)
    env.reset()
    model = CountingResponder()
    monkeypatch.setattr(message, "responder", lambda: model)
    return model


def test_a_burst_from_one_connection_reaches_the_model_at_most_the_burst_and_the_rest_are_refused(
    ws: DynamoSessionStore, limited: CountingResponder
) -> None:
    # Given alice and bob, each chatting on a connection
    alice_session = onboarded("alice", CONN)
    bob_session = onboarded("bob", OTHER_CONN)
    # When alice sends 100 messages in a burst and bob writes in the same second
    for n in range(100):
        send(f"message {n}")
    send("hello from bob", connection_id=OTHER_CONN, customer="bob")
    # Then the model answered alice five times, and told her of every other message when to retry
    alice_frames = sent_frames(CONN)
    answered = [f for f in alice_frames if f["type"] == "final"]
    refused = [f for f in alice_frames if f.get("code") == "rate_limited"]
    assert len(answered) == 5
    assert len(refused) == 95
    assert len(alice_frames) == 105  # a delta and a final per answer
    assert all(f["type"] == "error" and 1 <= f["retry_after_seconds"] <= 60 for f in refused)
    assert all(str(f["retry_after_seconds"]) in f["message"] for f in refused)
    # No refused text is stored as a turn
    contents = [t.content for t in ws.turns.list_turns(alice_session, limit=100).items]
    assert [c for c in contents if c.startswith("message ")] == [f"message {n}" for n in range(5)]
    # And bob was answered
    assert [f.get("text") for f in sent_frames(OTHER_CONN)] == ["answer 6", None]
    assert roles(ws.turns.list_turns(bob_session).items) == ["assistant", "user", "assistant"]
    assert limited.calls == 6


def test_a_customer_bucket_spans_connections(ws: DynamoSessionStore, limited: CountingResponder) -> None:
    # Given alice on two connections: each connection may send 5, alice 8 in all
    onboarded("alice", CONN)
    onboarded("alice", OTHER_CONN)
    for n in range(5):
        send(f"first {n}")
    for n in range(5):
        send(f"second {n}", connection_id=OTHER_CONN)
    # Then the second connection got three answers, then the refusal
    codes = [f.get("code", f["type"]) for f in sent_frames(OTHER_CONN)]
    assert codes == ["delta", "final"] * 3 + ["rate_limited"] * 2
    assert limited.calls == 8


def send_with_id(text: str, client_message_id: Any) -> dict[str, Any]:
    body = json.dumps({"action": "sendMessage", "text": text, "client_message_id": client_message_id})
    return message.handler(ws_event("sendMessage", body=body, authorizer=customer_context("alice")), CTX)


def test_a_resent_message_with_its_client_message_id_is_stored_and_answered_once(ws: DynamoSessionStore) -> None:
    # Given a message whose reply the client did not see
    session_id = onboarded()
    send_with_id("Is Frieren volume 3 out?", "m-1")
    # When the client sends the same frame again
    send_with_id("Is Frieren volume 3 out?", "m-1")
    # Then the transcript holds the message and its reply once, and the resend is told so
    turns = ws.turns.list_turns(session_id).items
    assert roles(turns) == ["assistant", "user", "assistant"]
    assert [f["type"] for f in sent_frames(CONN)] == ["delta", "final", "duplicate"]
    assert sent_frames(CONN)[-1] == {
        "type": "duplicate",
        "session_id": session_id,
        "client_message_id": "m-1",
        "turn_number": 2,
    }
    # And a new id is a new message
    send_with_id("And volume 4?", "m-2")
    assert roles(ws.turns.list_turns(session_id).items) == ["assistant", "user", "assistant", "user", "assistant"]


def test_a_client_message_id_reused_with_other_text_stores_nothing(ws: DynamoSessionStore) -> None:
    session_id = onboarded()
    send_with_id("Is Frieren volume 3 out?", "m-1")
    send_with_id("Something else entirely", "m-1")
    assert len(ws.turns.list_turns(session_id).items) == 3
    assert sent_frames(CONN)[-1]["code"] == "client_message_id_reused"


@pytest.mark.parametrize("client_message_id", ["", "a b", "x" * 81, 7, ["m-1"], "m\n"])
def test_a_malformed_client_message_id_is_refused_before_anything_is_stored(
    ws: DynamoSessionStore, client_message_id: Any
) -> None:
    session_id = onboarded()
    send_with_id("hello", client_message_id)
    assert len(ws.turns.list_turns(session_id).items) == 1  # the greeting only
    assert sent_frames(CONN)[-1]["code"] == "invalid_client_message_id"


def test_a_full_model_call_cap_answers_busy_with_the_wait_and_keeps_the_turn(
    ws: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a stage whose cap admits one model call a second, and a model that counts its calls
    calls: list[int] = []

    def admit() -> int:
        admission = ws.limits.take_model_call(per_second=1, buckets=1, pick=lambda n: 0)
        calls.append(admission.retry_after_seconds)
        return 0 if admission.admitted else admission.retry_after_seconds

    monkeypatch.setattr(message, "responder", lambda: CappedResponder(EchoResponder(), admit))
    session_id = onboarded()
    # When the customer sends two messages within the second
    send("Is volume 3 out?")
    send("And volume 4?")
    # Then the first is answered, the second gets a busy frame naming its turn and the wait
    turns = ws.turns.list_turns(session_id).items
    assert roles(turns) == ["assistant", "user", "assistant", "user"]
    assert turns[3].content == "And volume 4?"
    busy = sent_frames(CONN)[-1]
    assert busy == {
        "type": "busy",
        "session_id": session_id,
        "reply_to": 4,
        "retry_after_seconds": 1,
        "message": "Your message is saved, but the assistant is busy right now. Ask again in 1 seconds.",
    }
    assert calls == [0, 1]


def test_the_chats_replies_have_the_longest_replys_budget_and_deadline(
    ws: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a stage whose capacity target derives a 23 s reply deadline and a budget of 1,024 output tokens
    for name, value in {
        "BEDROCK_MODEL_ID": "anthropic.claude-3-haiku-20240307-v1:0",
        "BEDROCK_DEADLINE_SECONDS": "20",
        "REPLY_DEADLINE_SECONDS": "23",
        "REPLY_MAX_TOKENS": "1024",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("BEDROCK_FALLBACK_MODEL_ID", raising=False)
    env.reset()
    model = message.responder()
    # Then the chat's responder has them, and asks the model for at most that many tokens
    assert isinstance(model, CappedResponder)
    assert isinstance(model.inner, BedrockResponder)
    assert (model.inner.deadline_seconds, model.inner.max_output_tokens) == (23.0, 1024)
    assert model.inner.request([Turn("s", 1, Role.USER, "hi", 0, 0)])["inferenceConfig"]["maxTokens"] == 1024


def test_a_reply_the_model_stops_at_max_tokens_is_stored_and_its_final_frame_says_it_can_continue(
    ws: DynamoSessionStore, bedrock: Any
) -> None:
    # Given a model that stops at its output budget
    session_id = onboarded()
    StreamAnswers(bedrock, reply_events(LONG_REPLY, stop_reason="max_tokens"))
    # When the customer writes
    send("Recommend a shonen series")
    # Then the reply so far is stored, marked as stopped there, and the final frame offers to continue
    stored = ws.turns.list_turns(session_id).items[-1]
    assert (stored.content, stored.stopped) == (LONG_REPLY, "max_tokens")
    final = sent_frames(CONN)[-1]
    assert (final["type"], final["turn_number"], final["stopped"], final["can_continue"]) == (
        "final",
        stored.turn_number,
        "max_tokens",
        True,
    )


def test_a_reply_stores_the_tokens_the_model_reported_and_adds_them_to_the_customers_day(
    ws: DynamoSessionStore, bedrock: Any
) -> None:
    # Given a model that reports reading 1200 tokens and writing one per delta
    session_id = onboarded()
    StreamAnswers(bedrock, reply_events("Try Frieren.", input_tokens=1200))
    # When the customer writes
    send("Recommend a fantasy series")
    # Then the stored reply holds the usage, the customer's turn none, and the day's count has it
    user_turn, reply = ws.turns.list_turns(session_id).items[1:]
    written = len(model_tokens("Try Frieren."))
    assert reply.usage == TokenUsage(1200, written)
    assert user_turn.usage is None
    day = ws.table.get(keys.token_budget_key("alice", time.strftime("%Y-%m-%d", time.gmtime(ws.table.now()))))
    assert day is not None
    assert (day["tokens"], day["input_tokens"], day["output_tokens"]) == (1200 + written, 1200, written)


def test_a_withheld_reply_still_counts_the_tokens_the_model_used(ws: DynamoSessionStore, bedrock: Any) -> None:
    session_id = onboarded()
    StreamAnswers(bedrock, reply_events("Here is how to", stop_reason="guardrail_intervened", input_tokens=50))
    send("something off-limits")
    notice = ws.turns.list_turns(session_id).items[-1]
    assert notice.usage == TokenUsage(50, len(model_tokens("Here is how to")))


def test_a_customer_over_the_daily_budget_gets_a_frame_saying_when_it_resets_and_the_model_is_not_called(
    ws: DynamoSessionStore, bedrock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a budget of 1000 tokens a day, and a first reply that spent it
    monkeypatch.setenv("CHAT_DAILY_TOKEN_BUDGET", "1000")
    env.reset()
    session_id = onboarded()
    answers = StreamAnswers(bedrock, reply_events("Try Frieren.", input_tokens=1000))
    send("Recommend a fantasy series")
    # When she writes again
    send("And another?")
    # Then she is told the message was not sent and when to send it again; the model was called once
    frame = sent_frames(CONN)[-1]
    now = ws.table.now()
    midnight = (now // 86400 + 1) * 86400
    assert frame == {
        "type": "error",
        "code": "token_budget_exhausted",
        "message": "You have used today's chat allowance, so this message was not sent. "
        f"Send it again after {frame['resets_at']} (midnight UTC), when the allowance resets.",
        "retry_after_seconds": midnight - now,
        "resets_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(midnight)),
    }
    assert len(answers.requests) == 1
    assert [t.content for t in ws.turns.list_turns(session_id).items][1:] == [
        "Recommend a fantasy series",
        "Try Frieren.",
    ]


def test_two_racing_sends_of_one_message_call_the_model_once(
    ws: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a message sent and answered, and a resend whose admission read came before the first was stored
    session_id = onboarded()
    send_with_id("Is Frieren volume 3 out?", "m-1")
    real = DynamoSessionStore.__init__
    missed: list[bool] = []

    def store_that_misses_once(self: DynamoSessionStore, *args: Any, **kwargs: Any) -> None:
        real(self, *args, **kwargs)
        found = self.budgets.sent_message

        def late(customer_id: str, client_message_id: str) -> Any:
            if not missed:
                missed.append(True)
                return None
            return found(customer_id, client_message_id)

        self.budgets.sent_message = late  # type: ignore[method-assign]

    monkeypatch.setattr(DynamoSessionStore, "__init__", store_that_misses_once)
    env.reset()
    # When it arrives
    send_with_id("Is Frieren volume 3 out?", "m-1")
    # Then the resend is a duplicate of the first: one user turn, one reply
    assert missed == [True]
    assert roles(ws.turns.list_turns(session_id).items) == ["assistant", "user", "assistant"]
    assert sent_frames(CONN)[-1] == {
        "type": "duplicate",
        "session_id": session_id,
        "client_message_id": "m-1",
        "turn_number": 2,
    }
