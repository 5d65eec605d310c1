"""lambdas.api.responses: one error mapping for every REST route, never leaking internals."""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import APIGatewayRestResolver

from embedded.events import lambda_context, rest_proxy_event
from lambdas.api.responses import FORBIDDEN, INTERNAL_ERROR, Forbidden, json_response, register_error_handlers
from lambdas.shared.errors import Conflict, SessionNotFound


def _resolver(error: Exception) -> APIGatewayRestResolver:
    resolver = APIGatewayRestResolver()

    @resolver.get("/boom")
    def boom() -> Any:
        raise error

    register_error_handlers(resolver, Logger(service="test"))
    return resolver


def _call(error: Exception) -> tuple[int, dict[str, Any]]:
    event = rest_proxy_event("GET", "/boom", "/boom", request_id="req-1")
    response = _resolver(error).resolve(event, lambda_context("responses"))
    return int(response["statusCode"]), json.loads(response["body"])["error"]


def test_store_errors_keep_their_status_and_name_their_class() -> None:
    assert _call(SessionNotFound("s-1"))[0] == 404
    status, error = _call(Conflict("it moved"))
    assert (status, error["code"], error["message"], error["request_id"]) == (409, "Conflict", "it moved", "req-1")
    assert _call(Forbidden()) == (403, {"code": "Forbidden", "message": FORBIDDEN, "request_id": "req-1"})
    assert _call(Forbidden("not your handoff"))[1]["message"] == "not your handoff"


def test_an_unexpected_error_is_a_500_that_says_nothing_of_its_cause() -> None:
    status, error = _call(RuntimeError("arn:aws:dynamodb:secret"))
    assert (status, error["message"]) == (500, INTERNAL_ERROR)


def test_a_json_response_is_json() -> None:
    response = json_response(201, {"a": 1})
    assert (response.status_code, json.loads(str(response.body))) == (201, {"a": 1})


def test_an_error_goes_out_labelled_as_json() -> None:
    # Clients parse the error body by its Content-Type; API Gateway passes the handler's header on
    event = rest_proxy_event("GET", "/boom", "/boom", request_id="req-1")
    response = _resolver(Conflict("it moved")).resolve(event, lambda_context("responses"))
    headers = {k.lower(): v for k, v in (response.get("multiValueHeaders") or {}).items()}
    headers |= {k.lower(): [v] for k, v in (response.get("headers") or {}).items()}
    assert headers["content-type"] == ["application/json"]
