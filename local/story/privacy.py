"""What the story's people write about themselves: contact details no log line or analytics record may hold.

The customer's chat (``conversation.chat``) carries an e-mail address and two phone numbers, and the
agent's reply (``handoff.agent_replies``) a phone number, as real customers and agents write them.
The conversation itself keeps them (the table's turns, the archive and the exports hold what was
said); ``tests/e2e/test_story.py`` scans everything else the story leaves behind (every function's
log lines, every other bucket's objects in every version, the analytics and audit records
Firehose delivered) for them and for the texts themselves, and fails on any.
"""

from __future__ import annotations

from typing import Final

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


def chat_text(number: int) -> str:
    """The text of the chat's message ``number``."""
    return CONTACT_MESSAGES.get(number, f"message {number} about Frieren")
