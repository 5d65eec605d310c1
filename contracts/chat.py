"""The WebSocket chat's custom route keys (the ``action`` of a client frame).

The API stack creates one route per key; ``lambdas.ws.frames`` parses frames by the same names.
"""

from __future__ import annotations

from typing import Final

SEND_MESSAGE: Final = "sendMessage"
#: Take back what followed one of the customer's messages (optionally edited) and answer it again.
REWIND: Final = "rewind"
#: Ask for the rest of the newest reply, which stopped before the model had finished it.
CONTINUE: Final = "continue"
ACTIONS: Final = (SEND_MESSAGE, REWIND, CONTINUE)
