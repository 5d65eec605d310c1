"""Personal data in the story: what its people write about themselves, and the step that shows the model
never reads it.

* The contact details (``CUSTOMER_EMAIL``, ``CUSTOMER_PHONES``, ``AGENT_PHONE``, and ``PRIVATE_CUSTOMER``'s):
  the customer's chat (``conversation.chat``) carries an e-mail address and two phone numbers, and
  the agent's reply (``handoff.agent_replies``) a phone number, as real customers and agents write
  them. The conversation itself keeps them (the table's turns, the archive and the exports hold
  what was said); ``tests/e2e/test_story.py`` scans everything else the story leaves behind (every
  function's log lines, every other bucket's objects in every version, the analytics and audit
  records Firehose delivered) for them and for the texts themselves, and fails on any.
* The privacy step (:class:`PrivacySteps`): a customer gives their e-mail address and phone number in
  chat; the model reads placeholders (the stage's guardrail masks them on Bedrock's side), while
  the stored turn, which agents read, keeps the customer's own words.

The step is a mixin of :class:`local.story.Story`, which provides the stage, the config, the tokens
and the step plumbing declared here.
"""

from __future__ import annotations

import time
from typing import Final

from local.story.base import StoryParts, expect
from local.story.chat import open_chat

#: The customer's e-mail address, written in a chat message.
CUSTOMER_EMAIL: Final = "alice.moreau+manga@example.org"
#: The customer's phone numbers, written in another chat message: international and national format.
CUSTOMER_PHONES: Final = ("+44 20 7946 0958", "(555) 010-0199")
#: The agent's direct line, written in the agent's reply.
AGENT_PHONE: Final = "+1 202-555-0173"

#: The chat's messages that carry contact details, by their number in the chat (1-based).
CONTACT_MESSAGES: Final = {
    4: f"message 4 about Frieren: please write to {CUSTOMER_EMAIL}",
    7: f"message 7 about Frieren: or call me on {CUSTOMER_PHONES[0]} or {CUSTOMER_PHONES[1]}",
}
#: The agent's reply to the customer.
AGENT_REPLY: Final = f"Hi, I am Seven. Volume 3? My direct line is {AGENT_PHONE}."

#: The customer who gives their contact details in the privacy step, and what they write.
PRIVATE_CUSTOMER: Final = "pia"
PRIVATE_EMAIL: Final = "pia.sato@example.jp"
PRIVATE_PHONE: Final = "+81 90 1234 5678"
CONTACT_MESSAGE: Final = f"Please tell me when Frieren volume 4 is out: {PRIVATE_EMAIL} or {PRIVATE_PHONE}"
MASKED_MESSAGE: Final = "Please tell me when Frieren volume 4 is out: {EMAIL} or {PHONE}"


def chat_text(number: int) -> str:
    """The text of the chat's message ``number``."""
    return CONTACT_MESSAGES.get(number, f"message {number} about Frieren")


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
