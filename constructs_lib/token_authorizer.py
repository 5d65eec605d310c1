"""A REST API TOKEN authorizer backed by a Lambda that verifies HS256 bearer tokens from a secret.

Example::

    auth = JwtTokenAuthorizer(self, "Authorizer", function=verifier_fn, encryption_key=key)
    verifier_fn.add_environment("JWT_SECRET_ARN", auth.secret.secret_arn)
    resource.add_method("GET", integration, authorizer=auth.authorizer)
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, Duration, RemovalPolicy, Validations
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from constructs_lib.validation import PropErrors

#: ``Bearer <header>.<payload>.<signature>``: anything else is answered 401 by API Gateway
#: without invoking (or paying for) the authorizer.
BEARER_JWT = r"^Bearer [-0-9A-Za-z_]+\.[-0-9A-Za-z_]+\.[-0-9A-Za-z_]+$"


class JwtTokenAuthorizer(Construct):
    """The signing secret, the TOKEN authorizer in front of ``function``, and the grant between them.

    ``function`` verifies the token and answers the IAM policy; this construct gives it
    read access to the secret and sets ``JWT_SECRET_ARN``. API Gateway caches each token's
    policy for ``cache_ttl``, so the function must answer a policy valid for every method the
    token may call, not only the one being called.

    Args:
        function: the Lambda that verifies tokens and answers the IAM policy.
        existing_secret: the HS256 signing secret. Defaults to a new secret of 64 random
            letters and digits (fails fast when ``secret_encryption_key`` is also given).
        secret_encryption_key: KMS key of the new secret. Defaults to Secrets Manager's own key.
        secret_removal_policy: of the new secret. Defaults to DESTROY.
        header: request header holding ``Bearer <token>``. Defaults to ``Authorization``.
        cache_ttl: how long API Gateway caches a token's policy, 0..3600 s. Defaults to 300 s.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        function: lambda_.IFunction,
        existing_secret: secretsmanager.ISecret | None = None,
        secret_encryption_key: kms.IKey | None = None,
        secret_removal_policy: RemovalPolicy = RemovalPolicy.DESTROY,
        header: str = "Authorization",
        cache_ttl: Duration | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        errors = PropErrors(self)
        errors.check(
            existing_secret is None or secret_encryption_key is None,
            "give existing_secret or secret_encryption_key, not both (the key is for a new secret)",
        )
        ttl = cache_ttl if cache_ttl is not None else Duration.seconds(300)
        seconds = None if ttl.is_unresolved() else ttl.to_seconds()
        if not errors.check(
            seconds is None or 0 <= seconds <= 3600, f"cache_ttl must be 0..3600 seconds (given {seconds})"
        ):
            ttl = Duration.seconds(300)
        if existing_secret is not None:
            self.secret: secretsmanager.ISecret = existing_secret
        else:
            secret = secretsmanager.Secret(
                self,
                "Secret",
                description="HS256 signing key of the API's bearer tokens",
                encryption_key=secret_encryption_key,
                generate_secret_string=secretsmanager.SecretStringGenerator(
                    password_length=64, exclude_punctuation=True
                ),
                removal_policy=secret_removal_policy,
            )
            Validations.of(secret).acknowledge(
                Acknowledgment(
                    id="AwsSolutions-SMG4",
                    reason="An HS256 signing key cannot be rotated by a Secrets Manager rotation Lambda without "
                    "invalidating every live token at once; it is rotated by a planned roll-over (new secret "
                    "version; verify refuses tokens valid for more than 24 h, authorizers re-read the secret "
                    "within 5 min).",
                )
            )
            self.secret = secret
        self.secret.grant_read(function)
        if isinstance(function, lambda_.Function):
            function.add_environment("JWT_SECRET_ARN", self.secret.secret_arn)
        self.authorizer: apigw.TokenAuthorizer = apigw.TokenAuthorizer(
            self,
            "Resource",
            handler=function,
            identity_source=apigw.IdentitySource.header(header),
            validation_regex=BEARER_JWT,
            results_cache_ttl=ttl,
        )
