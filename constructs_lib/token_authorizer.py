"""A REST API TOKEN authorizer in front of a Lambda that verifies bearer JWTs (e.g. against a JWKS)."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from constructs_lib.validation import PropErrors

#: ``Bearer <header>.<payload>.<signature>``: anything else is answered 401 by API Gateway
#: without invoking (or paying for) the authorizer.
BEARER_JWT = r"^Bearer [-0-9A-Za-z_]+\.[-0-9A-Za-z_]+\.[-0-9A-Za-z_]+$"


class JwtTokenAuthorizer(Construct):
    """The TOKEN authorizer that sends each request's bearer token to ``function``.

    Example::

        users = HardenedUserPool(self, "Users", groups=["customer"])
        verifier = SharedFunction(self, "Verifier", ..., environment={"ISSUER_URL": users.issuer_url})
        auth = JwtTokenAuthorizer(self, "Authorizer", function=verifier.function)
        resource.add_method("GET", integration, authorizer=auth.authorizer)

    ``function`` verifies the token (with the issuer's public keys: nothing secret is shared with
    the API) and answers the IAM policy. Only a header that looks like ``Bearer <JWT>`` reaches it.
    API Gateway caches each token's policy for ``cache_ttl``, so the function must answer a policy
    valid for every method the token may call, not only the one being called.

    Args:
        function: the Lambda that verifies tokens and answers the IAM policy.
        header: request header holding ``Bearer <token>``. Defaults to ``Authorization``.
        cache_ttl: how long API Gateway caches a token's policy, 0..3600 s. Defaults to 300 s.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        function: lambda_.IFunction,
        header: str = "Authorization",
        cache_ttl: Duration | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        errors = PropErrors(self)
        ttl = cache_ttl if cache_ttl is not None else Duration.seconds(300)
        seconds = None if ttl.is_unresolved() else ttl.to_seconds()
        if not errors.check(
            seconds is None or 0 <= seconds <= 3600, f"cache_ttl must be 0..3600 seconds (given {seconds})"
        ):
            ttl = Duration.seconds(300)
        self.authorizer: apigw.TokenAuthorizer = apigw.TokenAuthorizer(
            self,
            "Resource",
            handler=function,
            identity_source=apigw.IdentitySource.header(header),
            validation_regex=BEARER_JWT,
            results_cache_ttl=ttl,
        )
