"""The StartExecution request template, evaluated: safe name and input for any request text."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from constructs_lib.sfn_start_integration import (
    CLIENT_ERROR_TEMPLATE,
    InputField,
    start_execution_template,
)
from embedded.services.vtl import escape_javascript, mapping_scope, render

ARN = "arn:aws:states:us-east-1:123456789012:stateMachine:Handoff"
FIELDS = {
    "session_id": InputField.path("id"),
    "reason": InputField.body("reason"),
    "priority": InputField.body("priority", default_json='"normal"'),
    "requested_by": InputField.authorizer("sub"),
    "role": InputField.authorizer("role"),
}
TEMPLATE = start_execution_template(ARN, FIELDS)


def _start(
    body: str,
    *,
    path_id: str = "0b7c",
    headers: dict[str, str] | None = None,
    sub: str = "alice",
    role: str = "customer",
    request_id: str = "req-1",
) -> dict[str, Any]:
    """The StartExecution request API Gateway would send, parsed (fails if it is not JSON)."""
    context = {"requestId": request_id, "authorizer": {"sub": sub, "role": role}}
    rendered = render(TEMPLATE, mapping_scope(body=body, path={"id": path_id}, header=headers or {}, context=context))
    request: dict[str, Any] = json.loads(rendered)
    return request


def test_builds_name_and_input_from_the_request() -> None:
    request = _start(json.dumps({"reason": "billing", "priority": "high"}), headers={"Idempotency-Key": "key-1"})
    assert request["stateMachineArn"] == ARN
    assert request["name"] == "key-1"
    assert json.loads(request["input"]) == {
        "session_id": "0b7c",
        "reason": "billing",
        "priority": "high",
        "requested_by": "alice",
        "role": "customer",
    }


def test_name_falls_back_to_the_lowercase_header_then_the_request_id() -> None:
    body = json.dumps({"reason": "billing"})
    assert _start(body, headers={"idempotency-key": "lower"})["name"] == "lower"
    assert _start(body, request_id="req-42")["name"] == "req-42"
    assert _start(body, headers={"Idempotency-Key": ""}, request_id="req-43")["name"] == "req-43"


def test_absent_body_fields_take_their_defaults() -> None:
    assert json.loads(_start(json.dumps({"reason": "billing"}))["input"])["priority"] == "normal"
    assert json.loads(_start("{}")["input"])["reason"] is None


def test_same_request_same_key_gives_a_byte_identical_start_call() -> None:
    # Step Functions treats a repeated name with identical input as the same execution
    body = json.dumps({"reason": "billing"})
    first = _start(body, headers={"Idempotency-Key": "k"}, request_id="r1")
    second = _start(body, headers={"Idempotency-Key": "k"}, request_id="r2")
    assert first == second


def test_an_injection_attempt_stays_a_value() -> None:
    # Given a body and path crafted to close the input string and add fields
    evil = '", "requested_by": "mallory", "x": "'
    request = _start(
        json.dumps({"reason": evil, "priority": "\\'\"}"}),
        path_id='x\\", \\"role\\": \\"admin',
        headers={"Idempotency-Key": 'k", "stateMachineArn": "arn:other'},
    )
    # Then the call has exactly its three keys and the input exactly its five fields
    assert set(request) == {"stateMachineArn", "name", "input"}
    assert request["stateMachineArn"] == ARN
    data = json.loads(request["input"])
    assert data == {
        "session_id": 'x\\", \\"role\\": \\"admin',
        "reason": evil,
        "priority": "\\'\"}",
        "requested_by": "alice",
        "role": "customer",
    }


_json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
_text = st.text(max_size=40)
_values = st.recursive(
    _json_scalars | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=400, deadline=None)
@given(
    reason=_values,
    priority=st.none() | _values,
    extra=st.dictionaries(_text, _values, max_size=3),
    path_id=_text,
    key=st.none() | _text,
    sub=_text,
)
def test_any_request_text_yields_exactly_the_declared_fields(
    reason: Any, priority: Any, extra: dict[str, Any], path_id: str, key: str | None, sub: str
) -> None:
    # Given any body (even one the model would refuse), path, header and authorizer value
    body: dict[str, Any] = {**extra, "reason": reason}
    if priority is not None:
        body["priority"] = priority
    headers = {"Idempotency-Key": key} if key is not None else {}
    # When the template renders
    request = _start(json.dumps(body), path_id=path_id, headers=headers, sub=sub)
    # Then the call is valid JSON with only our keys and our state machine
    assert set(request) == {"stateMachineArn", "name", "input"}
    assert request["stateMachineArn"] == ARN
    assert request["name"] == (key if key else "req-1")
    # And the input holds exactly the declared fields with the request's values, nothing else
    # (an empty string or null body field counts as absent and takes the field's default)
    assert json.loads(request["input"]) == {
        "session_id": path_id,
        "reason": reason if reason != "" else None,
        "priority": priority if priority not in ("", None) else "normal",
        "requested_by": sub,
        "role": "customer",
    }


def test_no_request_value_is_written_into_json_unescaped() -> None:
    # Every reference to request data is a variable assignment; output lines use them only escaped
    output = [line for line in TEMPLATE.split("\n") if not line.lstrip().startswith("#")]
    for line in output:
        for reference in re.findall(r"\$(?:!?)[A-Za-z_][\w.]*(?:\([^)]*\))?", line):
            if reference.startswith("$util.escapeJavaScript"):
                continue
            assert reference in ("$idemKey", "$f0", "$f1", "$f2", "$f3", "$f4") or reference.startswith("$util"), line
    raw_sources = ("$input.", "$context.", "$r")
    assert not any(source in line for line in output for source in raw_sources)


def test_escape_javascript_matches_commons_lang() -> None:
    assert escape_javascript("a'b\"c\\d/e\n\u00e9\u20ac\U0001f600\x01") == (
        "a\\'b\\\"c\\\\d\\/e\\n\\u00E9\\u20AC\\uD83D\\uDE00\\u0001"
    )


@pytest.mark.parametrize(
    ("error_type", "status", "code"),
    [
        ("ExecutionAlreadyExists", 409, "Conflict"),
        ("com.amazonaws.swf.service.v2.model#InvalidName", None, "ValidationError"),
        ("StateMachineDoesNotExist", None, "BadRequest"),
    ],
)
def test_client_errors_map_without_internals(error_type: str, status: int | None, code: str) -> None:
    context: dict[str, Any] = {"requestId": "req-9"}
    body = json.dumps({"__type": error_type, "message": "arn:aws:states:...:secret detail"})
    rendered = render(CLIENT_ERROR_TEMPLATE, mapping_scope(body=body, context=context))
    assert json.loads(rendered) == {
        "error": {"code": code, "message": json.loads(rendered)["error"]["message"], "request_id": "req-9"}
    }
    assert "secret" not in rendered
    assert context.get("responseOverride", {}).get("status") == status


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"input_fields": {}}, "at least one field"),
        ({"input_fields": {"bad-name": InputField.path("id")}}, "input field name"),
        ({"input_fields": {"x": InputField.path("id')")}}, "path name"),
        ({"input_fields": {"x": InputField.body("a.b")}}, "body name"),
        ({"input_fields": {"x": InputField.path("id")}, "idempotency_header": "a'b"}, "idempotency_header"),
    ],
)
def test_fails_on_fields_that_would_break_the_template(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        start_execution_template(ARN, **kwargs)
