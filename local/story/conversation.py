"""The story's conversation: sign-ins, a session over REST, the WebSocket connection, a chat, its summary.

Bedrock is stubbed at the client (``embedded.services.bedrock``): ``stub_answer`` answers chat with the
echo responder's reply (replies stay deterministic) and summarisation requests with :data:`STUB_SUMMARY`.
The chat checks the streamed replies against the turns stored; the summary step checks that the model was
asked exactly the first turns and that its answer is what the table holds.

A mixin of :class:`local.story.Story`, which provides the stage, the config, the tokens, the REST and
WebSocket plumbing and the step bookkeeping declared in ``StoryParts``.
"""

from __future__ import annotations

import time
from typing import Any

from embedded.services.bedrock import ConverseCall, echo_answer
from lambdas.events import summary as summary_generator
from local.story.base import StoryParts, expect, present, streamed_replies, token_subject
from local.story.chat import open_chat
from local.story.export import REQUESTER_EMAIL
from local.story.privacy import chat_text

#: What the stubbed model answers to every summarisation request.
STUB_SUMMARY = "Alice is looking for Frieren and asked about it five times; nothing is decided yet."
_ROLES = ("user", "assistant", "agent", "system")


def stub_answer(request: dict[str, Any]) -> str:
    """The stubbed model: a fixed summary for the summary generator, the echo reply for chat."""
    system = [block.get("text") for block in request.get("system", [])]
    return STUB_SUMMARY if system == [summary_generator.SYSTEM_PROMPT] else echo_answer(request)


def is_summarisation(call: ConverseCall) -> bool:
    return call.system == (summary_generator.SYSTEM_PROMPT,)


def transcript_lines(call: ConverseCall) -> list[str]:
    """The ``role: text`` lines of the conversation segment a summarisation prompt carries."""
    return [line for line in call.prompt.splitlines() if line.split(": ", 1)[0] in _ROLES]


