"""A WebSocket API with a Lambda REQUEST authorizer on ``$connect``, one stage, access logs and throttling."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, cast

import jsii
from aws_cdk import Acknowledgment, ArnFormat, CfnElement, Names, RemovalPolicy, Stack, Token, Validations
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_apigatewayv2 as apigwv2
from aws_cdk import aws_apigatewayv2_authorizers as authorizers
from aws_cdk import aws_apigatewayv2_integrations as integrations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from constructs_lib.validation import PropErrors, is_unresolved, struct_values

_ROUTE_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,127}$")
_STAGE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
_IDENTITY_SOURCE = re.compile(
    r"^(route\.request\.(querystring|header)\.[A-Za-z0-9._-]+|stageVariables\.[A-Za-z0-9._-]+)$"
)

#: One JSON line per request; no query string (it carries the token) and no message bodies.
ACCESS_LOG_FORMAT = json.dumps(
    {
        "requestId": "$context.requestId",
        "extendedRequestId": "$context.extendedRequestId",
        "connectionId": "$context.connectionId",
        "routeKey": "$context.routeKey",
        "eventType": "$context.eventType",
        "status": "$context.status",
        "requestTime": "$context.requestTimeEpoch",
        "sourceIp": "$context.identity.sourceIp",
        "principalId": "$context.authorizer.principalId",
        "integrationStatus": "$context.integrationStatus",
        "integrationLatency": "$context.integrationLatency",
        "error": "$context.error.message",
        "authorizerError": "$context.authorizer.error",
    },
    separators=(",", ":"),
)


class SecureWebSocketApi(Construct):
    """An API Gateway WebSocket API whose connections must pass a Lambda REQUEST authorizer.

    Example::

        chat = SecureWebSocketApi(self, "ChatApi", stage_name="dev",
                                  authorizer_handler=authorizer_fn,
                                  connect_handler=connect_fn, disconnect_handler=disconnect_fn,
                                  default_handler=default_fn, routes={"sendMessage": message_fn})
        chat.grant_manage_connections(message_fn)           # POST @connections of this stage only

    What it creates: the API (route selection ``$request.body.action``), the ``$connect`` route
    behind a Lambda REQUEST authorizer reading ``identity_source``, ``$disconnect``, ``$default``
    (whose Lambda result is returned to the client) and one route per entry of ``routes``, each
    with a Lambda proxy integration; one auto-deployed stage with default-route throttling and
    JSON access logs (without query strings, which carry the token) in a log group with a
    retention. Only ``$connect`` can have an authorizer in a WebSocket API: a connection that
    exists has passed it, so later routes need none.

    Args:
        stage_name: the stage (also the path of the management endpoint).
        authorizer_handler: the REQUEST authorizer function of ``$connect``.
        connect_handler / disconnect_handler / default_handler: the three predefined routes.
        routes: custom route keys (``action`` values) and their functions. Defaults to none.
        identity_source: where the authorizer reads the credential. Defaults to
            ``["route.request.querystring.token"]`` (browsers cannot set handshake headers); a
            handshake without it is refused with 401 before the authorizer runs.
        default_route_returns_response: send the ``$default`` function's result to the client.
            Defaults to True.
        throttle_rate_limit / throttle_burst_limit: requests per second and burst of every route
            of the stage. Default to 50 and 100.
        route_throttles: a route's own limits (``"$connect"``, ``"sendMessage"``, ...), below
            the stage's, so that one route's flood cannot use up another's share. Defaults to
            none: every route has the stage's limits.
        existing_access_log_group: bring the access log group. Defaults to a new one shaped by
            ``access_log_group_props`` (giving both fails).
        access_log_group_props: props of the new access log group. Defaults to one-week
            retention, DESTROY on stack deletion, CloudWatch Logs' own encryption.
        api_name: defaults to the construct's unique id (path-based, stable). description: defaults to none.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        stage_name: str,
        authorizer_handler: lambda_.IFunction,
        connect_handler: lambda_.IFunction,
        disconnect_handler: lambda_.IFunction,
        default_handler: lambda_.IFunction,
        routes: Mapping[str, lambda_.IFunction] | None = None,
        identity_source: Sequence[str] = ("route.request.querystring.token",),
        default_route_returns_response: bool = True,
        throttle_rate_limit: float = 50,
        throttle_burst_limit: int = 100,
        route_throttles: Mapping[str, apigwv2.ThrottleSettings] | None = None,
        existing_access_log_group: logs.ILogGroup | None = None,
        access_log_group_props: logs.LogGroupProps | None = None,
        api_name: str | None = None,
        description: str | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        errors = self._errors = PropErrors(self)
        routes, identity_source, route_throttles = _checked(
            errors, stage_name, routes, identity_source, throttle_rate_limit, throttle_burst_limit, route_throttles
        )
        if not errors.check_exclusive(
            existing_access_log_group=existing_access_log_group, access_log_group_props=access_log_group_props
        ):
            access_log_group_props = None

        self.authorizer = authorizers.WebSocketLambdaAuthorizer(
            "ConnectAuthorizer", authorizer_handler, identity_source=list(identity_source)
        )
        self.api: apigwv2.WebSocketApi = apigwv2.WebSocketApi(
            self,
            "Resource",
            api_name=api_name or Names.unique_id(self),
            description=description,
            route_selection_expression="$request.body.action",
            connect_route_options=apigwv2.WebSocketRouteOptions(
                integration=integrations.WebSocketLambdaIntegration("ConnectIntegration", connect_handler),
                authorizer=self.authorizer,
            ),
            disconnect_route_options=apigwv2.WebSocketRouteOptions(
                integration=integrations.WebSocketLambdaIntegration("DisconnectIntegration", disconnect_handler),
            ),
            default_route_options=apigwv2.WebSocketRouteOptions(
                integration=integrations.WebSocketLambdaIntegration("DefaultIntegration", default_handler),
                return_response=default_route_returns_response,
            ),
        )
        self._add_routes(routes)
        self.access_log_group: logs.ILogGroup = existing_access_log_group or self._new_access_log_group(
            access_log_group_props
        )
        self.stage: apigwv2.WebSocketStage = apigwv2.WebSocketStage(
            self,
            "Stage",
            web_socket_api=self.api,
            stage_name=stage_name,
            auto_deploy=True,
            throttle=apigwv2.ThrottleSettings(rate_limit=throttle_rate_limit, burst_limit=throttle_burst_limit),
            access_log_settings=_AccessLogSettings(
                apigwv2.LogGroupLogDestination(self.access_log_group),
                apigw.AccessLogFormat.custom(ACCESS_LOG_FORMAT),
            ),
        )
        if route_throttles:
            self._throttle_routes(route_throttles)

    def _add_routes(self, routes: Mapping[str, lambda_.IFunction]) -> None:
        """The custom routes; no route but $connect takes an authorizer (acknowledged for cdk-nag)."""
        for key, handler in sorted(routes.items()):
            self.api.add_route(
                key,
                integration=integrations.WebSocketLambdaIntegration(f"{key[0].upper()}{key[1:]}Integration", handler),
            )
        for key in ("$disconnect", "$default", *routes):
            route = self.api.node.find_child(f"{key}-Route")
            Validations.of(route).acknowledge(
                Acknowledgment(
                    id="AwsSolutions-APIG4",
                    reason="A WebSocket API authorizes once, on $connect (Lambda REQUEST authorizer); API Gateway "
                    "accepts no authorizer on other routes, which only an authorized connection can reach.",
                )
            )

    def _new_access_log_group(self, props: logs.LogGroupProps | None) -> logs.LogGroup:
        """The stage's access log group: one week, destroyed with the stack, unless ``props`` say otherwise."""
        shape: dict[str, Any] = {"retention": logs.RetentionDays.ONE_WEEK, "removal_policy": RemovalPolicy.DESTROY}
        shape.update({name: value for name, value in struct_values(props).items() if value is not None})
        return logs.LogGroup(self, "AccessLogs", **shape)

    def _throttle_routes(self, route_throttles: Mapping[str, apigwv2.ThrottleSettings]) -> None:
        """Route settings on the stage; the stage waits for the routes (they must exist when it names them)."""
        stage = cast(apigwv2.CfnStage, self.stage.node.default_child)
        stage.add_property_override(
            "RouteSettings",
            {
                key: {"ThrottlingRateLimit": limits.rate_limit, "ThrottlingBurstLimit": limits.burst_limit}
                for key, limits in sorted(route_throttles.items())
            },
        )
        for key in sorted(route_throttles):
            self.stage.node.add_dependency(self.api.node.find_child(f"{key}-Route"))

    @property
    def management_endpoint(self) -> str:
        """``https://<api-id>.execute-api.<region>.<suffix>/<stage>``: where frames are posted."""
        return self.stage.callback_url

    def connections_arn(self, method: str = "POST") -> str:
        """The execute-api ARN of this stage's ``@connections`` for one management API method."""
        return Stack.of(self).format_arn(
            service="execute-api",
            resource=self.api.api_id,
            resource_name=f"{self.stage.stage_name}/{method}/@connections/*",
            arn_format=ArnFormat.SLASH_RESOURCE_NAME,
        )

    def grant_manage_connections(self, grantee: iam.IGrantable, *methods: str) -> iam.Grant:
        """Let ``grantee`` use the management API of this stage: POST (send frames) unless told otherwise.

        Other methods: ``GET`` (connection info), ``DELETE`` (close a connection).
        """
        chosen = [
            method
            for method in methods or ("POST",)
            if self._errors.check(
                method in ("POST", "GET", "DELETE"), f"methods must be POST, GET or DELETE (given {method!r})"
            )
        ]
        grant = iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["execute-api:ManageConnections"],
            resource_arns=[self.connections_arn(method) for method in chosen],
        )
        principal = grantee.grant_principal
        if isinstance(principal, Construct):
            api_id = Stack.of(self).resolve(cast(CfnElement, self.api.node.default_child).logical_id)
            for method in chosen:
                Validations.of(principal).acknowledge(
                    Acknowledgment(
                        id="AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:execute-api:<AWS::Region>:"
                        f"<AWS::AccountId>:<{api_id}>/{self.stage.stage_name}/{method}/@connections/*]",
                        reason="The management API addresses a connection by its id, known only at run time; "
                        f"the grant is scoped to {method} on the @connections of this API's one stage.",
                    )
                )
        return grant


