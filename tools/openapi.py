"""docs/openapi.json: the REST API as OpenAPI 3, generated from what the stage deploys.

``make openapi`` synthesizes the dev stage in-process and writes the document; a test regenerates
it from the synthesized template and fails when the checked-in file is stale.

Sources, so the document cannot drift from the API:

* paths and methods: the Api stack's ``AWS::ApiGateway::Resource`` tree and ``Method`` resources
  (CORS preflight ``OPTIONS`` methods left out; CORS is described in ``info``);
* which parameters are required: each method's ``RequestParameters``;
* request bodies: the method's request model, described by the schema dict it was built from
  (:data:`contracts.requests.BODY_MODELS`, with the Lambda-only rules such as
  ``format: uuid`` that API Gateway's model omits);
* parameter rules: :data:`QUERIES` and :data:`PATH_PARAMETERS` below, the same schema dicts the handlers validate with;
  a parameter the template has and the table lacks fails the generation;
* roles: :data:`contracts.access.ROUTES` (``x-roles``); the authorizer: ``security``.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from contracts import access
from contracts import requests as validation
from lambdas.api import inbox
from stacks.config import load_stage_config
from stacks.project import cdk_json_context
from stacks.stage import MangaAssistStage, stage_app

ROOT = Path(__file__).resolve().parent.parent
DOCUMENT = ROOT / "docs" / "openapi.json"
TITLE: Final = "MangaAssist REST API"

#: Query strings by resource path: the object schemas the handlers validate them with.
QUERIES: Final[Mapping[str, Mapping[str, Any]]] = {
    "/sessions/{id}/turns": validation.TURNS_QUERY,
    "/customers/{id}/sessions": validation.CUSTOMER_SESSIONS_QUERY,
    "/admin/agents": validation.AGENTS_QUERY,
    "/admin/sessions": validation.SESSIONS_BY_STATUS_QUERY,
    "/agents/me/inbox": inbox.INBOX_QUERY,
}

#: Path parameters by name: the schema dicts the handlers validate them with.
PATH_PARAMETERS: Final[Mapping[str, Mapping[str, Any]]] = {
    "/sessions/{id}": validation.SESSION_ID,
    "/customers/{id}": validation.CUSTOMER_ID,
    "/executions/{id}": validation.EXECUTION_ID,
    "/handoffs/{session_id}": validation.SESSION_ID,
    "/admin/agents/{agent_id}": validation.AGENT_ID,
    # The review links' id; the link's ``exp`` and ``sig`` are checked by the gate's decision
    # function (the HMAC signature is the credential), not declared at the gateway.
    "/reviews/{id}": {"type": "string", "minLength": 1, "maxLength": 128},
}


def _rule(path: str, location: str, name: str) -> tuple[str, Mapping[str, Any]] | None:
    """The table key and schema of one parameter: the query object's property, or the path prefix naming it."""
    if location == "querystring":
        properties: Mapping[str, Any] = QUERIES.get(path, {}).get("properties", {})
        return (path, properties[name]) if name in properties else None
    for prefix, schema in PATH_PARAMETERS.items():
        if (path == prefix or path.startswith(prefix + "/")) and prefix.endswith("{" + name + "}"):
            return prefix, schema
    return None


_ERROR: Final[dict[str, Any]] = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message", "request_id"],
            "properties": {
                "code": {"type": "string", "description": "the kind of error, e.g. ValidationError, Forbidden"},
                "message": {"type": "string", "description": "what to fix"},
                "request_id": {"type": "string", "description": "quote it to support"},
            },
        }
    },
}
_RESPONSES: Final[dict[str, str]] = {
    "BadRequest": "The body or a parameter breaks a rule; the message names the field.",
    "Unauthorized": "No token, or a token the authorizer refused.",
    "Forbidden": "The caller's role may not call this route, or not on this record.",
    "TooManyRequests": "Throttled by the stage's limits; retry later with backoff.",
    "Error": "Any other error (404 unknown record, 409 conflicting state, 5xx) in the same shape.",
}

#: The UNAUTHORIZED gateway response's challenge (``constructs_lib.rest_api``): RFC 9110 asks a 401 for one.
_CHALLENGE: Final[dict[str, Any]] = {
    "WWW-Authenticate": {"description": "`Bearer`: send a token in `Authorization`.", "schema": {"type": "string"}}
}


class OpenApiError(ValueError):
    """The template has something the generator cannot describe; the message says what."""


def _resources(template: Mapping[str, Any]) -> dict[str, str]:
    """Resource logical id -> its full path, and the REST API's root ('/')."""
    resources = template["Resources"]
    parts = {
        logical_id: (res["Properties"]["ParentId"], res["Properties"]["PathPart"])
        for logical_id, res in resources.items()
        if res["Type"] == "AWS::ApiGateway::Resource"
    }
    paths: dict[str, str] = {}

    def path_of(logical_id: str) -> str:
        if logical_id not in paths:
            parent, part = parts[logical_id]
            prefix = path_of(parent["Ref"]) if "Ref" in parent else ""
            paths[logical_id] = f"{prefix}/{part}"
        return paths[logical_id]

    for logical_id in parts:
        path_of(logical_id)
    return paths


