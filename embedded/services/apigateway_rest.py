"""A REST API router built from a template's ``AWS::ApiGateway::*`` resources.

``RestRouter.request("POST", "/sessions", headers=..., body=...)`` does what API Gateway does
with the deployed API: find the resource and method (403 ``Missing Authentication Token`` when
the template has none, as API Gateway answers), throttle it (429 from the stage's method
settings, ``embedded.throttles``), run the authorizer (TOKEN or REQUEST Lambda:
identity source and validation expression, the returned policy evaluated against the method ARN,
results cached per identity for the authorizer's TTL on the injected clock), validate the request
(required parameters; the body against the method's model, a JSON Schema, with ``jsonschema``),
call the integration (Lambda proxy with the event shaped as API Gateway sends it; ``AWS``
integrations to Step Functions or DynamoDB with the request template evaluated by ``embedded.services.vtl``;
``MOCK``), map the response (integration responses with selection patterns and response
templates), and shape errors with the template's gateway responses.
"""

from __future__ import annotations

import fnmatch
import json
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from jsonschema.validators import validator_for

from embedded.cloudformation.deploy import DeployedStack
from embedded.cloudformation.loaders import Cloud
from embedded.events import Api, request_authorizer_event, rest_proxy_event, token_authorizer_event
from embedded.iam import access as iam_access
from embedded.iam.access import Access
from embedded.iam.guard import ACCESS_DENIED
from embedded.services.lambda_invoke import invoke
from embedded.services.vtl import mapping_scope, render
from embedded.throttles import TokenBucket, account_bucket, rest_throttle

#: The client every request of the harness comes from.
SOURCE_IP = "203.0.113.10"
USER_AGENT = "embedded-aws-harness"
_LAMBDA_URI = re.compile(r"arn:[^:]+:apigateway:[^:]+:lambda:path/[^/]+/functions/(?P<arn>.+)/invocations")
_AWS_URI = re.compile(r"arn:[^:]+:apigateway:[^:]+:(?P<service>[^:]+):action/(?P<action>.+)")
#: API Gateway's REST payload quota (10 MB): a larger body is REQUEST_TOO_LARGE (413), a gateway response.
PAYLOAD_LIMIT = 10 * 1024 * 1024


@dataclass(frozen=True)
class Response:
    """What the client receives."""

    status: int
    body: str
    headers: dict[str, str] = field(default_factory=dict)

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


@dataclass
class Call:
    """One request through the router: what came in, what the integration was, what went out."""

    method: str
    path: str
    status: int
    integration: str
    detail: str = ""


class _GatewayError(Exception):
    def __init__(self, response_type: str, status: int, message: str, validation: str = "") -> None:
        super().__init__(message)
        self.response_type = response_type
        self.status = status
        self.message = message
        self.validation = validation


@dataclass
class _Method:
    http_method: str
    properties: dict[str, Any]


