"""API Gateway -> Step Functions ``StartExecution`` directly: no Lambda between them, no code to run or patch.

Example::

    start = StepFunctionsStartExecution(
        self, "StartHandoff", state_machine=handoff,
        input_fields={"session_id": InputField.path("id"), "reason": InputField.body("reason"),
                      "requested_by": InputField.authorizer("sub")},
        cors_headers={"Access-Control-Allow-Origin": "'https://app.example.com'"})
    resource.add_method("POST", start.integration, method_responses=start.method_responses, ...)

The execution ``name`` is the request's ``Idempotency-Key`` header (or, without one, the API
Gateway request id), so a retried call with the same key and body starts nothing new: Step
Functions answers a Standard workflow's repeated ``StartExecution`` with the running execution,
and ``ExecutionAlreadyExists`` (mapped to 409) when the input differs or the execution closed.

The request template never copies request text into JSON unescaped: strings from the path,
headers, the authorizer and the request context go through ``$util.escapeJavaScript`` once for
the execution input and once more for the request body that embeds it; body fields come from
``$input.json`` (JSON produced by API Gateway's own serializer) and are escaped once more. The
``\\'`` that escapeJavaScript writes for a single quote is not valid JSON and is turned back into
``'``. A client therefore controls only the *values* of the fields listed in ``input_fields``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_iam as iam
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from constructs_lib.validation import PropErrors
from constructs_lib.workflow_defaults import grant_history_key

Source = Literal["path", "header", "authorizer", "context", "body"]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_PARAM = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
_BODY_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_UNQUOTE = '.replaceAll("\\\\\'", "\'")'  # VTL: .replaceAll("\\'", "'")


@dataclass(frozen=True)
class InputField:
    """Where one field of the execution input comes from. Build with the class methods."""

    source: Source
    name: str
    #: For ``body`` fields: the JSON text used when the field is absent (default ``null``).
    default_json: str = "null"

    @classmethod
    def path(cls, name: str) -> InputField:
        """A path parameter, as a string."""
        return cls("path", name)

    @classmethod
    def header(cls, name: str) -> InputField:
        """A request header, as a string ("" when absent)."""
        return cls("header", name)

    @classmethod
    def authorizer(cls, key: str) -> InputField:
        """A key of the Lambda authorizer's context (``$context.authorizer.<key>``), as a string."""
        return cls("authorizer", key)

    @classmethod
    def context(cls, name: str) -> InputField:
        """A request context variable such as ``requestId``, as a string."""
        return cls("context", name)

    @classmethod
    def body(cls, name: str, *, default_json: str = "null") -> InputField:
        """A top-level field of the JSON body, with its JSON type; ``default_json`` when absent."""
        return cls("body", name, default_json)

    def reference(self) -> str:
        """The VTL expression that reads the raw value."""
        if self.source == "path":
            return f"$input.params().path.get('{self.name}')"
        if self.source == "header":
            return f"$input.params().header.get('{self.name}')"
        if self.source == "authorizer":
            return f"$context.authorizer.{self.name}"
        if self.source == "context":
            return f"$context.{self.name}"
        return f"$input.json('$.{self.name}')"


def template_errors(input_fields: Mapping[str, InputField], idempotency_header: str) -> list[str]:
    """What would break the request template, one message per problem (empty when it is sound)."""
    if not input_fields:
        return ["input_fields must name at least one field (given {})"]
    errors = []
    for key, field in input_fields.items():
        if not _NAME.fullmatch(key):
            errors.append(f"input field name must match {_NAME.pattern} (given {key!r})")
        pattern = _BODY_PATH if field.source == "body" else _PARAM
        if not pattern.fullmatch(field.name):
            errors.append(
                f"{field.source} name of input field {key!r} must match {pattern.pattern} (given {field.name!r})"
            )
        if field.source == "context" and not re.fullmatch(r"[A-Za-z][A-Za-z0-9.]*", field.name):
            errors.append(f"context variable of {key!r} must be like requestId (given {field.name!r})")
    if not _PARAM.fullmatch(idempotency_header):
        errors.append(f"idempotency_header must match {_PARAM.pattern} (given {idempotency_header!r})")
    return errors


def start_execution_template(
    state_machine_arn: str, input_fields: Mapping[str, InputField], *, idempotency_header: str = "Idempotency-Key"
) -> str:
    """The VTL request template of a StartExecution call (see the module docstring).

    Raises ValueError naming the first problem of :func:`template_errors`.
    """
    errors = template_errors(input_fields, idempotency_header)
    if errors:
        raise ValueError(errors[0])
    lines = [
        f"#set($idemKey = $input.params().header.get('{idempotency_header}'))",
        '#if("$!idemKey" == "")',
        f"#set($idemKey = $input.params().header.get('{idempotency_header.lower()}'))",
        "#end",
        '#if("$!idemKey" == "")',
        "#set($idemKey = $context.requestId)",
        "#end",
    ]
    parts = []
    for index, (key, field) in enumerate(input_fields.items()):
        var = f"$f{index}"
        if field.source == "body":
            raw = f"$r{index}"
            lines += [
                f"#set({raw} = $input.path('$.{field.name}'))",
                f'#if("$!{raw[1:]}" == "")',
                f"#set({var} = '{field.default_json}')",
                "#else",
                f"#set({var} = {field.reference()})",
                "#end",
            ]
            parts.append(f'\\"{key}\\":$util.escapeJavaScript({var}){_UNQUOTE}')
        else:
            lines += [
                f"#set({var} = {field.reference()})",
                f'#if("$!{var[1:]}" == "")',
                f"#set({var} = '')",
                "#end",
                f"#set({var} = $util.escapeJavaScript({var}){_UNQUOTE})",
            ]
            parts.append(f'\\"{key}\\":\\"$util.escapeJavaScript({var}){_UNQUOTE}\\"')
    lines += [
        "{",
        f'  "stateMachineArn": "{state_machine_arn}",',
        f'  "name": "$util.escapeJavaScript($idemKey){_UNQUOTE}",',
        '  "input": "{' + ",".join(parts) + '}"',
        "}",
    ]
    return "\n".join(lines)


