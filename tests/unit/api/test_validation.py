"""lambdas.api.validation: one set of schema dicts for API Gateway's models and fastjsonschema in the
Lambdas; messages that name the field; the 400 codes API Gateway itself uses."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lambdas.api import validation
from lambdas.api.validation import (
    BODY_ERROR,
    BODY_MODELS,
    PARAMETERS_ERROR,
    ValidationError,
    gateway_schema,
    parse_body,
    parse_path,
    parse_query,
)
from stacks import config


def _error(call: Any, *args: Any) -> ValidationError:
    with pytest.raises(ValidationError) as raised:
        call(*args)
    return raised.value


# ------------------------------------------------------------------ one source


@pytest.mark.parametrize("name", sorted(BODY_MODELS))
def test_every_body_model_compiles_once_per_container(name: str) -> None:
    schema = BODY_MODELS[name]
    assert validation.compiled(schema) is validation.compiled(schema)


def test_gateway_schema_drops_only_what_api_gateway_ignores() -> None:
    schema = {"type": "object", "additionalProperties": False, "properties": {"id": validation.SESSION_ID}}
    assert gateway_schema(schema)["properties"]["id"] == {"type": "string", "maxLength": 36}
    listing = gateway_schema(validation.AGENTS_QUERY)
    assert "default" not in listing["properties"]["limit"]
    skills = gateway_schema(validation.REGISTER_AGENT)["properties"]["skills"]
    assert skills["items"] == {"type": "string", "pattern": validation.SKILL_PATTERN, "maxLength": 64}


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "string", "oneOf": []}, "unsupported keywords ['oneOf']"),
        ({"type": "object", "additionalProperties": True}, "additionalProperties may only be false"),
        ({"type": "string", "format": "email"}, "unsupported format 'email'"),
        ({"type": "array", "items": {"type": "string", "const": "x"}}, "schema at $[] uses unsupported keywords"),
    ],
)
def test_fails_on_a_rule_one_side_would_not_enforce(schema: dict[str, Any], message: str) -> None:
    with pytest.raises(TypeError, match=message.replace("[", r"\[").replace("$", r"\$")):
        gateway_schema(schema)
    with pytest.raises(TypeError):
        validation.compiled(schema)


def test_the_skill_rule_is_the_stages() -> None:
    assert config._SKILL.pattern == validation.SKILL_PATTERN


# ------------------------------------------------------------------ messages and codes


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (None, "a JSON body is required"),
        ("{", "the body is not valid JSON"),
        ('{"customer_id": NaN}', "the body is not valid JSON"),
        ('{"customer_id": Infinity}', "the body is not valid JSON"),
        ("[]", "body must be of type object"),
        ("{}", "body.customer_id is required"),
        ('{"customer_id": 7}', "body.customer_id must be of type string"),
        ('{"customer_id": "alice\\n"}', "body.customer_id must match ^[a-zA-Z0-9-]{1,64}$"),
        ('{"customer_id": "' + "a" * 65 + '"}', "body.customer_id must have at most 64 characters"),
        ('{"customer_id": "a", "zz": 1, "aa": 2}', "body has unknown properties: aa, zz"),
        (
            '{"customer_id": "a", "metadata": {"source": "fax"}}',
            "body.metadata.source must be one of web, mobile, voice",
        ),
        ('{"customer_id": "a", "metadata": {"x": 1}}', "body.metadata has unknown properties: x"),
        ('{"customer_id": "' + "a" * 9000 + '"}', "the body must be at most 8192 bytes"),
    ],
)
def test_a_body_error_names_the_field_and_the_rule(raw: str | None, message: str) -> None:
    error = _error(parse_body, raw, validation.CREATE_SESSION)
    assert str(error) == message
    assert error.code == BODY_ERROR


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ('{"older_than_seconds": -1}', "body.older_than_seconds must be >= 0"),
        ('{"older_than_seconds": 604801}', "body.older_than_seconds must be <= 604800"),
        ('{"older_than_seconds": 1.5}', "body.older_than_seconds must be of type integer"),
        ('{"older_than_seconds": true}', "body.older_than_seconds must be of type integer"),
    ],
)
def test_numbers_are_integers_in_range_never_booleans(raw: str, message: str) -> None:
    assert str(_error(parse_body, raw, validation.CLEANUP_REQUEST)) == message


def test_reserved_reasons_are_refused_by_the_lookahead() -> None:
    for reason in ("escalated", "manager"):
        error = _error(parse_body, json.dumps({"reason": reason}), validation.HANDOFF_REQUEST)
        assert str(error).startswith("body.reason must match")
    assert parse_body('{"reason": "managers"}', validation.HANDOFF_REQUEST) == {"reason": "managers"}


def test_path_and_query_errors_carry_the_parameters_code() -> None:
    path = _error(parse_path, "0B7C5F2E-1D3A-4C8B-9E6F-2A1B3C4D5E6F", validation.SESSION_ID, "id")
    assert (str(path), path.code) == ("path.id must be a lowercase uuid", PARAMETERS_ERROR)
    query = _error(parse_query, {"limit": "101"}, validation.TURNS_QUERY)
    assert (str(query), query.code) == ("query.limit must be <= 100", PARAMETERS_ERROR)
    assert parse_query(None, validation.TURNS_QUERY) == {"limit": 20}


# ------------------------------------------------------------------ both sides agree


def _ecma(schema: Any) -> Any:
    """``schema`` with each pattern's final ``$`` as ECMA-262 (API Gateway) reads it: end of input."""
    if isinstance(schema, dict):
        return {k: (v[:-1] + r"\Z" if k == "pattern" and v.endswith("$") else _ecma(v)) for k, v in schema.items()}
    return schema


VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-10, max_value=10**6),
    st.sampled_from(["", "a", "alice", "web", "billing", "a-1", "x y", "alice\n", "resume", "en-GB", "A" * 70]),
    st.lists(st.sampled_from(["billing", "manga", "bad skill", ""]), max_size=3),
)
DOCUMENTS = st.dictionaries(
    st.sampled_from(
        ["customer_id", "reason", "priority", "agent_id", "display_name", "skills", "is_manager", "status", "x"]
    ),
    VALUES,
    max_size=4,
)


@pytest.mark.parametrize("name", sorted(BODY_MODELS))
@settings(max_examples=150, deadline=None)
@given(document=DOCUMENTS)
def test_the_lambda_accepts_exactly_what_the_gateway_model_accepts(name: str, document: dict[str, Any]) -> None:
    # The gateway's model checked by an independent draft-4 implementation (no format: nothing here is a uuid)
    gateway = jsonschema.Draft4Validator(_ecma(gateway_schema(BODY_MODELS[name]))).is_valid(document)
    try:
        validation.validate(document, BODY_MODELS[name])
        lambda_side = True
    except ValidationError:
        lambda_side = False
    assert lambda_side == gateway, document
