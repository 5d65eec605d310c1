"""Loaders of API Gateway REST and V2 APIs and their children: ids only, as the routers read the template."""

from __future__ import annotations

import hashlib
from typing import Any

from embedded.cloudformation.intrinsics import Deployed, Pseudo
from embedded.cloudformation.loaders.base import LOADERS, Cloud, Loader, loader


def _api_id(pseudo: Pseudo, lid: str) -> str:
    return hashlib.sha256(f"{pseudo.stack_name}/{lid}".encode()).hexdigest()[:10]


@loader("AWS::ApiGateway::RestApi")
def _rest_api(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    api_id = _api_id(pseudo, lid)
    return Deployed(lid, "AWS::ApiGateway::RestApi", api_id, {"RootResourceId": f"{api_id}-root", "RestApiId": api_id})


def _api_child(resource_type: str) -> Loader:
    def load(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
        ref = (
            str(props.get("StageName") or _api_id(pseudo, lid))
            if resource_type.endswith("::Stage")
            else _api_id(pseudo, lid)
        )
        if resource_type == "AWS::ApiGateway::Model":
            ref = str(props.get("Name") or lid)
        attributes = {"ResourceId": ref, "AuthorizerId": ref, "RequestValidatorId": ref, "DeploymentId": ref}
        attributes.update({"IntegrationId": ref, "RouteId": ref, "StageName": ref, "Arn": ref})
        return Deployed(lid, resource_type, ref, attributes, dict(props))

    return load


for _type in (
    "AWS::ApiGateway::Resource",
    "AWS::ApiGateway::Method",
    "AWS::ApiGateway::Authorizer",
    "AWS::ApiGateway::RequestValidator",
    "AWS::ApiGateway::Model",
    "AWS::ApiGateway::Deployment",
    "AWS::ApiGateway::Stage",
    "AWS::ApiGatewayV2::Route",
    "AWS::ApiGatewayV2::Integration",
    "AWS::ApiGatewayV2::Authorizer",
    "AWS::ApiGatewayV2::Stage",
):
    LOADERS[_type] = _api_child(_type)


@loader("AWS::ApiGatewayV2::Api")
def _http_api(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    api_id = _api_id(pseudo, lid)
    scheme = "wss" if str(props.get("ProtocolType", "")).upper() == "WEBSOCKET" else "https"
    endpoint = f"{scheme}://{api_id}.execute-api.{cloud.region}.{pseudo.url_suffix}"
    return Deployed(lid, "AWS::ApiGatewayV2::Api", api_id, {"ApiId": api_id, "ApiEndpoint": endpoint})