ACCEPTED_TEMPLATE = (
    '{"execution_arn": "$util.escapeJavaScript($input.path(\'$.executionArn\'))", '
    '"started_at": $input.json(\'$.startDate\'), "request_id": "$context.requestId"}'
)
CLIENT_ERROR_TEMPLATE = "\n".join(
    [
        "#set($type = \"$!input.path('$.__type')\")",
        '#if($type.contains("ExecutionAlreadyExists"))',
        "#set($context.responseOverride.status = 409)",
        '{"error": {"code": "Conflict", "message": "this Idempotency-Key was used for another request or a '
        'finished execution", "request_id": "$context.requestId"}}',
        '#elseif($type.contains("InvalidName"))',
        '{"error": {"code": "ValidationError", "message": "Idempotency-Key must be 1-80 letters, digits, - or _", '
        '"request_id": "$context.requestId"}}',
        "#else",
        '{"error": {"code": "BadRequest", "message": "the workflow could not be started", '
        '"request_id": "$context.requestId"}}',
        "#end",
    ]
)
SERVER_ERROR_TEMPLATE = (
    '{"error": {"code": "InternalError", "message": "internal error; quote the request id", '
    '"request_id": "$context.requestId"}}'
)


class StepFunctionsStartExecution(Construct):
    """A non-proxy AWS integration that starts an execution and answers 202 with its ARN.

    Responses: 202 ``{"execution_arn", "started_at", "request_id"}``; 409 when the
    Idempotency-Key was used with another input (or its execution finished); 400 for any other
    client error Step Functions reports; 500 otherwise. No Step Functions error text reaches the
    caller.

    Args:
        state_machine: the workflow to start.
        input_fields: execution input field name -> where its value comes from.
        idempotency_header: header whose value becomes the execution name. Defaults to
            ``Idempotency-Key`` (its lowercase form is accepted too).
        cors_headers: static response headers (values quoted, as API Gateway mappings want)
            added to every response. Defaults to none.
        existing_role: role API Gateway assumes; it is granted StartExecution on
            ``state_machine`` (and the use of its history key, when a customer key encrypts it).
            Defaults to a new role that may do only that.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        state_machine: sfn.IStateMachine,
        input_fields: Mapping[str, InputField],
        idempotency_header: str = "Idempotency-Key",
        cors_headers: Mapping[str, str] | None = None,
        existing_role: iam.IRole | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        errors = PropErrors(self)
        problems = template_errors(input_fields, idempotency_header)
        for problem in problems:
            errors.check(False, problem)
        # With a problem, synthesis fails on it; the template is then never deployed.
        self.request_template: str = (
            ""
            if problems
            else start_execution_template(
                state_machine.state_machine_arn, input_fields, idempotency_header=idempotency_header
            )
        )
        self.role: iam.IRole = existing_role or iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("apigateway.amazonaws.com"),
            description="API Gateway starts this one workflow",
        )
        state_machine.grant_start_execution(self.role)
        grant_history_key(self.role, state_machine, ["states:StartExecution"])
        headers = dict(cors_headers or {})
        integration_headers = {f"method.response.header.{name}": value for name, value in headers.items()}
        method_headers = {f"method.response.header.{name}": True for name in headers}

        def response(status: str, template: str, pattern: str | None = None) -> apigw.IntegrationResponse:
            return apigw.IntegrationResponse(
                status_code=status,
                selection_pattern=pattern,
                response_parameters=integration_headers or None,
                response_templates={"application/json": template},
            )

        self.integration: apigw.AwsIntegration = apigw.AwsIntegration(
            service="states",
            action="StartExecution",
            options=apigw.IntegrationOptions(
                credentials_role=self.role,
                passthrough_behavior=apigw.PassthroughBehavior.NEVER,
                request_templates={"application/json": self.request_template},
                request_parameters={
                    "integration.request.header.Content-Type": "'application/x-amz-json-1.0'",
                },
                integration_responses=[
                    response("202", ACCEPTED_TEMPLATE),
                    response("400", CLIENT_ERROR_TEMPLATE, r"4\d{2}"),
                    response("500", SERVER_ERROR_TEMPLATE, r"5\d{2}"),
                ],
            ),
        )
        self.method_responses: list[apigw.MethodResponse] = [
            apigw.MethodResponse(status_code=status, response_parameters=method_headers or None)
            for status in ("202", "400", "409", "500")
        ]

    @staticmethod
    def request_parameters(*, path: tuple[str, ...] = (), optional_headers: tuple[str, ...] = ()) -> dict[str, bool]:
        """``request_parameters`` for ``add_method``: required path parameters, optional headers."""
        params = {f"method.request.path.{name}": True for name in path}
        params.update({f"method.request.header.{name}": False for name in optional_headers})
        return params