class ConversationSteps(StoryParts):
    """The customer's first conversation, up to its first summary (see the module docstring)."""

    def mint_tokens(self) -> None:
        started, step = time.monotonic(), self.step("Sign in a customer, a second customer, an agent and an admin")
        for who, role in (("alice", "customer"), ("mallory", "customer"), ("agent-7", "agent")):
            self.sign_in(who, role)
        self.sign_in("root", "admin", email=REQUESTER_EMAIL)
        step.calls.append(
            f"cognito-idp:InitiateAuth USER_PASSWORD_AUTH x{len(self.tokens)} (pool {self.directory.pool_id})"
        )
        step.changes.append(f"ID tokens (RS256, the pool's JWKS) for {', '.join(self.tokens)}")
        self.values["early_tokens"] = dict(self.tokens)  # expired by the time the refusals step runs
        self.done(step, started)

    def create_session(self) -> None:
        started, step = time.monotonic(), self.step("Create a session over REST")
        response = self.rest(
            step, "POST", "/sessions", "alice", body={"customer_id": token_subject(self.tokens["alice"])}
        )
        expect(response.status == 201, f"POST /sessions answered {response.status}: {response.body}")
        body = response.json()
        self.session_id = str(body.get("session_id") or body.get("id"))
        session = self.store().sessions.get_session(self.session_id)
        expect(session is not None and session.status == "active", f"no active session {self.session_id}")
        step.changes.append(f"session {self.session_id} (active) in the table")
        self.done(step, started)

    def connect(self) -> None:
        started, step = time.monotonic(), self.step("Connect over WebSocket (authorizer, onboarding workflow)")
        ws = self.stage.websocket
        self.connection_id = ws.connect(query={"token": self.tokens["alice"], "session_id": self.session_id})
        step.calls.append(f"$connect ?token=...&session_id={self.session_id} -> {self.connection_id}")
        self.stage.settle(until=lambda: bool(self.frames()), timeout=20)
        welcome = self.frames()[0]
        expect(welcome.get("type") == "welcome", f"first frame is not a welcome: {welcome}")
        session = self.store().sessions.get_session(self.session_id)
        expect(session is not None and session.connection_id == self.connection_id, "connection not recorded")
        # The greeting is the session's first turn (the summary of turns 1..N starts with it).
        self.values["transcript"] = {int(welcome["turn_number"]): f"assistant: {welcome.get('message')}"}
        step.changes.append(f"frame {welcome.get('type')}; session.connection_id={self.connection_id}")
        self.done(step, started)

    def model_reads(self, text: str) -> str:
        """``text`` as the model reads it: anonymized by the stage's guardrail, when it has one."""
        policies = list(self.stage.bedrock.guardrails.values())
        return policies[0].screen_input(text)[0] if policies else text

    def chat(self, count: int = 10) -> None:
        started, step = time.monotonic(), self.step(f"{count} messages (Bedrock stubbed at the client: echo replies)")
        before, calls_before = len(self.frames()), len(self.stage.bedrock.calls)
        texts = [chat_text(i) for i in range(1, count + 1)]
        for text in texts:
            self.stage.websocket.send(self.connection_id, {"action": "sendMessage", "text": text})
        step.calls.append(f"sendMessage x{count}")
        # The model reads, and so echoes, what the stage's guardrail leaves of each message: the
        # contact details of messages 4 and 7 as placeholders
        seen = [self.model_reads(text) for text in texts]
        replies = streamed_replies(self.frames()[before:])
        expect(
            [r.text for r in replies] == [f"You said: {text}" for text in seen]
            and all(r.end is not None and r.end["type"] == "final" for r in replies),
            f"{count} messages got these assistant replies: {self.frames()[before:]}",
        )
        converse = self.stage.bedrock.calls[calls_before:]
        model_ids = {c.model_id for c in converse}
        expect(
            len(converse) == count
            and model_ids == {self.config.bedrock_model_id}
            and all(c.streamed for c in converse),
            f"{count} messages made {len(converse)} ConverseStream calls on {sorted(model_ids)}",
        )
        expect(
            [c.prompt for c in converse] == seen,
            f"ConverseStream was not asked the messages: {[c.prompt for c in converse]}",
        )
        # Streamed in batches: each reply took fewer PostToConnection calls (its frames) than its tokens
        posts = [(r.frames, c.tokens) for r, c in zip(replies, converse, strict=True)]
        expect(
            all(frames < model_tokens for frames, model_tokens in posts),
            f"replies took as many posts as tokens or more (posts, tokens): {posts}",
        )
        step.calls.append(
            f"bedrock-runtime:ConverseStream x{len(converse)} on {self.config.bedrock_model_id} (stub); "
            f"PostToConnection per reply {max(f for f, _ in posts)} at most, for {min(t for _, t in posts)}+ tokens"
        )
        # The transcript by turn number, as the table must hold it: each reply follows its message,
        # and the deltas, joined, are exactly the stored reply.
        transcript: dict[int, str] = self.values.setdefault("transcript", {})
        store = self.store()
        for text, reply in zip(texts, replies, strict=True):
            number = present(reply.turn_number, "the reply's turn number")
            transcript[reply.reply_to] = f"user: {text}"
            transcript[number] = f"assistant: {reply.text}"
            stored = store.turns.turns_between(self.session_id, number, number)
            expect(
                [t.content for t in stored] == [reply.text],
                f"turn {number} does not store the streamed reply {reply.text!r}: {stored}",
            )
        session = self.store().sessions.get_session(self.session_id)
        session = present(session, "session")
        step.changes.append(
            f"{len(replies)} streamed replies 'You said: ...' (deltas + final), each stored once; "
            f"turn_count={session.turn_count}"
        )
        self.values["turns_after_chat"] = session.turn_count
        self.done(step, started)

    def summary(self) -> None:
        started, step = (
            time.monotonic(),
            self.step("The stream delivers the turns; the 10th turn triggers a summary (Bedrock stubbed)"),
        )
        calls_before = len(self.stage.bedrock.calls)
        moved = self.stage.settle(timeout=30)
        step.calls.append(f"stream pump: {moved} invocations")
        items = self.stage.client("dynamodb").query(
            TableName=self.table.ref,
            KeyConditionExpression="PK = :pk AND begins_with(SK, :summary)",
            ExpressionAttributeValues={":pk": {"S": f"SESSION#{self.session_id}"}, ":summary": {"S": "SUMMARY#"}},
        )["Items"]
        summaries = {int(i["summary_number"]["N"]): i for i in items}
        windows = [(int(i["window_start"]["N"]), int(i["window_end"]["N"])) for i in items]
        interval = self.config.summary_interval
        first = summaries.get(1)
        expect(
            first is not None and (int(first["window_start"]["N"]), int(first["window_end"]["N"])) == (1, interval),
            f"no SUMMARY#1 of turns 1..{interval}: {windows}",
        )
        first = present(first, "first")
        expect(
            first["summary_text"]["S"] == STUB_SUMMARY,
            f"SUMMARY#1 does not hold the model's summary (extractive fallback?): {first['summary_text']['S'][:200]}",
        )
        # Exactly one Converse call summarised turns 1..N, on the stage's model, with exactly those turns.
        converse = [c for c in self.stage.bedrock.calls[calls_before:] if is_summarisation(c)]
        transcript = self.values["transcript"]
        # (as the model reads them: the stage's guardrail screens the summary's input too)
        lines = [transcript.get(n) for n in range(1, interval + 1)]
        expected = [None if line is None else self.model_reads(line) for line in lines]
        window_calls = [c for c in converse if transcript_lines(c) == expected]
        expect(
            len(window_calls) == 1,
            f"{len(window_calls)} summarisation calls for turns 1..{interval}; "
            f"segments sent: {[transcript_lines(c) for c in converse]}",
        )
        expect(
            window_calls[0].model_id == self.config.bedrock_model_id,
            f"the summary used model {window_calls[0].model_id}, not {self.config.bedrock_model_id}",
        )
        # Every summary item came from one call (no retries, no fallback); later ones roll the previous summary in.
        expect(len(converse) == len(items), f"{len(converse)} summarisation calls for {len(items)} summaries")
        rolled = [c for c in converse if c is not window_calls[0]]
        expect(
            all(STUB_SUMMARY in c.prompt for c in rolled), "a later summary was not given the previous one as context"
        )
        step.calls.append(
            f"bedrock-runtime:Converse x{len(converse)} from {window_calls[0].caller or 'the summary generator'} "
            f"on {window_calls[0].model_id} (stub)"
        )
        step.changes.append(f"summaries of turns {', '.join(f'{a}..{b}' for a, b in windows)}")
        step.changes.append(f"SUMMARY#1 = {STUB_SUMMARY!r}")
        self.done(step, started)

    def customer_rewinds(self) -> None:
        """A customer edits her question and asks again: what followed is taken back and answered anew."""
        started, step = time.monotonic(), self.step("A customer edits her message, then asks for another answer")
        chat = open_chat(self.stage, "rin")
        for text in ("Is Frieren volume 3 out?", "And volume 4?"):
            chat.say(text)
        step.calls.append("sendMessage x2 as rin (turns 2..5)")
        rewind = {"action": "rewind", "turn_number": 2, "text": "Is Frieren volume 5 out?", "client_message_id": "rw-1"}
        chat.new_frames()
        self.stage.websocket.send(chat.connection_id, rewind)
        frames = chat.new_frames()
        replies = streamed_replies(frames)
        expect(
            frames[:1]
            == [{"type": "rewound", "session_id": chat.session_id, "turn_number": 2, "removed_turns": [3, 4, 5]}]
            and [r.text for r in replies] == ["You said: Is Frieren volume 5 out?"],
            f"the rewind answered {frames}",
        )
        self.stage.websocket.send(chat.connection_id, rewind)  # the client resends it
        expect(chat.new_frames()[0]["type"] == "duplicate", "a resent rewind was not answered as a duplicate")
        step.calls.append("rewind turn 2 with new text (client_message_id rw-1), then the same again")
        response = self.stage.rest.request(
            "POST",
            f"/sessions/{chat.session_id}/rewind",
            headers={**chat.auth(), "Idempotency-Key": "rw-rest-1"},
            body={"turn_number": 2},
        )
        expect(response.status == 200, f"POST /sessions/{{id}}/rewind answered {response.status}: {response.body}")
        reply = response.json()["reply"]
        turns = self.store().turns.list_turns(chat.session_id).items
        expect(
            [(t.turn_number, t.content) for t in turns[1:]] == [(2, "Is Frieren volume 5 out?"), (3, reply["text"])],
            f"the rewound transcript is {[(t.turn_number, t.content) for t in turns]}",
        )
        step.calls.append("POST /sessions/{id}/rewind {turn_number: 2} (Idempotency-Key): answered whole")
        # The removed turns travel the table's stream like any change (analytics, the audit trail)
        pumped = self.stage.settle(wait_executions=False)
        step.calls.append(f"stream and queues settled ({pumped} records and messages moved)")
        step.changes.append(
            "turns 3..5 removed in one transaction, turn 2 edited and answered (streamed), then answered again "
            f"over REST as turn {reply['turn_number']}; the resent rewind changed nothing"
        )
        self.done(step, started)