def _schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A draft-4 schema dict as an OpenAPI 3.0 schema object (no ``$schema``)."""
    result = {k: copy.deepcopy(v) for k, v in schema.items() if k != "$schema"}
    if "properties" in result:
        result["properties"] = {name: _schema(sub) for name, sub in result["properties"].items()}
    return result


def _parameters(path: str, request_parameters: Mapping[str, Any], used: set[str]) -> list[dict[str, Any]]:
    parameters = []
    for key, required in sorted(request_parameters.items()):
        _, _, location, name = key.split(".", 3)  # method.request.<location>.<name>
        if location == "header":
            continue  # Authorization / Idempotency-Key are described by security and the route docs
        found = _rule(path, location, name)
        if found is None:
            raise OpenApiError(f"{path}: {location} parameter {name!r} has no schema in tools/openapi.py")
        key, rule = found
        used.add(key)
        parameters.append(
            {
                "name": name,
                "in": "query" if location == "querystring" else location,
                "required": bool(required) or location == "path",
                "schema": _schema(rule),
            }
        )
    return parameters


def _responses(public: bool) -> dict[str, Any]:
    responses: dict[str, Any] = {
        "2XX": {"description": "Success; docs/rest-api.md describes each route's body and status."},
        "400": {"$ref": "#/components/responses/BadRequest"},
        "429": {"$ref": "#/components/responses/TooManyRequests"},
        "default": {"$ref": "#/components/responses/Error"},
    }
    if not public:
        responses["401"] = {"$ref": "#/components/responses/Unauthorized"}
        responses["403"] = {"$ref": "#/components/responses/Forbidden"}
    return dict(sorted(responses.items()))


def build(template: Mapping[str, Any], *, cors_origins: Sequence[str] = ()) -> dict[str, Any]:
    """The OpenAPI 3 document of the REST API in the Api stack's ``template``."""
    resources = template["Resources"]
    paths_by_id = _resources(template)
    model_names = {  # the model's schema title is its name in BODY_MODELS
        logical_id: res["Properties"]["Schema"]["title"]
        for logical_id, res in resources.items()
        if res["Type"] == "AWS::ApiGateway::Model"
    }
    used_models: set[str] = set()
    used_parameters: set[str] = set()
    paths: dict[str, dict[str, Any]] = {}
    for res in resources.values():
        if res["Type"] != "AWS::ApiGateway::Method":
            continue
        props = res["Properties"]
        method = props["HttpMethod"]
        if method == "OPTIONS":
            continue
        resource_id = props["ResourceId"]
        path = paths_by_id[resource_id["Ref"]] if "Ref" in resource_id else "/"
        try:
            route = access.route(method, path)
        except KeyError as err:
            raise OpenApiError(str(err)) from None
        operation: dict[str, Any] = {
            "operationId": _operation_id(method, path),
            "x-roles": sorted(route.roles),
            "parameters": _parameters(path, props.get("RequestParameters", {}), used_parameters),
            "responses": _responses(route.public),
        }
        if route.public:
            operation["security"] = []
        models = props.get("RequestModels") or {}
        if models:
            name = model_names[models["application/json"]["Ref"]]
            if name not in validation.BODY_MODELS:
                raise OpenApiError(f"{method} {path}: model {name} is not in contracts.requests.BODY_MODELS")
            used_models.add(name)
            operation["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}},
            }
        paths.setdefault(path, {})[method.lower()] = operation
    unused = sorted((set(QUERIES) | set(PATH_PARAMETERS)) - used_parameters)
    if unused:
        raise OpenApiError(f"tools/openapi.py describes parameters no route declares: {unused}")
    return {
        "openapi": "3.0.3",
        "info": {
            "title": TITLE,
            "version": "1",
            "description": (
                "Generated by `make openapi` from the synthesized Api stack; do not edit. Every route but the "
                "review links needs `Authorization: Bearer <token>`. CORS allows the stage's origins"
                + (f" (dev: {', '.join(cors_origins)})" if cors_origins else "")
                + '. Errors answer {"error": {"code", "message", "request_id"}} from the gateway and the '
                "functions alike."
            ),
        },
        "servers": [{"url": "{base}", "variables": {"base": {"default": "https://example.invalid/dev/"}}}],
        "security": [{"bearer": []}],
        "paths": {path: dict(sorted(ops.items())) for path, ops in sorted(paths.items())},
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}},
            "schemas": {
                "Error": _ERROR,
                **{name: _schema(validation.BODY_MODELS[name]) for name in sorted(used_models)},
            },
            "responses": {
                name: {
                    "description": text,
                    **({"headers": _CHALLENGE} if name == "Unauthorized" else {}),
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
                }
                for name, text in _RESPONSES.items()
            },
        },
    }


def _operation_id(method: str, path: str) -> str:
    words = [part.strip("{}") for part in path.strip("/").split("/")]
    return method.lower() + "".join(word[:1].upper() + word[1:].replace("_", "") for word in words)


def render(document: Mapping[str, Any]) -> str:
    return json.dumps(document, indent=2, sort_keys=False) + "\n"


def synthesized_api_template(stage: str = "dev") -> tuple[dict[str, Any], tuple[str, ...]]:
    """The Api stack template of ``stage``, synthesized in-process as ``cdk synth`` would."""
    context = cdk_json_context()
    config = load_stage_config(context.get("stages"), stage)
    app = stage_app(context=context)
    built = MangaAssistStage(app, config, nag=False)
    assembly = built.synth()
    return assembly.get_stack_artifact(built.api.artifact_id).template, config.cors_allowed_origins


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.openapi", description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=DOCUMENT)
    args = parser.parse_args(argv)
    template, origins = synthesized_api_template()
    try:
        document = build(template, cors_origins=origins)
    except OpenApiError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    args.output.write_text(render(document))
    print(f"wrote {args.output} ({len(document['paths'])} paths)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
