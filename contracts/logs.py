"""Log lines the stacks count: a metric filter matches the handler's message exactly, so both read it here."""

from __future__ import annotations

from typing import Final

#: The REST authorizer's line for a token it refuses (the refusal fails the invocation on purpose,
#: for API Gateway to answer 401; the stage counts these lines to leave them out of its errors alarm).
TOKEN_REFUSED: Final = "token refused"  # noqa: S105 - a log message, not a secret
