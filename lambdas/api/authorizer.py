"""REST API TOKEN authorizer: verifies the identity provider's bearer token, answers a least-privilege policy.

A valid token gets an Allow policy for exactly the routes its role may call
(:data:`lambdas.api.access.ROUTES`), on this API and stage only, plus the context ``{sub, role}``
that the integrations read as ``$context.authorizer.sub`` / ``requestContext.authorizer.sub``.
Because API Gateway caches the result per token (``authorizer_cache_seconds``), the policy
covers every route of the role, not only the method of the first call.

A refused token (malformed, expired, forged, of another issuer) raises :class:`Unauthorized`,
which API Gateway answers 401 (its UNAUTHORIZED gateway response, with ``WWW-Authenticate:
Bearer``): the client can act on it by signing in again. A valid token whose role may not call
the route is a 403 from the policy. A request without the header, or with one that is not
``Bearer <token>``, is answered 401 by API Gateway itself (identity source and validation
expression) and never reaches this function. When the issuer's key set cannot be fetched, every
token gets an explicit Deny of the whole API (403: a new sign-in would not help) and the failure
is logged as an error (``JwksUnavailable``): nobody is let in unchecked.

Environment: the ``ISSUER_*`` variables of :func:`lambdas.shared.tokens.issuer_settings` (the
issuer, its key set URL, the accepted clients, algorithms, token uses and the role claim).
It makes no AWS call (the key set comes over HTTPS), so it loads neither boto3 nor the X-Ray SDK;
Lambda's active tracing records the invocation.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext

from contracts.logs import TOKEN_REFUSED
from lambdas.api.access import routes_for
from lambdas.shared.logs import masked_formatter
from lambdas.shared.tokens import (
    Issuer,
    JwksUnavailable,
    KeySet,
    TokenError,
    bearer,
    issuer_settings,
    key_set,
    verified_email,
    verify,
)

logger = Logger(logger_formatter=masked_formatter())


class Unauthorized(Exception):
    """A refused token; API Gateway answers 401 only for a failure whose message is exactly this one."""

    def __init__(self) -> None:
        super().__init__("Unauthorized")


def api_prefix(method_arn: str) -> str:
    """``arn:aws:execute-api:<region>:<account>:<api-id>/<stage>`` of a method ARN."""
    parts = method_arn.split("/")
    if len(parts) < 3 or not parts[0].startswith("arn:") or ":execute-api:" not in parts[0] or not parts[1]:
        raise ValueError("methodArn is not an execute-api method ARN")
    return f"{parts[0]}/{parts[1]}"


def policy(
    principal_id: str, effect: str, resources: list[str], context: dict[str, str] | None = None
) -> dict[str, Any]:
    """The authorizer response API Gateway expects."""
    document: dict[str, Any] = {
        "principalId": principal_id,
        "policyDocument": {
            "Version": "2012-10-17",
            "Statement": [{"Action": "execute-api:Invoke", "Effect": effect, "Resource": resources}],
        },
    }
    if context:
        document["context"] = context
    return document


def allow(sub: str, role: str, method_arn: str, email: str | None = None) -> dict[str, Any]:
    """Allow exactly the routes ``role`` may call, on this API and stage; ``email`` joins the context."""
    prefix = api_prefix(method_arn)
    resources = [f"{prefix}/{route.arn_suffix()}" for route in routes_for(role)]
    context = {"sub": sub, "role": role, **({"email": email} if email else {})}
    return policy(sub, "Allow", resources, context)


def deny(method_arn: str) -> dict[str, Any]:
    """Deny every route of this API and stage."""
    try:
        resource = f"{api_prefix(method_arn)}/*"
    except ValueError:
        resource = "*"
    return policy("anonymous", "Deny", [resource])


def authorize(event: dict[str, Any], issuer: Issuer, keys: KeySet) -> dict[str, Any]:
    """The response for one TOKEN authorizer event (tests call it with their own issuer and keys).

    Raises Unauthorized for a token that is not a valid one of the issuer.
    """
    method_arn = str(event.get("methodArn") or "")
    try:
        api_prefix(method_arn)
    except ValueError:
        logger.warning("malformed methodArn")
        return deny(method_arn)
    token = bearer(event.get("authorizationToken"))
    try:
        claims = verify(token, issuer, keys)
    except TokenError as err:
        logger.info(TOKEN_REFUSED, extra={"reason": err.reason})
        raise Unauthorized from None
    except JwksUnavailable as err:
        logger.error("token refused: the issuer's key set is unavailable", extra={"error": str(err)})
        return deny(method_arn)
    return allow(claims.sub, claims.role, method_arn, verified_email(claims))


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return authorize(event, issuer_settings(), key_set())
