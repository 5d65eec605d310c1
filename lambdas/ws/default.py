"""``$default``: any frame whose ``action`` matches no route gets an error frame naming the valid ones.

The route returns its response to the client (a route response is configured), so no
management API call and no permission is needed. Nor the X-Ray SDK: with no AWS call to
trace, Lambda's active tracing records all there is, the invocation.
"""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools import Logger

from lambdas.shared.logs import masked_formatter
from lambdas.ws.frames import unknown_action_frame

logger = Logger(logger_formatter=masked_formatter())


def _action_of(body: Any) -> object:
    if not isinstance(body, str):
        return None
    try:
        frame = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return frame.get("action") if isinstance(frame, dict) else None


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return {"statusCode": 200, "body": json.dumps(unknown_action_frame(_action_of(event.get("body"))))}
