"""Who signs callers in: the stage's Cognito user pool, or the external OIDC issuer it names.

The pool lives in the Storage stack (its users outlive every other stack, and both APIs read
it); :func:`token_environment` is the one place that turns the stage's identity into the
``ISSUER_*`` variables both authorizers verify with (``contracts.environment.ISSUER_VARIABLES``).
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, Duration, Validations
from aws_cdk import aws_cognito as cognito
from constructs import Construct

from constructs_lib import HardenedUserPool
from contracts.access import ROLES
from contracts.environment import ISSUER_VARIABLES
from stacks.config import StageConfig

_MFA = {"off": cognito.Mfa.OFF, "optional": cognito.Mfa.OPTIONAL, "required": cognito.Mfa.REQUIRED}
_THREAT_PROTECTION = {
    "off": None,
    "audit": cognito.StandardThreatProtectionMode.AUDIT_ONLY,
    "enforced": cognito.StandardThreatProtectionMode.FULL_FUNCTION,
}
#: Cognito's tokens: ID tokens carry the verified e-mail, access tokens the client id; both the groups.
COGNITO_ISSUER_ACCEPTED_USES = ("id", "access")


def build_user_pool(scope: Construct, config: StageConfig) -> HardenedUserPool:
    """The stage's user pool: the roles as groups, the stage's sign-up, MFA and threat protection."""
    identity = config.identity
    users = HardenedUserPool(
        scope,
        "Users",
        groups=ROLES,
        self_sign_up=identity.self_sign_up,
        password_min_length=identity.password_min_length,
        mfa=_MFA[identity.mfa],
        threat_protection=_THREAT_PROTECTION[identity.threat_protection],
        # SRP for browsers and apps; the admin flow for the dev helper (IAM credentials); plain
        # passwords only where the stage allows them (curl and scripts against dev).
        auth_flows=cognito.AuthFlow(user_srp=True, admin_user_password=True, user_password=identity.password_auth),
        token_validity=Duration.minutes(identity.token_validity_minutes),
        refresh_token_validity=Duration.days(identity.refresh_token_validity_days),
        deletion_protection=config.deletion_protection,
        removal_policy=config.resource_removal_policy,
    )
    findings = []
    if identity.mfa != "required":
        findings.append(
            Acknowledgment(
                id="AwsSolutions-COG2",
                reason="The pool signs in the shop's customers, who would not accept a required second "
                "factor; TOTP MFA is offered to every user (mfa: optional) and the stage's identity.mfa "
                "setting makes it required.",
            )
        )
    if identity.threat_protection == "off":
        findings.append(
            Acknowledgment(
                id="AwsSolutions-COG8",
                reason=f"Stage {config.name} turns Cognito threat protection off by configuration "
                "(identity.threat_protection): a development pool of test users on the Essentials plan; "
                "production enforces it on the Plus plan.",
            )
        )
    for finding in findings:
        Validations.of(users.user_pool).acknowledge(finding)
    return users


def token_environment(config: StageConfig, users: HardenedUserPool | None) -> dict[str, str]:
    """The ``ISSUER_*`` variables of both authorizers: the stage's pool, or its external issuer."""
    identity = config.identity
    if identity.provider == "cognito":
        if users is None:
            raise ValueError(f"stage {config.name} signs in with Cognito but has no user pool")
        issuer, jwks_url = users.issuer_url, users.jwks_url
        audiences: tuple[str, ...] = (users.client.user_pool_client_id,)
        token_uses: tuple[str, ...] = COGNITO_ISSUER_ACCEPTED_USES
    else:
        issuer, jwks_url, audiences, token_uses = str(identity.issuer), str(identity.jwks_url), identity.audiences, ()
    environment = {
        "ISSUER_URL": issuer,
        "ISSUER_JWKS_URL": jwks_url,
        "ISSUER_AUDIENCES": ",".join(audiences),
        "ISSUER_ALGORITHMS": ",".join(identity.algorithms),
        "ISSUER_ACCEPTED_USES": ",".join(token_uses),
        "ISSUER_ROLE_CLAIM": identity.role_claim,
        "ISSUER_DEFAULT_ROLE": identity.default_role or "",
    }
    if set(environment) != set(ISSUER_VARIABLES):  # the two sides are edited together
        raise ValueError(
            f"token variables differ from the verifier's: {sorted(set(environment) ^ set(ISSUER_VARIABLES))}"
        )
    return environment