class RestRouter:
    """API Gateway for one ``AWS::ApiGateway::RestApi`` of a deployed stack (see module docstring)."""

    def __init__(
        self,
        cloud: Cloud,
        stack: DeployedStack,
        api_logical_id: str,
        clock: Callable[[], float],
        account: TokenBucket | None = None,
    ) -> None:
        self.cloud = cloud
        self.stack = stack
        self.clock = clock
        api = stack.resources[api_logical_id]
        self.api_id = api.ref
        root = str(api.attributes["RootResourceId"])
        resources = stack.template.resources
        deployed = stack.resources
        mine = {
            lid: deployed[lid]
            for lid, r in resources.items()
            if lid in deployed and deployed[lid].properties.get("RestApiId") == self.api_id
        }
        # resource id -> full path
        self.paths: dict[str, str] = {root: "/"}
        tree = {r.ref: r.properties for r in mine.values() if r.type == "AWS::ApiGateway::Resource"}
        while len(self.paths) < len(tree) + 1:
            progressed = False
            for rid, props in tree.items():
                parent = str(props["ParentId"])
                if rid not in self.paths and parent in self.paths:
                    self.paths[rid] = self.paths[parent].rstrip("/") + "/" + str(props["PathPart"])
                    progressed = True
            if not progressed:
                raise ValueError(
                    f"API {self.api_id}: resources with unknown parents: {sorted(set(tree) - set(self.paths))}"
                )
        self.methods: dict[tuple[str, str], _Method] = {}
        for r in mine.values():
            if r.type == "AWS::ApiGateway::Method":
                path = self.paths[str(r.properties["ResourceId"])]
                self.methods[(path, str(r.properties["HttpMethod"]).upper())] = _Method(
                    str(r.properties["HttpMethod"]).upper(), r.properties
                )
        self.authorizers = {r.ref: r.properties for r in mine.values() if r.type == "AWS::ApiGateway::Authorizer"}
        self.validators = {r.ref: r.properties for r in mine.values() if r.type == "AWS::ApiGateway::RequestValidator"}
        self.models = {r.ref: r.properties for r in mine.values() if r.type == "AWS::ApiGateway::Model"}
        self.gateway_responses = {
            str(r.properties.get("ResponseType")): r.properties
            for r in stack.resources.values()
            if r.type == "AWS::ApiGateway::GatewayResponse" and r.properties.get("RestApiId") == self.api_id
        }
        stages = [r.properties for r in mine.values() if r.type == "AWS::ApiGateway::Stage"]
        self.stage = str(stages[0]["StageName"]) if stages else "prod"
        self.stage_variables = dict(stages[0].get("Variables", {})) if stages else {}
        #: the stage's method throttles (429 THROTTLED before the authorizer runs)
        self.throttle = rest_throttle(stages[0] if stages else {}, clock, account or account_bucket(clock))
        self.api = Api(api_id=self.api_id, stage=self.stage, account=cloud.account, region=cloud.region)
        self._auth_cache: dict[tuple[str, str], tuple[float, dict[str, Any]]] = {}
        self.log: list[Call] = []
        #: request templates that rendered to invalid JSON (a template bug the harness surfaces)
        self.invalid_requests: list[str] = []

    # ------------------------------------------------------------------ routing

    def routes(self) -> list[tuple[str, str]]:
        return sorted((m, p) for (p, m) in self.methods)

    def _match(self, path: str) -> tuple[str, dict[str, str]] | None:
        segments = [s for s in path.split("/") if s]
        best: tuple[int, str, dict[str, str]] | None = None
        for template in set(self.paths.values()):
            parts = [s for s in template.split("/") if s]
            params: dict[str, str] = {}
            score = 0
            if parts and parts[-1].endswith("+}"):
                if len(segments) < len(parts):
                    continue
                head, tail = parts[:-1], parts[-1]
                candidate = segments[: len(head)]
                params[tail[1:-2]] = "/".join(segments[len(head) :])
                parts_to_check = list(zip(head, candidate, strict=True))
            else:
                if len(parts) != len(segments):
                    continue
                parts_to_check = list(zip(parts, segments, strict=True))
            ok = True
            for part, segment in parts_to_check:
                if part.startswith("{") and part.endswith("}"):
                    params[part[1:-1]] = segment
                elif part == segment:
                    score += 1
                else:
                    ok = False
                    break
            if ok and (best is None or score > best[0]):
                best = (score, template, params)
        return (best[1], best[2]) if best else None

    def request(
        self,
        method: str,
        path: str,
        *,
        headers: Mapping[str, str] | None = None,
        query: Mapping[str, str] | None = None,
        body: Any = None,
    ) -> Response:
        """Send one request through the API (``body``: a str as is, anything else as JSON)."""
        method = method.upper()
        headers = dict(headers or {})
        query = dict(query or {})
        raw = body if isinstance(body, str) or body is None else json.dumps(body)
        if raw is not None and not any(k.lower() == "content-type" for k in headers):
            headers["Content-Type"] = "application/json"
        request_id = str(uuid.uuid4())
        context: dict[str, Any] = {"requestId": request_id, "httpMethod": method, "stage": self.stage}
        try:
            if raw is not None and len(raw.encode()) > PAYLOAD_LIMIT:
                raise _GatewayError("REQUEST_TOO_LARGE", 413, "Request Too Long")
            matched = self._match(path)
            found = None
            if matched is not None:
                found = self.methods.get((matched[0], method)) or self.methods.get((matched[0], "ANY"))
            if matched is None or found is None:
                raise _GatewayError("MISSING_AUTHENTICATION_TOKEN", 403, "Missing Authentication Token")
            resource_path, path_params = matched
            context.update(resourcePath=resource_path, path=f"/{self.stage}{path}")
            if not self.throttle.admit(f"{found.http_method} {resource_path}"):
                raise _GatewayError("THROTTLED", 429, "Too Many Requests")
            props = found.properties
            context["authorizer"] = self._authorize(props, method, path, headers, query, path_params, context)
            self._validate(props, headers, query, raw)
            response, integration = self._integrate(
                props, method, path, resource_path, path_params, headers, query, raw, context
            )
        except _GatewayError as error:
            response = self._gateway_response(error, context)
            integration = error.response_type
        self.log.append(Call(method, path, response.status, integration))
        return response

    # ------------------------------------------------------------------ authorization

    def _authorize(
        self,
        props: dict[str, Any],
        method: str,
        path: str,
        headers: dict[str, str],
        query: dict[str, str],
        path_params: dict[str, str],
        context: dict[str, Any],
    ) -> dict[str, Any]:
        kind = str(props.get("AuthorizationType", "NONE")).upper()
        if kind == "NONE":
            return {}
        if kind != "CUSTOM":
            raise NotImplementedError(f"AuthorizationType {kind} is not emulated (only NONE and CUSTOM)")
        authorizer = self.authorizers[str(props["AuthorizerId"])]
        method_arn = self.api.method_arn(method, path)
        lowered = {k.lower(): v for k, v in headers.items()}
        sources = [
            s.strip() for s in str(authorizer.get("IdentitySource", "method.request.header.Authorization")).split(",")
        ]
        identity: list[str] = []
        for source in sources:
            if source.startswith("method.request.header."):
                value = lowered.get(source.removeprefix("method.request.header.").lower())
            elif source.startswith("method.request.querystring."):
                value = query.get(source.removeprefix("method.request.querystring."))
            else:
                raise NotImplementedError(f"identity source {source} is not emulated")
            if not value:
                raise _GatewayError("UNAUTHORIZED", 401, "Unauthorized")
            identity.append(value)
        auth_type = str(authorizer.get("Type", "TOKEN")).upper()
        expression = authorizer.get("IdentityValidationExpression")
        if auth_type == "TOKEN" and expression and not re.fullmatch(str(expression), identity[0]):
            raise _GatewayError("UNAUTHORIZED", 401, "Unauthorized")
        ttl = int(authorizer.get("AuthorizerResultTtlInSeconds", 300))
        cache_key = (str(props["AuthorizerId"]), "\x00".join(identity))
        cached = self._auth_cache.get(cache_key)
        if cached and ttl > 0 and cached[0] > self.clock():
            result = cached[1]
        else:
            function = _LAMBDA_URI.match(str(authorizer["AuthorizerUri"]))
            if function is None:
                raise NotImplementedError(f"authorizer URI {authorizer['AuthorizerUri']} is not a Lambda")
            source = f"arn:aws:execute-api:{self.cloud.region}:{self.cloud.account}:{self.api_id}/authorizers/"
            if not self._may_invoke(function.group("arn"), source + str(props["AuthorizerId"])):
                raise _GatewayError("AUTHORIZER_CONFIGURATION_ERROR", 500, "Internal server error")
            if auth_type == "TOKEN":
                event = token_authorizer_event(identity[0], method_arn)
            else:
                event = request_authorizer_event(
                    method,
                    str(context.get("resourcePath")),
                    path,
                    api=self.api,
                    path_parameters=path_params,
                    query=query,
                    headers=headers,
                    stage_variables=self.stage_variables,
                    request_id=context["requestId"],
                )
            outcome = invoke(self.cloud.client("lambda"), function.group("arn").split(":")[6], event)
            if not outcome.ok:
                if outcome.payload and outcome.payload.get("errorMessage") == "Unauthorized":
                    raise _GatewayError("UNAUTHORIZED", 401, "Unauthorized")
                raise _GatewayError("AUTHORIZER_FAILURE", 500, "Internal server error")
            result = outcome.payload if isinstance(outcome.payload, dict) else {}
            if ttl > 0:
                self._auth_cache[cache_key] = (self.clock() + ttl, result)
        effect = _policy_effect(result.get("policyDocument", {}), method_arn)
        if effect != "Allow":
            raise _GatewayError(
                "ACCESS_DENIED", 403, "User is not authorized to access this resource with an explicit deny"
            )
        authorizer_context = {str(k): v for k, v in (result.get("context") or {}).items()}
        authorizer_context["principalId"] = result.get("principalId")
        return authorizer_context

    # ------------------------------------------------------------------ validation

    def _validate(self, props: dict[str, Any], headers: dict[str, str], query: dict[str, str], raw: str | None) -> None:
        validator_id = props.get("RequestValidatorId")
        if not validator_id:
            return
        validator = self.validators[str(validator_id)]
        if validator.get("ValidateRequestParameters"):
            lowered = {k.lower() for k in headers}
            missing = []
            for name, required in (props.get("RequestParameters") or {}).items():
                if not required or not str(name).startswith("method.request."):
                    continue
                kind, _, key = str(name).removeprefix("method.request.").partition(".")
                present = (
                    key.lower() in lowered if kind == "header" else key in query if kind == "querystring" else True
                )
                if not present:
                    missing.append(key)
            if missing:
                raise _GatewayError(
                    "BAD_REQUEST_PARAMETERS", 400, f"Missing required request parameters: [{', '.join(missing)}]"
                )
        if validator.get("ValidateRequestBody"):
            content_type = next((v for k, v in headers.items() if k.lower() == "content-type"), "application/json")
            models = props.get("RequestModels") or {}
            model_ref = models.get(content_type.split(";")[0].strip()) or models.get("$default")
            if model_ref is None:
                return
            schema = self._schema(str(model_ref))
            try:  # a body nested too deeply to parse, or to print in an error's message, is refused whole
                document = json.loads(raw) if raw else None
                errors = sorted(validator_for(schema)(schema).iter_errors(document), key=lambda e: list(e.path))
            except (ValueError, RecursionError) as err:
                detail = "[body is nested too deeply]" if isinstance(err, RecursionError) else "[body is not JSON]"
                raise _GatewayError("BAD_REQUEST_BODY", 400, "Invalid request body", detail) from None
            if errors:
                detail = "[" + "; ".join(f"{e.json_path}: {e.message}" for e in errors[:3]) + "]"  # names the field
                raise _GatewayError("BAD_REQUEST_BODY", 400, "Invalid request body", detail)

    def _schema(self, model_ref: str) -> dict[str, Any]:
        for ref, props in self.models.items():
            if ref == model_ref or props.get("Name") == model_ref:
                schema = props["Schema"]
                return json.loads(schema) if isinstance(schema, str) else dict(schema)
        raise KeyError(f"model {model_ref} is not in the template")

    # ------------------------------------------------------------------ integrations

    def _integrate(
        self,
        props: dict[str, Any],
        method: str,
        path: str,
        resource_path: str,
        path_params: dict[str, str],
        headers: dict[str, str],
        query: dict[str, str],
        raw: str | None,
        context: dict[str, Any],
    ) -> tuple[Response, str]:
        """The method's integration: its response, and what answered it (``lambda:<name>``, ``mock`` or
        ``<service>:<action>``)."""
        integration = props.get("Integration") or {}
        kind = str(integration.get("Type", "")).upper()
        if kind == "AWS_PROXY":
            return self._lambda_proxy(
                integration, method, path, resource_path, path_params, headers, query, raw, context
            )
        if kind == "MOCK":
            return self._map_response(integration, "", {"statusCode": 200}, context), "mock"
        if kind == "AWS":
            return self._aws_integration(integration, method, resource_path, path_params, headers, query, raw, context)
        raise NotImplementedError(f"integration type {kind} is not emulated")

    def _lambda_proxy(
        self,
        integration: dict[str, Any],
        method: str,
        path: str,
        resource_path: str,
        path_params: dict[str, str],
        headers: dict[str, str],
        query: dict[str, str],
        raw: str | None,
        context: dict[str, Any],
    ) -> tuple[Response, str]:
        """An AWS_PROXY integration: the function gets the proxy event, its answer is the response."""
        match = _LAMBDA_URI.match(str(integration["Uri"]))
        if match is None:
            raise NotImplementedError(f"AWS_PROXY integration to {integration['Uri']} is not a Lambda")
        function = match.group("arn").split(":")[6]
        event = rest_proxy_event(
            method,
            resource_path,
            path,
            api=self.api,
            path_parameters=path_params,
            query=query,
            headers=headers,
            body=raw,
            authorizer=context.get("authorizer") or None,
            stage_variables=self.stage_variables,
            request_id=context["requestId"],
            source_ip=SOURCE_IP,
            user_agent=USER_AGENT,
            epoch_ms=int(self.clock() * 1000),
        )
        if not self._may_invoke(match.group("arn"), self.api.method_arn(method, path)):
            raise _GatewayError("DEFAULT_5XX", 500, "Internal server error")
        outcome = invoke(self.cloud.client("lambda"), function, event)
        if outcome.throttled:  # API Gateway answers a Lambda throttle as an integration failure
            raise _GatewayError("INTEGRATION_FAILURE", 500, "Internal server error")
        if not outcome.ok or not isinstance(outcome.payload, dict) or "statusCode" not in outcome.payload:
            raise _GatewayError("DEFAULT_5XX", 502, "Internal server error")
        payload = outcome.payload
        body = payload.get("body") or ""
        return Response(
            int(payload["statusCode"]),
            str(body),
            {str(k): str(v) for k, v in (payload.get("headers") or {}).items()},
        ), f"lambda:{function}"

    def _aws_integration(
        self,
        integration: dict[str, Any],
        method: str,
        resource_path: str,
        path_params: dict[str, str],
        headers: dict[str, str],
        query: dict[str, str],
        raw: str | None,
        context: dict[str, Any],
    ) -> tuple[Response, str]:
        """An AWS integration: the request mapped by its template, the service called, its answer mapped back."""
        match = _AWS_URI.match(str(integration["Uri"]))
        if match is None:
            raise NotImplementedError(f"AWS integration URI {integration['Uri']} (only action-style URIs)")
        templates = integration.get("RequestTemplates") or {}
        content_type = next((v for k, v in headers.items() if k.lower() == "content-type"), "application/json")
        template = templates.get(content_type.split(";")[0].strip())
        if template is None:
            behaviour = str(integration.get("PassthroughBehavior", "WHEN_NO_MATCH"))
            if behaviour == "NEVER" or (behaviour == "WHEN_NO_TEMPLATES" and templates):
                raise _GatewayError("UNSUPPORTED_MEDIA_TYPE", 415, "Unsupported Media Type")
            request_body = raw or "{}"
        else:
            scope = mapping_scope(
                body=raw or "",
                path=path_params,
                querystring=query,
                header=headers,
                context=dict(context),
                stage_variables=self.stage_variables,
            )
            request_body = render(str(template), scope)
        service, action = match.group("service"), match.group("action")
        try:
            arguments = json.loads(request_body)
        except ValueError as error:
            # What the service answers a body it cannot parse; the integration responses
            # then decide what the client sees (a 200 when none selects 4xx).
            self.invalid_requests.append(f"{method} {resource_path}: {error}: {request_body[:300]}")
            result, status = {"__type": "SerializationException", "message": str(error)}, 400
        else:
            result, status = self._call_service(service, action, arguments, integration.get("Credentials"))
        return self._map_response(
            integration, json.dumps(result), {"statusCode": status}, context
        ), f"{service}:{action}"

    def _may_invoke(self, function_arn: str, source_arn: str) -> bool:
        """Whether the function's resource policy lets API Gateway invoke it for ``source_arn``."""
        guard = self.cloud.guard
        if guard is None:
            return True
        context = {"aws:SourceArn": source_arn, "aws:SourceAccount": self.cloud.account}
        made_by = f"API Gateway {self.api_id} ({source_arn.split(':', 5)[-1]})"
        wanted = [Access("lambda:InvokeFunction", function_arn, context)]
        return guard.deliver("apigateway.amazonaws.com", wanted, made_by) is None

    def _call_service(self, service: str, action: str, arguments: dict[str, Any], credentials: Any) -> tuple[Any, int]:
        clients = {"states": "stepfunctions", "dynamodb": "dynamodb", "sqs": "sqs", "sns": "sns", "events": "events"}
        if service not in clients:
            raise NotImplementedError(f"AWS integration to {service} is not emulated")
        client = self.cloud.client(clients[service])
        guard = self.cloud.guard
        if guard is not None:
            if not credentials:
                raise _GatewayError("DEFAULT_5XX", 500, "Internal server error")
            call = iam_access.Call(clients[service], action, arguments, self.cloud.region, self.cloud.account)
            made_by = f"API Gateway {self.api_id} integration {service}:{action}"
            source = {"aws:SourceAccount": self.cloud.account, "aws:SourceArn": self.api.method_arn("*", "/*")}
            refusal = guard.with_role(
                "apigateway.amazonaws.com",
                str(credentials),
                iam_access.accesses(call, guard.authority),
                made_by,
                source,
            )
            if refusal is not None and refusal.action == "sts:AssumeRole":
                raise _GatewayError("DEFAULT_5XX", 500, "Internal server error")
            if refusal is not None:
                code, status = ACCESS_DENIED.get(clients[service], ("AccessDeniedException", 400))
                return {"__type": code, "message": refusal.message()}, status
        operation = re.sub(r"(?<!^)(?=[A-Z])", "_", action).lower()
        try:
            result = getattr(client, operation)(**arguments)
        except client.exceptions.ClientError as error:
            return {
                "__type": error.response["Error"]["Code"],
                "message": error.response["Error"].get("Message", ""),
            }, int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 400))
        result.pop("ResponseMetadata", None)
        return json.loads(json.dumps(result, default=_epoch)), 200

    def _map_response(
        self, integration: dict[str, Any], body: str, meta: dict[str, Any], context: dict[str, Any]
    ) -> Response:
        responses = integration.get("IntegrationResponses") or [{"StatusCode": "200"}]
        status = int(meta["statusCode"])
        chosen = None
        for candidate in responses:
            pattern = candidate.get("SelectionPattern")
            if pattern and re.fullmatch(str(pattern), str(status), re.S):
                chosen = candidate
                break
        if chosen is None:
            chosen = next((c for c in responses if not c.get("SelectionPattern")), responses[0])
        templates = chosen.get("ResponseTemplates") or {}
        template = templates.get("application/json")
        status_code = int(chosen.get("StatusCode", 200))
        headers = {
            k.removeprefix("method.response.header."): str(v).strip("'")
            for k, v in (chosen.get("ResponseParameters") or {}).items()
        }
        if template:
            scope = mapping_scope(body=body, context=dict(context), stage_variables=self.stage_variables)
            body = render(str(template), scope)
            override = scope["context"].get("responseOverride") or {}
            status_code = int(override.get("status", status_code))
            headers.update({str(k): str(v) for k, v in (override.get("header") or {}).items()})
        return Response(status_code, body, headers)

    # ------------------------------------------------------------------ errors

    def _gateway_response(self, error: _GatewayError, context: dict[str, Any]) -> Response:
        family = "DEFAULT_4XX" if error.status < 500 else "DEFAULT_5XX"
        configured = self.gateway_responses.get(error.response_type) or self.gateway_responses.get(family)
        context = {
            **context,
            "error": {
                "message": error.message,
                "messageString": json.dumps(error.message),
                "responseType": error.response_type,
                "validationErrorString": json.dumps(error.validation)[1:-1],  # quotes escaped, as API Gateway does
            },
        }
        if configured is None:
            return Response(error.status, json.dumps({"message": error.message}))
        status = int(configured.get("StatusCode") or error.status)
        template = (configured.get("ResponseTemplates") or {}).get("application/json")
        body = (
            render(str(template), mapping_scope(context=context))
            if template
            else json.dumps({"message": error.message})
        )
        headers = {
            k.removeprefix("gatewayresponse.header."): str(v).strip("'")
            for k, v in (configured.get("ResponseParameters") or {}).items()
        }
        return Response(status, body, headers)


def _policy_effect(document: Mapping[str, Any], method_arn: str) -> str:
    """IAM evaluation of an authorizer policy for one method ARN: explicit Deny wins."""
    effect = "Deny"
    for statement in document.get("Statement", []):
        actions = statement.get("Action", [])
        actions = [actions] if isinstance(actions, str) else actions
        if not any(fnmatch.fnmatchcase("execute-api:Invoke", a) for a in actions):
            continue
        resources = statement.get("Resource", [])
        resources = [resources] if isinstance(resources, str) else resources
        if any(fnmatch.fnmatchcase(method_arn, r) for r in resources):
            if statement.get("Effect") == "Deny":
                return "Deny"
            effect = "Allow"
    return effect


def _epoch(value: Any) -> Any:
    return value.timestamp() if hasattr(value, "timestamp") else str(value)