@jsii.implements(apigwv2.IAccessLogSettings)
class _AccessLogSettings:
    """``IAccessLogSettings`` for the stage (the interface has no concrete class in aws-cdk-lib)."""

    def __init__(self, destination: apigwv2.IAccessLogDestination, log_format: apigw.AccessLogFormat) -> None:
        self._destination = destination
        self._format = log_format

    @property
    def destination(self) -> apigwv2.IAccessLogDestination:
        return self._destination

    @property
    def format(self) -> apigw.AccessLogFormat:
        return self._format


def _checked(
    errors: PropErrors,
    stage_name: str,
    routes: Mapping[str, lambda_.IFunction] | None,
    identity_source: Sequence[str],
    throttle_rate_limit: float,
    throttle_burst_limit: int,
    route_throttles: Mapping[str, apigwv2.ThrottleSettings] | None,
) -> tuple[dict[str, lambda_.IFunction], Sequence[str], dict[str, apigwv2.ThrottleSettings]]:
    """The props a WebSocket API is built from: each bad one recorded with its fix, and left out."""
    errors.check(
        Token.is_unresolved(stage_name) or bool(_STAGE_NAME.fullmatch(stage_name)),
        f"stage_name must be 1-128 of [A-Za-z0-9_-] (given {stage_name!r})",
    )
    checked_routes = {
        key: handler
        for key, handler in (routes or {}).items()
        if errors.check(
            bool(_ROUTE_KEY.fullmatch(key)),
            f"route keys must be action names like 'sendMessage' (given {key!r}); "
            "$connect, $disconnect and $default have their own handler arguments",
        )
    }
    if not errors.check(bool(identity_source), "identity_source must name at least one source (given none)"):
        identity_source = ("route.request.querystring.token",)
    for source in identity_source:
        errors.check(
            Token.is_unresolved(source) or bool(_IDENTITY_SOURCE.fullmatch(source)),
            f"identity_source entries look like 'route.request.querystring.token' (given {source!r})",
        )
    errors.check(
        _within(throttle_rate_limit, 10000) and _within(throttle_burst_limit, 5000),
        "throttle_rate_limit must be in (0, 10000] and throttle_burst_limit in (0, 5000] "
        f"(given {throttle_rate_limit}, {throttle_burst_limit})",
    )
    checked_throttles = {
        key: limits
        for key, limits in (route_throttles or {}).items()
        if errors.check(
            key in ("$connect", "$disconnect", "$default", *checked_routes),
            f"route_throttles keys must be $connect, $disconnect, $default or a key of routes (given {key!r})",
        )
        and errors.check(
            limits.rate_limit is not None
            and limits.burst_limit is not None
            and _within(limits.rate_limit, 10000)
            and _within(limits.burst_limit, 5000),
            f"route_throttles[{key!r}] needs rate_limit in (0, 10000] and burst_limit in (0, 5000] "
            f"(given {limits.rate_limit}, {limits.burst_limit})",
        )
    }
    return checked_routes, identity_source, checked_throttles


def _within(value: float, high: float) -> bool:
    """``value`` in (0, high], or a token (never judged)."""
    return is_unresolved(value) or 0 < value <= high
