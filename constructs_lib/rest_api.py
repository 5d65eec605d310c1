"""A REST API with the hardening every public API here needs, and request models from JSON Schema dicts.

Example::

    api = HardenedRestApi(self, "RestApi", cors_allowed_origins=["https://app.example.com"],
                          throttle_rate=50, throttle_burst=100)
    model = api.add_model("CreateOrder", {"type": "object", "required": ["name"], ...})
    api.api.root.add_resource("things").add_method(
        "POST", integration, request_models={"application/json": model},
        request_validator=api.body_validator, authorizer=authorizer)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, cast

from aws_cdk import Acknowledgment, RemovalPolicy, Validations
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct

from constructs_lib.validation import PropErrors, is_unresolved

#: The enhanced security policy of the API's endpoint: TLS 1.2 and 1.3 only, with forward-secret
#: and post-quantum key exchange (API Gateway developer guide, "Security policies for REST APIs").
#: An enhanced policy (``SecurityPolicy_...``) needs an endpoint access mode as well.
DEFAULT_SECURITY_POLICY = "SecurityPolicy_TLS13_1_2_PFS_PQ_2025_09"
#: Requests must come through the API's own endpoint type and name its host (SNI): no domain fronting.
DEFAULT_ENDPOINT_ACCESS_MODE = "STRICT"

#: Access log fields, one JSON object per request (CloudWatch Logs Insights reads them as is).
ACCESS_LOG_FIELDS: dict[str, str] = {
    "requestId": "$context.requestId",
    "extendedRequestId": "$context.extendedRequestId",
    "ip": "$context.identity.sourceIp",
    "userAgent": "$context.identity.userAgent",
    "requestTime": "$context.requestTime",
    "httpMethod": "$context.httpMethod",
    "resourcePath": "$context.resourcePath",
    "status": "$context.status",
    "protocol": "$context.protocol",
    "tlsVersion": "$context.tlsVersion",
    "cipherSuite": "$context.cipherSuite",
    "responseLength": "$context.responseLength",
    "responseLatency": "$context.responseLatency",
    "integrationLatency": "$context.integrationLatency",
    "integrationStatus": "$context.integrationStatus",
    "principalId": "$context.authorizer.principalId",
    "authorizerError": "$context.authorizer.error",
    "errorType": "$context.error.responseType",
    "validationError": "$context.error.validationErrorString",
    "wafStatus": "$context.waf.status",
    "xrayTraceId": "$context.xrayTraceId",
}

_SCHEMA_TYPES = {
    "object": apigw.JsonSchemaType.OBJECT,
    "string": apigw.JsonSchemaType.STRING,
    "integer": apigw.JsonSchemaType.INTEGER,
    "number": apigw.JsonSchemaType.NUMBER,
    "boolean": apigw.JsonSchemaType.BOOLEAN,
    "array": apigw.JsonSchemaType.ARRAY,
}
_SCHEMA_KEYWORDS = {
    "title": "title",
    "description": "description",
    "enum": "enum",
    "pattern": "pattern",
    "minLength": "min_length",
    "maxLength": "max_length",
    "minimum": "minimum",
    "maximum": "maximum",
    "required": "required",
    "additionalProperties": "additional_properties",
    "minProperties": "min_properties",
    "minItems": "min_items",
    "maxItems": "max_items",
    "uniqueItems": "unique_items",
}


def json_schema(schema: Mapping[str, Any]) -> apigw.JsonSchema:
    """A draft-4 JSON Schema dict as CDK's ``JsonSchema`` (the keywords API Gateway models use).

    Fails (ValueError) on a keyword it does not translate, so a rule is never dropped silently;
    :meth:`HardenedRestApi.add_model` reports the same problems as prop errors instead.
    """
    problems: list[str] = []
    translated = _translate(schema, problems)
    if problems:
        raise ValueError(problems[0])
    return translated


def _translate(schema: Mapping[str, Any], problems: list[str]) -> apigw.JsonSchema:
    """``schema`` as CDK's ``JsonSchema``; what cannot be translated is left out and named in ``problems``."""
    kwargs: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "$schema":
            kwargs["schema"] = apigw.JsonSchemaVersion.DRAFT4
        elif key == "type":
            if value in _SCHEMA_TYPES:
                kwargs["type"] = _SCHEMA_TYPES[value]
            else:
                problems.append(f"json_schema: unsupported type {value!r}; use one of {sorted(_SCHEMA_TYPES)}")
        elif key == "properties":
            kwargs["properties"] = {name: _translate(sub, problems) for name, sub in value.items()}
        elif key == "items":
            kwargs["items"] = _translate(value, problems)
        elif key in _SCHEMA_KEYWORDS:
            kwargs[_SCHEMA_KEYWORDS[key]] = list(value) if isinstance(value, (list, tuple)) else value
        else:
            problems.append(f"json_schema: keyword {key!r} is not supported; remove it or extend json_schema")
    return apigw.JsonSchema(**kwargs)


