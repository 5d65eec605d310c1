"""A WebSocket API router built from a template's ``AWS::ApiGatewayV2::*`` resources.

Every route is throttled first as the stage's route settings say (``embedded.throttles``: 429 on
the handshake, a ``Too Many Requests`` frame for a message). ``connect()`` runs the ``$connect``
route's REQUEST authorizer (identity sources checked first,
401 without them; the returned policy evaluated against the route ARN) and its integration;
``send()`` selects the route by the API's route selection expression (``$request.body.<key>``)
or ``$default`` and, for a route with a route response, returns the integration's body to the
client as a frame; ``disconnect()`` runs ``$disconnect``. Every route event is shaped as API
Gateway sends it, with the authorizer context of the connection.

The management API (``@connections``) is faked on moto's: frames posted by handlers are kept per
connection (``frames(connection_id)``), a post to a closed connection answers 410 Gone (recorded
in ``gone``), a post over API Gateway's 128 KB message limit answers 413 PayloadTooLarge, and a
DELETE closes the connection and runs ``$disconnect``, as API Gateway does.

A server that puts real sockets in front of the router (``make local``) listens with
``on_frame(connection_id, frame)`` (every frame the client receives, as it is delivered: posted
by a handler or a route response) and ``on_close(connection_id)`` (the server side closed the
connection); when the client's socket goes away it calls ``close()`` at once (posts answer 410
from then on) and ``disconnect()`` when ``$disconnect`` may run.
"""

from __future__ import annotations

import json
import re
import urllib.parse
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

from moto.apigatewaymanagementapi.models import ApiGatewayManagementApiBackend
from moto.core.exceptions import JsonRESTError

from embedded.cloudformation.deploy import DeployedStack
from embedded.cloudformation.loaders import Cloud
from embedded.events import Api, ws_authorizer_event, ws_event
from embedded.iam.access import Access
from embedded.services.apigateway_rest import _LAMBDA_URI, SOURCE_IP, USER_AGENT, _policy_effect
from embedded.services.lambda_invoke import invoke
from embedded.throttles import TokenBucket, account_bucket, websocket_throttle


class ConnectionRefused(Exception):
    """The handshake was refused: ``status`` is what the client sees (401, 403, 500...).

    ``body`` is the ``$connect`` integration's own response body when it was the handler that
    refused (a Lambda proxy integration's ``{"statusCode": 410, "body": ...}``): API Gateway answers
    the handshake with that status and body, so a client can read the handler's refusal code.
    """

    def __init__(self, status: int, reason: str, body: str | None = None) -> None:
        super().__init__(f"{status}: {reason}")
        self.status = status
        self.reason = reason
        self.body = body


#: API Gateway's WebSocket message payload limit (a frame is at most 32 KB of it).
MAX_MESSAGE_BYTES = 128 * 1024


class _Gone(JsonRESTError):
    code = 410

    def __init__(self) -> None:
        super().__init__("GoneException", "")


class _PayloadTooLarge(JsonRESTError):
    code = 413

    def __init__(self) -> None:
        super().__init__("PayloadTooLargeException", "Request payload size exceeds the maximum allowed")


@dataclass
class Connection:
    connection_id: str
    authorizer: dict[str, Any]
    connected_at: float
    open: bool = True
    disconnected: bool = False  # $disconnect has run
    frames: list[Any] = field(default_factory=list)
    query: dict[str, str] = field(default_factory=dict)


@dataclass
class Route:
    key: str
    integration_function: str | None
    authorizer: dict[str, Any] | None
    returns_response: bool
    function_arn: str | None = None
    authorizer_id: str | None = None


