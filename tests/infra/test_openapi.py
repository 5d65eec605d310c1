"""docs/openapi.json is what the dev stage deploys, and valid OpenAPI 3."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from openapi_spec_validator import validate

from embedded.synth import SynthesizedStage
from lambdas.api import access
from tools import openapi


@pytest.fixture(scope="module")
def document(dev: SynthesizedStage) -> dict[str, Any]:
    return openapi.build(dev.templates["Api"], cors_origins=dev.stage.config.cors_allowed_origins)


def test_the_checked_in_document_is_current(document: dict[str, Any]) -> None:
    assert openapi.render(document) == openapi.DOCUMENT.read_text(), "docs/openapi.json is stale: run make openapi"


def test_it_is_valid_openapi_3(document: dict[str, Any]) -> None:
    validate(document)  # raises on any violation of the OpenAPI 3.0 schema


def test_every_route_of_the_access_table_is_documented_with_its_roles(document: dict[str, Any]) -> None:
    documented = {(m.upper(), p): op for p, ops in document["paths"].items() for m, op in ops.items()}
    assert set(documented) == {(r.method, r.path) for r in access.ROUTES}
    for route in access.ROUTES:
        operation = documented[(route.method, route.path)]
        assert operation["x-roles"] == sorted(route.roles)
        assert (operation.get("security") == []) == route.public


def test_bodies_carry_the_lambda_rules_the_gateway_model_omits(document: dict[str, Any]) -> None:
    session = document["paths"]["/sessions/{id}"]["get"]["parameters"][0]
    assert session["schema"]["format"] == "uuid"
    assert "$schema" not in document["components"]["schemas"]["CreateSessionRequest"]


def test_a_parameter_without_a_rule_fails_the_generation(dev: SynthesizedStage) -> None:
    template = copy.deepcopy(dev.templates["Api"])
    method = next(
        res
        for res in template["Resources"].values()
        if res["Type"] == "AWS::ApiGateway::Method"
        and res["Properties"]["HttpMethod"] == "GET"
        and res["Properties"].get("RequestParameters")
    )
    method["Properties"]["RequestParameters"]["method.request.querystring.surprise"] = False
    with pytest.raises(openapi.OpenApiError, match="'surprise' has no schema"):
        openapi.build(template)


def test_the_document_is_plain_json_with_a_trailing_newline() -> None:
    text = openapi.DOCUMENT.read_text()
    assert text.endswith("}\n")
    json.loads(text)


def test_the_documented_401_carries_the_challenge_the_gateway_sends(
    dev: SynthesizedStage, document: dict[str, Any]
) -> None:
    (unauthorized,) = [
        r["Properties"]
        for r in dev.templates["Api"]["Resources"].values()
        if r["Type"] == "AWS::ApiGateway::GatewayResponse" and r["Properties"]["ResponseType"] == "UNAUTHORIZED"
    ]
    sent = {h.removeprefix("gatewayresponse.header.") for h in unauthorized["ResponseParameters"]}
    documented = document["components"]["responses"]["Unauthorized"]["headers"]
    assert "WWW-Authenticate" in sent
    cors = {h for h in sent if h.startswith("Access-Control-") or h == "Vary"}
    assert set(documented) == sent - cors
