"""JSON responses and the error shape of every REST handler, in one place.

Every error answers ``{"error": {"code", "message", "request_id"}}``: the code names the kind of
error (``ValidationError``, ``NotFound``, a store error's class), the message says what to fix,
the request id lets support find the log line. Nothing internal is ever in a 5xx body.
"""

from __future__ import annotations

import json
from typing import Any, Final

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types

from lambdas.shared.errors import StoreError

INTERNAL_ERROR: Final = "internal error; quote the request id"


def json_response(status: int, body: Any) -> Response:
    return Response(status_code=status, content_type=content_types.APPLICATION_JSON, body=json.dumps(body))


def error_response(resolver: APIGatewayRestResolver, status: int, code: str, message: str) -> Response:
    request_id = str(resolver.current_event.request_context.request_id or "")
    return json_response(status, {"error": {"code": code, "message": message, "request_id": request_id}})


def register_common_error_handlers(resolver: APIGatewayRestResolver, logger: Logger) -> None:
    """Store errors keep their 4xx status (5xx become an internal error), anything unexpected is a
    500 without internals, an unknown route is a 404. Handlers add their own specific errors."""

    @resolver.exception_handler(StoreError)
    def on_store_error(err: StoreError) -> Response:
        if 400 <= err.http_status < 500:
            return error_response(resolver, err.http_status, type(err).__name__, str(err))
        logger.exception("store error")
        return error_response(resolver, 500, "InternalError", INTERNAL_ERROR)

    @resolver.exception_handler(Exception)
    def on_unexpected(_: Exception) -> Response:
        logger.exception("unhandled error")
        return error_response(resolver, 500, "InternalError", INTERNAL_ERROR)

    @resolver.not_found
    def on_unknown_route(_: Exception) -> Response:
        return error_response(resolver, 404, "NotFound", "no such route")
