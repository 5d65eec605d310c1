"""The story's limit steps: one customer's burst is refused with a frame while another is answered, and a
customer who has spent the day's token budget is told when it resets.

A mixin of :class:`local.story.Story`, which provides the stage, the config, the tokens and
the step plumbing declared here.
"""

from __future__ import annotations

import math
import time
from typing import Any

from lambdas.shared.records import Role, TokenUsage
from local.story.base import Step, StoryParts, expect, streamed_replies, token_subject

#: Messages one connection sends as fast as the client can: well over any stage's burst.
BURST = 30


class LimitSteps(StoryParts):
    """The chat limits on the deployed stage (see the module docstring)."""

    def _customer_connection(self, step: Step, who: str) -> tuple[str, str]:
        """A new customer's token, connection and session id (after the welcome frame)."""
        self.sign_in(who, "customer")
        ws = self.stage.websocket
        connection_id = ws.connect(query={"token": self.tokens[who]})
        self.stage.settle(until=lambda: bool(ws.frames(connection_id)), timeout=20)
        welcome = ws.frames(connection_id)[0]
        expect(welcome.get("type") == "welcome", f"{who}'s first frame is not a welcome: {welcome}")
        step.calls.append(f"$connect as {who} -> {connection_id}")
        return connection_id, str(welcome["session_id"])

    def burst_is_refused(self) -> None:
        c = self.config
        started, step = (
            time.monotonic(),
            self.step(
                f"A burst of {BURST} messages from one connection: {c.chat_connection_burst} answered, the rest "
                "refused with when to retry; another customer is answered in the same second"
            ),
        )
        ws = self.stage.websocket
        carol, carol_session = self._customer_connection(step, "carol")
        dave, dave_session = self._customer_connection(step, "dave")
        before, calls_before = len(ws.frames(carol)), len(self.stage.bedrock.calls)
        burst_started = self.stage.clock()
        for n in range(BURST):
            ws.send(carol, {"action": "sendMessage", "text": f"burst {n}"})
        ws.send(dave, {"action": "sendMessage", "text": "Is Frieren volume 3 out?"})
        elapsed = self.stage.clock() - burst_started
        step.calls.append(f"sendMessage x{BURST} as carol, then x1 as dave ({elapsed:.1f}s)")

        frames = ws.frames(carol)[before:]
        answered = streamed_replies(frames)
        refused = [f for f in frames if f.get("type") == "error" and f.get("code") == "rate_limited"]
        # The bucket refills while the burst is sent: at most one more message per refill interval.
        most = c.chat_connection_burst + math.ceil(elapsed * c.chat_connection_messages_per_minute / 60)
        reply_frames = sum(r.frames for r in answered)
        expect(len(frames) == reply_frames + len(refused), f"carol's {BURST} messages got other frames too: {frames}")
        expect(
            c.chat_connection_burst <= len(answered) <= most and len(answered) + len(refused) == BURST,
            f"carol: {len(answered)} answered and {len(refused)} refused (burst {c.chat_connection_burst}, "
            f"at most {most}): {frames}",
        )
        expect(
            all(isinstance(f.get("retry_after_seconds"), int) and f["retry_after_seconds"] >= 1 for f in refused),
            f"a refusal without retry_after_seconds: {refused[:3]}",
        )
        asked = [call.prompt for call in self.stage.bedrock.calls[calls_before:]]
        burst_asked = [p for p in asked if str(p).startswith("burst ")]
        expect(len(burst_asked) == len(answered), f"the model saw {len(burst_asked)} of carol's messages")
        stored = self._user_texts(carol_session)
        expect(
            stored == [r.text.removeprefix("You said: ") for r in answered],
            f"carol's stored turns are not exactly the answered messages: {stored}",
        )
        dave_replies = streamed_replies(ws.frames(dave))
        expect(
            [r.text for r in dave_replies] == ["You said: Is Frieren volume 3 out?"],
            f"dave was not answered during carol's burst: {ws.frames(dave)}",
        )
        expect(self._user_texts(dave_session) == ["Is Frieren volume 3 out?"], "dave's message is not stored")
        # The table's stream carries the stored turns and the buckets' writes on (analytics, audit, summary)
        moved = self.stage.settle(timeout=30, wait_executions=False)
        step.calls.append(f"stream pump: {moved} invocations")
        retry = max(f["retry_after_seconds"] for f in refused)
        step.changes.append(
            f"carol: {len(answered)} replies, {len(refused)} rate_limited frames (retry_after_seconds up to "
            f"{retry}); {len(answered)} user turns stored; dave: 1 reply"
        )
        self.done(step, started)

    def spent_budget_is_refused_until_midnight(self) -> None:
        budget = self.config.token_budget.daily_tokens_per_customer
        started, step = (
            time.monotonic(),
            self.step(
                f"A customer's replies count the model's tokens against the day's budget ({budget:,}); "
                "once it is spent, a message is refused with when it resets, and nothing reaches the model"
            ),
        )
        ws, store = self.stage.websocket, self.store()
        gina, session_id = self._customer_connection(step, "gina")
        customer_id = token_subject(self.tokens["gina"])
        ws.send(gina, {"action": "sendMessage", "text": "Is Frieren volume 3 out?", "client_message_id": "m-1"})
        reply = store.turns.list_turns(session_id, limit=100).items[-1]
        usage = reply.usage
        expect(reply.role == Role.ASSISTANT and usage is not None, f"the reply holds no usage: {reply}")
        step.calls.append("sendMessage as gina (client_message_id m-1)")
        used = TokenUsage(0, 0) if usage is None else usage
        # The rest of the day's budget goes on replies elsewhere (written to her day's item directly)
        store.budgets.spend_tokens(customer_id, TokenUsage(budget - used.total, 0))
        before, calls_before = len(ws.frames(gina)), len(self.stage.bedrock.calls)
        ws.send(gina, {"action": "sendMessage", "text": "And volume 4?", "client_message_id": "m-2"})
        step.calls.append("sendMessage as gina (client_message_id m-2), her budget spent")
        frames = ws.frames(gina)[before:]
        expect(
            [f.get("code") for f in frames] == ["token_budget_exhausted"]
            and str(frames[0].get("resets_at", "")).endswith("T00:00:00Z")
            and int(frames[0].get("retry_after_seconds", 0)) >= 1,
            f"gina was not told her budget is spent and when it resets: {frames}",
        )
        expect(len(self.stage.bedrock.calls) == calls_before, "the model was called over the budget")
        expect(self._user_texts(session_id) == ["Is Frieren volume 3 out?"], "a refused message was stored")
        # The table's stream carries her stored turns on (analytics, audit); the budget's item stays out of it
        moved = self.stage.settle(timeout=30, wait_executions=False)
        step.calls.append(f"stream pump: {moved} invocations")
        step.changes.append(
            f"gina: 1 reply ({used.input_tokens} input + {used.output_tokens} output tokens on its "
            f"turn), then token_budget_exhausted until {frames[0]['resets_at']}; nothing stored"
        )
        self.done(step, started)

    def _user_texts(self, session_id: str) -> list[Any]:
        turns = self.store().turns.list_turns(session_id, limit=100).items
        return [t.content for t in turns if t.role == Role.USER]