class WebSocketRouter:
    """API Gateway for one ``AWS::ApiGatewayV2::Api`` (WEBSOCKET) of a deployed stack."""

    def __init__(
        self,
        cloud: Cloud,
        stack: DeployedStack,
        api_logical_id: str,
        clock: Callable[[], float],
        account: TokenBucket | None = None,
    ) -> None:
        self.cloud = cloud
        self.clock = clock
        api = stack.resources[api_logical_id]
        self.api_id = api.ref
        selection = str(api.properties.get("RouteSelectionExpression", "$request.body.action"))
        match = re.fullmatch(r"\$request\.body\.([A-Za-z0-9_]+)", selection)
        if match is None:
            raise NotImplementedError(f"route selection expression {selection} is not emulated")
        self.selection_key = match.group(1)
        mine = [r for r in stack.resources.values() if r.properties.get("ApiId") == self.api_id]
        integrations = {r.ref: r.properties for r in mine if r.type == "AWS::ApiGatewayV2::Integration"}
        authorizers = {r.ref: r.properties for r in mine if r.type == "AWS::ApiGatewayV2::Authorizer"}
        stages = [r.properties for r in mine if r.type == "AWS::ApiGatewayV2::Stage"]
        self.stage = str(stages[0]["StageName"]) if stages else "production"
        #: the stage's route throttles (429 on the handshake, a "Too Many Requests" frame on a message)
        self.throttle = websocket_throttle(stages[0] if stages else {}, clock, account or account_bucket(clock))
        self.routes: dict[str, Route] = {}
        for r in mine:
            if r.type != "AWS::ApiGatewayV2::Route":
                continue
            props = r.properties
            target = str(props.get("Target", ""))
            function = function_arn = None
            if target.startswith("integrations/"):
                integration = integrations[target.removeprefix("integrations/")]
                uri = _LAMBDA_URI.match(str(integration.get("IntegrationUri", "")))
                if str(integration.get("IntegrationType")) != "AWS_PROXY" or uri is None:
                    raise NotImplementedError(f"route {props['RouteKey']}: only Lambda proxy integrations are emulated")
                function_arn = uri.group("arn")
                function = function_arn.split(":")[6]
            authorizer = None
            if str(props.get("AuthorizationType", "NONE")).upper() == "CUSTOM":
                authorizer = authorizers[str(props["AuthorizerId"])]
            self.routes[str(props["RouteKey"])] = Route(
                str(props["RouteKey"]),
                function,
                authorizer,
                bool(props.get("RouteResponseSelectionExpression")),
                function_arn,
                str(props["AuthorizerId"]) if authorizer is not None else None,
            )
        self.connections: dict[str, Connection] = {}
        #: connection ids of posts answered 410 Gone, in order
        self.gone: list[str] = []
        self.on_frame: Callable[[str, Any], None] | None = None
        self.on_close: Callable[[str], None] | None = None
        self.api = Api(api_id=self.api_id, stage=self.stage, account=cloud.account, region=cloud.region)
        self.domain = self.api.domain

    # ------------------------------------------------------------------ client side

    def connect(self, *, query: Mapping[str, str] | None = None, headers: Mapping[str, str] | None = None) -> str:
        """Open a connection; returns its id or raises ``ConnectionRefused``."""
        query, headers = dict(query or {}), dict(headers or {})
        connection_id = uuid.uuid4().hex[:14] + "="
        route = self.routes.get("$connect")
        if not self.throttle.admit("$connect"):
            raise ConnectionRefused(429, "Too Many Requests")
        authorizer_context: dict[str, Any] = {}
        if route and route.authorizer:
            if not self._may_invoke(route, authorizer_id=str(route.authorizer_id)):
                raise ConnectionRefused(500, "API Gateway may not invoke the $connect authorizer")
            authorizer_context = self._authorize(route.authorizer, connection_id, query, headers)
        connection = Connection(connection_id, authorizer_context, self.clock(), query=query)
        self.connections[connection_id] = connection
        if route and route.integration_function:
            if not self._may_invoke(route):
                connection.open = False
                connection.disconnected = True
                raise ConnectionRefused(500, "API Gateway may not invoke the $connect integration")
            event = self._event(connection, "$connect", query=query, headers=headers)
            outcome = invoke(self.cloud.client("lambda"), route.integration_function, event)
            status = (
                int(outcome.payload.get("statusCode", 200)) if outcome.ok and isinstance(outcome.payload, dict) else 500
            )
            if not 200 <= status < 300:
                connection.open = False
                connection.disconnected = True  # never connected: no $disconnect either
                body = outcome.payload.get("body") if outcome.ok and isinstance(outcome.payload, dict) else None
                raise ConnectionRefused(
                    status, f"$connect integration answered {status}", body if isinstance(body, str) else None
                )
        return connection_id

    def send(self, connection_id: str, body: Any) -> Any:
        """Send one message; returns the route response's frame for two-way routes, else None.

        A connection whose socket was ``close()``d but not yet disconnected still routes what
        the client sent before it left (as API Gateway does); its frames then answer 410.
        """
        connection = self.connections.get(connection_id)
        if connection is None or connection.disconnected:
            raise KeyError(f"connection {connection_id} is not open")
        raw = body if isinstance(body, str) else json.dumps(body)
        try:
            key = str(json.loads(raw).get(self.selection_key))
        except (ValueError, AttributeError):
            key = ""
        route = self.routes.get(key) or self.routes.get("$default")
        if route is not None and not self.throttle.admit(route.key):
            frame = {"message": "Too Many Requests", "connectionId": connection_id, "requestId": str(uuid.uuid4())}
            self._deliver(connection, frame)
            return frame
        if route is None or route.integration_function is None:
            frame = {"message": "Forbidden", "connectionId": connection_id}
            self._deliver(connection, frame)
            return frame
        event = self._event(connection, route.key, body=raw)
        permitted = self._may_invoke(route)
        outcome = invoke(self.cloud.client("lambda"), route.integration_function, event) if permitted else None
        if outcome is None or not outcome.ok:
            frame = {
                "message": "Internal server error",
                "connectionId": connection_id,
                "requestId": event["requestContext"]["requestId"],
            }
            self._deliver(connection, frame)
            return frame
        if route.returns_response and isinstance(outcome.payload, dict) and outcome.payload.get("body") is not None:
            response_body = outcome.payload["body"]
            frame = _decode(response_body)
            self._deliver(connection, frame)
            return frame
        return None

    def close(self, connection_id: str) -> None:
        """The client's socket is gone: posts answer 410 from now on; ``disconnect()`` runs ``$disconnect``."""
        self._open(connection_id).open = False

    def disconnect(self, connection_id: str, *, status_code: int = 1001, reason: str = "Going away") -> None:
        """The client closes the connection (or its socket was ``close()``d before); ``$disconnect`` runs."""
        connection = self.connections.get(connection_id)
        if connection is None or connection.disconnected:
            raise KeyError(f"connection {connection_id} is not connected")
        connection.open = False
        connection.disconnected = True
        route = self.routes.get("$disconnect")
        if route and route.integration_function and self._may_invoke(route):
            event = self._event(connection, "$disconnect", disconnect_status_code=status_code, disconnect_reason=reason)
            invoke(self.cloud.client("lambda"), route.integration_function, event)

    def frames(self, connection_id: str) -> list[Any]:
        """Every frame the client of this connection received, in order."""
        return list(self.connections[connection_id].frames)

    # ------------------------------------------------------------------ internals

    def _may_invoke(self, route: Route, *, authorizer_id: str | None = None) -> bool:
        """Whether the route's (or the authorizer's) function lets API Gateway invoke it."""
        guard = self.cloud.guard
        function = route.function_arn
        if authorizer_id is not None:
            match = _LAMBDA_URI.match(str((route.authorizer or {}).get("AuthorizerUri", "")))
            function = match.group("arn") if match else None
        if guard is None or function is None:
            return True
        base = f"arn:aws:execute-api:{self.cloud.region}:{self.cloud.account}:{self.api_id}"
        source = (
            f"{base}/authorizers/{authorizer_id}" if authorizer_id is not None else f"{base}/{self.stage}/{route.key}"
        )
        context = {"aws:SourceArn": source, "aws:SourceAccount": self.cloud.account}
        wanted = [Access("lambda:InvokeFunction", function, context)]
        return guard.deliver("apigateway.amazonaws.com", wanted, f"WebSocket API {self.api_id} {route.key}") is None

    def _deliver(self, connection: Connection, frame: Any) -> None:
        connection.frames.append(frame)
        if self.on_frame is not None and connection.open:
            self.on_frame(connection.connection_id, frame)

    def _open(self, connection_id: str) -> Connection:
        connection = self.connections.get(connection_id)
        if connection is None or not connection.open:
            raise KeyError(f"connection {connection_id} is not open")
        return connection

    def _event(self, connection: Connection, route_key: str, **parts: Any) -> dict[str, Any]:
        """The event of ``route_key`` on ``connection`` now, with its authorizer context."""
        return ws_event(
            route_key,
            api=self.api,
            connection_id=connection.connection_id,
            authorizer=dict(connection.authorizer) if connection.authorizer else None,
            connected_at_ms=int(connection.connected_at * 1000),
            epoch_ms=int(self.clock() * 1000),
            source_ip=SOURCE_IP,
            user_agent=USER_AGENT,
            **parts,
        )

    def _authorize(
        self, authorizer: dict[str, Any], connection_id: str, query: dict[str, str], headers: dict[str, str]
    ) -> dict[str, Any]:
        lowered = {k.lower(): v for k, v in headers.items()}
        for source in authorizer.get("IdentitySource") or []:
            source = str(source)
            if source.startswith("route.request.querystring."):
                present = bool(query.get(source.removeprefix("route.request.querystring.")))
            elif source.startswith("route.request.header."):
                present = bool(lowered.get(source.removeprefix("route.request.header.").lower()))
            else:
                present = True
            if not present:
                raise ConnectionRefused(401, f"identity source {source} missing")
        uri = _LAMBDA_URI.match(str(authorizer.get("AuthorizerUri", "")))
        if uri is None:
            raise NotImplementedError("only Lambda REQUEST authorizers are emulated")
        now_ms = int(self.clock() * 1000)
        event = ws_authorizer_event(
            api=self.api,
            connection_id=connection_id,
            query=query,
            headers=headers,
            connected_at_ms=now_ms,
            epoch_ms=now_ms,
            source_ip=SOURCE_IP,
            user_agent=USER_AGENT,
        )
        method_arn = event["methodArn"]
        outcome = invoke(self.cloud.client("lambda"), uri.group("arn").split(":")[6], event)
        if not outcome.ok:
            if isinstance(outcome.payload, dict) and outcome.payload.get("errorMessage") == "Unauthorized":
                raise ConnectionRefused(401, "authorizer raised Unauthorized")
            raise ConnectionRefused(500, f"authorizer failed: {outcome.error}")
        result = outcome.payload if isinstance(outcome.payload, dict) else {}
        if _policy_effect(result.get("policyDocument", {}), method_arn) != "Allow":
            raise ConnectionRefused(403, "authorizer policy does not allow $connect")
        context = {str(k): v for k, v in (result.get("context") or {}).items()}
        context["principalId"] = result.get("principalId")
        return context

    # ------------------------------------------------------------------ management API

    @contextmanager
    def management_api(self) -> Iterator[None]:
        """Serve ``@connections`` from this router's connections (see module docstring)."""
        router = self

        def post_to_connection(backend: Any, data: bytes, connection_id: str) -> None:
            connection = router.connections.get(urllib.parse.unquote(connection_id))
            if connection is None or not connection.open:
                router.gone.append(urllib.parse.unquote(connection_id))
                raise _Gone()
            if len(data) > MAX_MESSAGE_BYTES:
                raise _PayloadTooLarge()
            router._deliver(connection, _decode(data))

        def get_connection(backend: Any, connection_id: str) -> Any:
            connection = router.connections.get(urllib.parse.unquote(connection_id))
            if connection is None or not connection.open:
                raise _Gone()
            from moto.apigatewaymanagementapi.models import Connection as MotoConnection

            info = MotoConnection()
            info.connected_at = connection.connected_at
            return info

        def delete_connection(backend: Any, connection_id: str) -> None:
            connection = router.connections.get(urllib.parse.unquote(connection_id))
            if connection is None or not connection.open:
                raise _Gone()
            router.disconnect(urllib.parse.unquote(connection_id), status_code=1000, reason="closed by the server")
            if router.on_close is not None:
                router.on_close(urllib.parse.unquote(connection_id))

        with (
            mock.patch.object(ApiGatewayManagementApiBackend, "post_to_connection", post_to_connection),
            mock.patch.object(ApiGatewayManagementApiBackend, "get_connection", get_connection),
            mock.patch.object(ApiGatewayManagementApiBackend, "delete_connection", delete_connection),
        ):
            yield


def _decode(data: Any) -> Any:
    text = data.decode() if isinstance(data, (bytes, bytearray)) else str(data)
    try:
        return json.loads(text)
    except ValueError:
        return text
