"""WebSocket ``$connect`` REQUEST authorizer: the JWT from the ``token`` query string parameter.

Browsers cannot set headers on a WebSocket handshake, so the token travels in the query string
(``wss://.../dev?token=<jwt>``); the access log format leaves query strings out. Verification is
:func:`lambdas.shared.tokens.verify`, the same code and rules as the REST authorizer. Only the
``customer`` role may open a chat connection (agents answer through the REST API). The returned
context (``customer_id``, ``role``) reaches the ``$connect`` handler and every later route of the
connection as ``requestContext.authorizer``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aws_lambda_powertools import Logger, Tracer

from lambdas.shared import env
from lambdas.shared.tokens import TokenError, signing_secret, verify

logger = Logger()
tracer = Tracer()

TOKEN_PARAMETER = "token"  # noqa: S105 - the query parameter name, not a secret
CHAT_ROLE = "customer"


@dataclass(frozen=True)
class Settings:
    jwt_secret_id: str
    issuer: str
    audience: str
    secret_max_age: int


@env.once
def settings() -> Settings:
    return Settings(
        jwt_secret_id=env.require("JWT_SECRET_ARN"),
        issuer=env.require("JWT_ISSUER"),
        audience=env.require("JWT_AUDIENCE"),
        secret_max_age=env.integer("SECRET_CACHE_SECONDS", 300, low=0, high=3600),
    )


def policy(principal_id: str, effect: str, method_arn: str, context: dict[str, str] | None = None) -> dict[str, Any]:
    """An authorizer response allowing or denying ``execute-api:Invoke`` on this route only."""
    response: dict[str, Any] = {
        "principalId": principal_id,
        "policyDocument": {
            "Version": "2012-10-17",
            "Statement": [{"Action": "execute-api:Invoke", "Effect": effect, "Resource": method_arn}],
        },
    }
    if context:
        response["context"] = context
    return response


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    method_arn = str(event.get("methodArn", ""))
    token = (event.get("queryStringParameters") or {}).get(TOKEN_PARAMETER)
    config = settings()
    try:
        claims = verify(
            token,
            signing_secret(config.jwt_secret_id, max_age=config.secret_max_age),
            issuer=config.issuer,
            audience=config.audience,
        )
    except TokenError as err:
        logger.info("connection refused", extra={"reason": err.reason})
        return policy("anonymous", "Deny", method_arn)
    if claims.role != CHAT_ROLE:
        logger.info("connection refused", extra={"reason": "role", "role": claims.role})
        return policy(claims.sub, "Deny", method_arn)
    return policy(claims.sub, "Allow", method_arn, {"customer_id": claims.sub, "role": claims.role})
