"""WebSocket ``$connect`` REQUEST authorizer: the JWT from the ``token`` query string parameter.

Browsers cannot set headers on a WebSocket handshake, so the token travels in the query string
(``wss://.../dev?token=<jwt>``); the access log format leaves query strings out. Verification is
:func:`lambdas.shared.tokens.verify`, the same code, issuer and rules as the REST authorizer. Only the
``customer`` role may open a chat connection (agents answer through the REST API). The returned
context (``customer_id``, ``role``) reaches the ``$connect`` handler and every later route of the
connection as ``requestContext.authorizer``.

Like the REST authorizer it loads neither boto3 nor the X-Ray SDK: it makes no AWS call (the key
set comes over HTTPS), and Lambda's active tracing records the invocation.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger

from lambdas.shared.logs import masked_formatter
from lambdas.shared.tokens import (
    Issuer,
    JwksUnavailable,
    KeySet,
    TokenError,
    issuer_settings,
    key_set,
    verified_email,
    verify,
)

logger = Logger(logger_formatter=masked_formatter())

TOKEN_PARAMETER = "token"  # noqa: S105 - the query parameter name, not a secret
CHAT_ROLE = "customer"


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


def authorize(event: dict[str, Any], issuer: Issuer, keys: KeySet) -> dict[str, Any]:
    """The response for one ``$connect`` authorizer event (tests call it with their own issuer and keys).

    Anything the token carries that ``verify`` refuses is a Deny, and so is every token while the
    issuer's key set cannot be fetched (logged as an error).
    """
    method_arn = str(event.get("methodArn", ""))
    params = event.get("queryStringParameters")
    token = params.get(TOKEN_PARAMETER) if isinstance(params, dict) else None
    try:
        claims = verify(token, issuer, keys)
    except TokenError as err:
        logger.info("connection refused", extra={"reason": err.reason})
        return policy("anonymous", "Deny", method_arn)
    except JwksUnavailable as err:
        logger.error("connection refused: the issuer's key set is unavailable", extra={"error": str(err)})
        return policy("anonymous", "Deny", method_arn)
    if claims.role != CHAT_ROLE:
        logger.info("connection refused", extra={"reason": "role", "role": claims.role})
        return policy(claims.sub, "Deny", method_arn)
    context = {"customer_id": claims.sub, "role": claims.role}
    email = verified_email(claims)
    if email:
        context["email"] = email
    return policy(claims.sub, "Allow", method_arn, context)


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return authorize(event, issuer_settings(), key_set())
