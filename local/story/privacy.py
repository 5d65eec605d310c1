"""The story's privacy step: a customer gives their e-mail address and phone number in chat; the model
reads placeholders (the stage's guardrail masks them on Bedrock's side), while the stored turn, which
agents read, keeps the customer's own words.

A mixin of :class:`local.story.Story`, which provides the stage, the config, the tokens and the
step plumbing declared here.
"""

from __future__ import annotations

import time

from local.story.base import StoryParts, expect
from local.story.chat import open_chat

#: The customer who gives their contact details.
PRIVATE_CUSTOMER = "pia"
CONTACT_MESSAGE = "Please tell me when Frieren volume 4 is out: pia.sato@example.jp or +81 90 1234 5678"
MASKED_MESSAGE = "Please tell me when Frieren volume 4 is out: {EMAIL} or {PHONE}"


class PrivacySteps(StoryParts):
    """Personal data stays out of the model's reach (see the module docstring)."""

    def customer_gives_contact_details(self) -> None:
        started, step = time.monotonic(), self.step("A customer gives their e-mail and phone; the model reads neither")
        chat = open_chat(self.stage, PRIVATE_CUSTOMER)
        calls_before = len(self.stage.bedrock.calls)
        chat.say(CONTACT_MESSAGE)
        step.calls.append(f"sendMessage as {PRIVATE_CUSTOMER}: an e-mail address and a phone number")
        calls = self.stage.bedrock.calls[calls_before:]
        expect(len(calls) == 1 and calls[0].guardrail is not None, f"the reply was not screened: {calls}")
        expect(calls[0].prompt == MASKED_MESSAGE, f"the model read {calls[0].prompt!r}")
        step.calls.append(f"ConverseStream naming guardrail {calls[0].guardrail}: the model read {calls[0].prompt!r}")
        stored = [t for t in self.store().turns.list_turns(chat.session_id).items if t.role == "user"]
        expect([t.content for t in stored] == [CONTACT_MESSAGE], f"the stored turns are {[t.content for t in stored]}")
        step.changes.append("the customer's turn stored as written (agents read it); the model saw placeholders")
        # The turns travel the table's stream like any change (analytics, the audit trail)
        pumped = self.stage.settle(wait_executions=False)
        step.calls.append(f"stream and queues settled ({pumped} records and messages moved)")
        self.done(step, started)