class HardenedRestApi(Construct):
    """A regional REST API and its one stage, hardened by default.

    What it sets up: JSON access logs into a log group with a retention (and a KMS key when
    given); execution logging at INFO for every method with request/response data only when
    ``log_execution_data`` is true, into an explicitly created execution log group with the same
    retention and key; X-Ray tracing; detailed metrics; stage throttling; a usage plan with the same
    limits; CORS preflight for the given origins; DEFAULT_4XX/5XX gateway responses as JSON
    with CORS headers, UNAUTHORIZED (401) with a ``WWW-Authenticate: Bearer`` challenge, and
    BAD_REQUEST_BODY (400) whose message carries the validation error naming the property;
    request validators for body+parameters and parameters only.

    Args:
        cors_allowed_origins: origins answered by CORS preflight (required, at least one).
            Gateway responses and non-proxy integrations carry the first one (their headers
            are static); ``*`` is accepted only when it is the sole entry.
        stage_name: defaults to ``v1``.
        throttle_rate: steady-state requests per second of the stage. Defaults to 50.
        throttle_burst: burst of the stage. Defaults to 100.
        log_retention: retention of the access and execution log groups. Defaults to one week.
        log_encryption_key: KMS key of the access and execution log groups; its key policy must let
            CloudWatch Logs use it. Defaults to CloudWatch Logs' own encryption.
        log_execution_data: log full requests and responses in execution logs. Defaults to
            false (never in production: they hold personal data and tokens).
        log_removal_policy: defaults to DESTROY (logs age out by retention anyway).
        cloud_watch_role: create the account-level API Gateway role that execution logging
            needs (``AWS::ApiGateway::Account``). Defaults to true: without it, a stage with
            execution logging fails to deploy in an account that never had one.
        description: defaults to none.
        security_policy: minimum TLS version and cipher suites of the endpoint. Defaults to
            :data:`DEFAULT_SECURITY_POLICY` (TLS 1.2 and 1.3, no TLS 1.0); must be an enhanced policy
            (``SecurityPolicy_...``).
        endpoint_access_mode: ``STRICT`` or ``BASIC``. Defaults to ``STRICT``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cors_allowed_origins: Sequence[str],
        stage_name: str = "v1",
        throttle_rate: float = 50.0,
        throttle_burst: int = 100,
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_WEEK,
        log_encryption_key: kms.IKey | None = None,
        log_execution_data: bool = False,
        log_removal_policy: RemovalPolicy = RemovalPolicy.DESTROY,
        cloud_watch_role: bool = True,
        description: str | None = None,
        security_policy: str = DEFAULT_SECURITY_POLICY,
        endpoint_access_mode: str = DEFAULT_ENDPOINT_ACCESS_MODE,
    ) -> None:
        super().__init__(scope, construct_id)
        errors = self._errors = PropErrors(self)
        origins, throttle_rate, throttle_burst = _checked(
            errors, list(cors_allowed_origins), throttle_rate, throttle_burst
        )
        self.cors_allowed_origins: tuple[str, ...] = tuple(origins)
        self.primary_origin: str = origins[0]

        self.access_log_group: logs.LogGroup = logs.LogGroup(
            self,
            "AccessLogs",
            retention=log_retention,
            encryption_key=log_encryption_key,
            removal_policy=log_removal_policy,
        )
        self.api: apigw.RestApi = apigw.RestApi(
            self,
            "Resource",
            description=description,
            endpoint_types=[apigw.EndpointType.REGIONAL],
            cloud_watch_role=cloud_watch_role,
            cloud_watch_role_removal_policy=RemovalPolicy.RETAIN,
            default_cors_preflight_options=apigw.CorsOptions(
                allow_origins=origins,
                allow_methods=["GET", "POST", "PATCH", "DELETE", "OPTIONS"],
                allow_headers=["Authorization", "Content-Type", "Idempotency-Key"],
            ),
            deploy_options=apigw.StageOptions(
                stage_name=stage_name,
                access_log_destination=apigw.LogGroupLogDestination(self.access_log_group),
                access_log_format=apigw.AccessLogFormat.custom(json.dumps(ACCESS_LOG_FIELDS)),
                logging_level=apigw.MethodLoggingLevel.INFO,
                data_trace_enabled=log_execution_data,
                metrics_enabled=True,
                tracing_enabled=True,
                throttling_rate_limit=throttle_rate,
                throttling_burst_limit=throttle_burst,
            ),
        )
        self.stage: apigw.Stage = self.api.deployment_stage
        self._set_security_policy(security_policy, endpoint_access_mode)
        # API Gateway creates this group on first use with no retention; owning it bounds it.
        self.execution_log_group: logs.LogGroup = logs.LogGroup(
            self,
            "ExecutionLogs",
            log_group_name=f"API-Gateway-Execution-Logs_{self.api.rest_api_id}/{stage_name}",
            retention=log_retention,
            encryption_key=log_encryption_key,
            removal_policy=log_removal_policy,
        )
        self._add_limits_and_validators(throttle_rate, throttle_burst)
        self._add_gateway_responses()
        if cloud_watch_role:
            self._acknowledge_cloud_watch_role()

    def _set_security_policy(self, security_policy: str, endpoint_access_mode: str) -> None:
        """The endpoint's TLS policy and access mode, on the L1 resource."""
        errors = self._errors
        errors.check(
            security_policy.startswith("SecurityPolicy_"),
            f"security_policy must be an enhanced policy, SecurityPolicy_... (given {security_policy})",
        )
        errors.check(
            endpoint_access_mode in ("STRICT", "BASIC"),
            f"endpoint_access_mode must be STRICT or BASIC (given {endpoint_access_mode})",
        )
        # The L2 RestApi of this CDK version has no security policy; the L1 has both properties.
        resource = cast(apigw.CfnRestApi, self.api.node.default_child)
        resource.security_policy = security_policy
        resource.endpoint_access_mode = endpoint_access_mode

    def _add_limits_and_validators(self, throttle_rate: float, throttle_burst: int) -> None:
        """A usage plan with the stage's limits, and the two request validators."""
        self.usage_plan: apigw.UsagePlan = self.api.add_usage_plan(
            "UsagePlan",
            description="Stage-wide limits; per-client keys can be added to this plan.",
            throttle=apigw.ThrottleSettings(rate_limit=throttle_rate, burst_limit=throttle_burst),
            api_stages=[apigw.UsagePlanPerApiStage(api=self.api, stage=self.stage)],
        )
        self.body_validator: apigw.RequestValidator = self.api.add_request_validator(
            "BodyAndParametersValidator", validate_request_body=True, validate_request_parameters=True
        )
        self.params_validator: apigw.RequestValidator = self.api.add_request_validator(
            "ParametersValidator", validate_request_body=False, validate_request_parameters=True
        )

    def cors_headers(self) -> dict[str, str]:
        """Static CORS response headers (quoted for API Gateway parameter mappings)."""
        return {
            "Access-Control-Allow-Origin": f"'{self.primary_origin}'",
            "Access-Control-Allow-Headers": "'Authorization,Content-Type,Idempotency-Key'",
            "Vary": "'Origin'",
        }

    def _add_gateway_responses(self) -> None:
        template = (
            '{"error": {"code": "$context.error.responseType", "message": $context.error.messageString, '
            '"request_id": "$context.requestId"}}'
        )
        for response_id, response_type in (
            ("Default4xx", apigw.ResponseType.DEFAULT_4_XX),
            ("Default5xx", apigw.ResponseType.DEFAULT_5_XX),
        ):
            self.api.add_gateway_response(
                response_id,
                type=response_type,
                response_headers=self.cors_headers(),
                templates={"application/json": template},
            )
        # A body the model refuses names the failing property: API Gateway escapes the quotes of the
        # validation string (`[object has missing required properties ([\"name\"])]`), so it fits a JSON string.
        self.api.add_gateway_response(
            "BadRequestBody",
            type=apigw.ResponseType.BAD_REQUEST_BODY,
            status_code="400",
            response_headers=self.cors_headers(),
            templates={
                "application/json": '{"error": {"code": "$context.error.responseType", '
                '"message": "$context.error.message: $context.error.validationErrorString", '
                '"request_id": "$context.requestId"}}'
            },
        )
        # A 401 tells the client how to authenticate (RFC 7235). No error code: the same response
        # answers a missing header, where RFC 6750 says to name none; the body's code tells them apart.
        self.api.add_gateway_response(
            "Unauthorized",
            type=apigw.ResponseType.UNAUTHORIZED,
            status_code="401",
            response_headers={**self.cors_headers(), "WWW-Authenticate": "'Bearer'"},
            templates={"application/json": template},
        )

    def _acknowledge_cloud_watch_role(self) -> None:
        role = self.api.node.try_find_child("CloudWatchRole")
        if role is not None:
            Validations.of(role).acknowledge(
                Acknowledgment(
                    id="AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AmazonAPIGatewayPushToCloudWatchLogs]",
                    reason="The account-level API Gateway logging role is the one AWS documents; its managed "
                    "policy is limited to CloudWatch Logs and must cover every API's execution log group.",
                )
            )

    def add_model(self, model_id: str, schema: Mapping[str, Any]) -> apigw.Model:
        """A request model (application/json) from a draft-4 JSON Schema dict."""
        problems: list[str] = []
        translated = _translate(schema, problems)
        for problem in problems:
            self._errors.check(False, f"model {model_id}: {problem}")
        return self.api.add_model(
            model_id,
            content_type="application/json",
            schema=translated,
            description=cast(str | None, schema.get("title")),
        )

    @property
    def rest_api_id(self) -> str:
        return self.api.rest_api_id

    @property
    def url(self) -> str:
        return self.api.url


def _checked(
    errors: PropErrors, origins: list[str], throttle_rate: float, throttle_burst: int
) -> tuple[list[str], float, int]:
    """The CORS origins and the stage's limits; each bad one recorded (with the fix) and replaced."""
    if not errors.check(bool(origins), "cors_allowed_origins must list at least one origin (given [])"):
        origins = ["*"]  # builds; synthesis fails with the message above
    if not errors.check(
        "*" not in origins or len(origins) == 1,
        f"cors_allowed_origins: '*' must be the only entry (given {origins})",
    ):
        origins = [origin for origin in origins if origin != "*"]
    if not errors.check(
        is_unresolved(throttle_rate) or 0 < throttle_rate <= 10000,
        f"throttle_rate must be in (0, 10000] requests/s (given {throttle_rate})",
    ):
        throttle_rate = 50.0
    if not errors.check(
        is_unresolved(throttle_burst) or 0 < throttle_burst <= 5000,
        f"throttle_burst must be 1..5000 (given {throttle_burst})",
    ):
        throttle_burst = 100
    return origins, throttle_rate, throttle_burst
