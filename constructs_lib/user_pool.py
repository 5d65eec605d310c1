"""A Cognito user pool for an app's own users, hardened by default, with groups as roles and one public client."""

from __future__ import annotations

import re
from collections.abc import Sequence

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_cognito as cognito
from constructs import Construct

from constructs_lib.validation import PropErrors

#: What Cognito accepts as a group name (letters, digits and punctuation, no white space).
_GROUP_NAME = re.compile(r"[\w+=,.@-]{1,128}")


class HardenedUserPool(Construct):
    """A user pool that signs people in by e-mail, plus one app client for browsers and mobile apps.

    Example::

        users = HardenedUserPool(self, "Users", groups=["customer", "admin"], self_sign_up=True)
        verifier.add_environment("ISSUER_URL", users.issuer_url)
        verifier.add_environment("ISSUER_JWKS_URL", users.jwks_url)
        verifier.add_environment("ISSUER_AUDIENCES", users.client.user_pool_client_id)

    Hardened defaults: e-mail is the sign-in name and is verified before it counts; passwords of
    at least 12 characters with upper and lower case, digits and symbols; optional TOTP MFA (no
    SMS); recovery by e-mail only; Cognito's threat protection enforced (which needs the Plus
    feature plan); deletion protection and RETAIN. The client is public (browsers and apps cannot
    keep a secret), signs in with SRP, hides whether a user exists, can revoke refresh tokens, and
    has no OAuth flows until ``o_auth`` names its callback URLs. Each group's name is a role: an ID
    or access token lists the user's groups in ``cognito:groups``.

    Args:
        groups: groups to create, in order of precedence (the first wins where a client must pick
            one). Defaults to none.
        self_sign_up: whether anyone may create an account. Defaults to false (admins invite).
        password_min_length: 8..99. Defaults to 12.
        mfa: defaults to ``Mfa.OPTIONAL`` with TOTP as the second factor.
        threat_protection: ``StandardThreatProtectionMode`` of the pool; None turns threat
            protection off and keeps the Essentials plan (cheaper; compromised credentials and
            risky sign-ins then go undetected). Defaults to ``FULL_FUNCTION``.
        auth_flows: the client's sign-in flows. Defaults to SRP only; add ``user_password`` for
            scripts and ``admin_user_password`` for server-side tools holding IAM credentials.
        token_validity: of ID and access tokens, 5 minutes..1 day. Defaults to 1 hour.
        refresh_token_validity: 1 hour..10 years, longer than ``token_validity``. Defaults to 30 days.
        o_auth: the client's OAuth settings (hosted sign-in and its callback URLs). Defaults to
            none: OAuth is disabled, so no implicit grant or placeholder callback exists.
        deletion_protection: defaults to true.
        removal_policy: defaults to RETAIN (the users outlive the stack).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        groups: Sequence[str] = (),
        self_sign_up: bool = False,
        password_min_length: int = 12,
        mfa: cognito.Mfa = cognito.Mfa.OPTIONAL,
        threat_protection: cognito.StandardThreatProtectionMode | None = (
            cognito.StandardThreatProtectionMode.FULL_FUNCTION
        ),
        auth_flows: cognito.AuthFlow | None = None,
        token_validity: Duration | None = None,
        refresh_token_validity: Duration | None = None,
        o_auth: cognito.OAuthSettings | None = None,
        deletion_protection: bool = True,
        removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
    ) -> None:
        super().__init__(scope, construct_id)
        errors = PropErrors(self)
        errors.check_range("password_min_length", password_min_length, 8, 99)
        for name in groups:
            errors.check(
                bool(_GROUP_NAME.fullmatch(name)), f"group names must match {_GROUP_NAME.pattern} (given {name!r})"
            )
        errors.check(len(set(groups)) == len(groups), f"groups must not repeat a name (given {list(groups)})")
        token_validity, refresh_token_validity = _validities(errors, token_validity, refresh_token_validity)

        self.user_pool: cognito.UserPool = cognito.UserPool(
            self,
            "Resource",
            self_sign_up_enabled=self_sign_up,
            sign_in_aliases=cognito.SignInAliases(email=True),
            sign_in_case_sensitive=False,
            auto_verify=cognito.AutoVerifiedAttrs(email=True),
            keep_original=cognito.KeepOriginalAttrs(email=True),
            standard_attributes=cognito.StandardAttributes(
                email=cognito.StandardAttribute(required=True, mutable=True)
            ),
            password_policy=cognito.PasswordPolicy(
                min_length=password_min_length,
                require_lowercase=True,
                require_uppercase=True,
                require_digits=True,
                require_symbols=True,
                temp_password_validity=Duration.days(3),
            ),
            mfa=mfa,
            mfa_second_factor=None if mfa == cognito.Mfa.OFF else cognito.MfaSecondFactor(otp=True, sms=False),
            account_recovery=cognito.AccountRecovery.EMAIL_ONLY,
            feature_plan=cognito.FeaturePlan.ESSENTIALS if threat_protection is None else cognito.FeaturePlan.PLUS,
            standard_threat_protection_mode=threat_protection,
            deletion_protection=deletion_protection,
            removal_policy=removal_policy,
        )
        self.client: cognito.UserPoolClient = self._add_client(
            auth_flows, token_validity, refresh_token_validity, o_auth
        )
        #: The groups by name; each is a role the tokens carry in ``cognito:groups``.
        self.groups: dict[str, cognito.CfnUserPoolGroup] = {
            name: cognito.CfnUserPoolGroup(
                self,
                f"Group{index}",
                user_pool_id=self.user_pool.user_pool_id,
                group_name=name,
                precedence=index,
                description=f"Users in the {name} role",
            )
            for index, name in enumerate(groups)
        }

    def _add_client(
        self,
        auth_flows: cognito.AuthFlow | None,
        token_validity: Duration,
        refresh_token_validity: Duration,
        o_auth: cognito.OAuthSettings | None,
    ) -> cognito.UserPoolClient:
        """The one public app client: SRP, no secret, token revocation, OAuth only when configured."""
        return self.user_pool.add_client(
            "Client",
            generate_secret=False,
            auth_flows=auth_flows or cognito.AuthFlow(user_srp=True),
            prevent_user_existence_errors=True,
            enable_token_revocation=True,
            id_token_validity=token_validity,
            access_token_validity=token_validity,
            refresh_token_validity=refresh_token_validity,
            read_attributes=cognito.ClientAttributes().with_standard_attributes(email=True, email_verified=True),
            write_attributes=cognito.ClientAttributes().with_standard_attributes(email=True),
            disable_o_auth=o_auth is None,
            o_auth=o_auth,
        )

    @property
    def issuer_url(self) -> str:
        """The ``iss`` of the pool's tokens: ``https://cognito-idp.<region>.amazonaws.com/<pool id>``."""
        return f"https://{self.user_pool.user_pool_provider_url}"

    @property
    def jwks_url(self) -> str:
        """Where the pool publishes the public keys its tokens are signed with."""
        return f"{self.issuer_url}/.well-known/jwks.json"


def _validities(
    errors: PropErrors, token_validity: Duration | None, refresh_token_validity: Duration | None
) -> tuple[Duration, Duration]:
    """The token lifetimes to build with: the given ones when valid, else the defaults (the errors say why).

    Cognito's own checks throw at once, before the construct could report every bad prop with its path.
    """
    token = token_validity or Duration.hours(1)
    refresh = refresh_token_validity or Duration.days(30)
    token_minutes = None if token.is_unresolved() else token.to_minutes()
    refresh_minutes = None if refresh.is_unresolved() else refresh.to_minutes()
    ok = errors.check_range("token_validity", token_minutes, 5, 24 * 60, unit="minutes")
    ok = errors.check_range("refresh_token_validity", refresh_minutes, 60, 3650 * 24 * 60, unit="minutes") and ok
    if token_minutes is not None and refresh_minutes is not None:
        ok = (
            errors.check(
                refresh_minutes > token_minutes,
                f"refresh_token_validity must be longer than token_validity "
                f"(given {refresh_minutes} and {token_minutes} minutes)",
            )
            and ok
        )
    return (token, refresh) if ok else (Duration.hours(1), Duration.days(30))
