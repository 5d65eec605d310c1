"""JSON responses and the error mapping of every REST handler, in one place.

Every error answers ``{"error": {"code", "message", "request_id"}}``: the code names the kind of
error (``Forbidden``, ``NotFound``, a store error's class; a validation error has the code API
Gateway's own validator answers with, ``BAD_REQUEST_BODY`` or ``BAD_REQUEST_PARAMETERS``), the message says
what to fix, the request id lets support find the log line. Nothing internal is ever in a 5xx
body. A handler raises :class:`~lambdas.api.validation.ValidationError` (400), :class:`Forbidden`
(403) or a store error (its own 4xx status) and registers :func:`register_error_handlers` once.
"""

from __future__ import annotations

import json
from typing import Any, Final

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types

from lambdas.api.validation import BODY_ERROR, PARAMETERS_ERROR, ValidationError
from lambdas.shared.errors import InvalidInput, NotFound, StoreError

INTERNAL_ERROR: Final = "internal error; quote the request id"
FORBIDDEN: Final = "this role may not do that"


class Forbidden(Exception):
    """The caller may not call this route, or not on this record; the message says which."""

    def __init__(self, message: str = FORBIDDEN) -> None:
        super().__init__(message)


def json_response(status: int, body: Any) -> Response:
    return Response(status_code=status, content_type=content_types.APPLICATION_JSON, body=json.dumps(body))


def error_response(resolver: APIGatewayRestResolver, status: int, code: str, message: str) -> Response:
    request_id = str(resolver.current_event.request_context.request_id or "")
    return json_response(status, {"error": {"code": code, "message": message, "request_id": request_id}})


def register_error_handlers(resolver: APIGatewayRestResolver, logger: Logger) -> None:
    """The one error mapping: validation 400, forbidden 403, store errors keep their 4xx status
    (5xx become an internal error), anything unexpected is a 500 without internals, an unknown
    route is a 404."""

    @resolver.exception_handler(ValidationError)
    def on_validation(err: ValidationError) -> Response:
        return error_response(resolver, 400, err.code, str(err))

    @resolver.exception_handler(Forbidden)
    def on_forbidden(err: Forbidden) -> Response:
        return error_response(resolver, 403, "Forbidden", str(err))

    @resolver.exception_handler(NotFound)
    def on_not_found(err: NotFound) -> Response:
        return error_response(resolver, 404, "NotFound", str(err))

    @resolver.exception_handler(StoreError)
    def on_store_error(err: StoreError) -> Response:
        if isinstance(err, InvalidInput):  # bad input the store caught: the same 400 codes as validation
            return error_response(resolver, 400, PARAMETERS_ERROR if err.parameter else BODY_ERROR, str(err))
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

    def refuse_control_characters(app: APIGatewayRestResolver, next_middleware: Any) -> Response:
        # The resolver routes on the path with Python regexes, where "$" matches before a final
        # newline: "/admin/agents/%0A" would reach the listing, not the item route API Gateway chose.
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in app.current_event.path):
            return error_response(app, 400, PARAMETERS_ERROR, "the path holds control characters")
        response: Response = next_middleware(app)
        return response

    resolver.use(middlewares=[refuse_control_characters])
