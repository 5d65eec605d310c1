"""Preflight checks of the stage's account and files: Lambda, SES, the CDK bootstrap, Cognito's mail, placeholders."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from stacks.config import StageConfig
from tools.preflight.findings import ROOT, Finding, _code, _message, _number

#: Concurrency Lambda keeps for functions without a reservation: a reservation may not eat into it
#: (PutFunctionConcurrency in the Lambda API reference).
LAMBDA_UNRESERVED_MINIMUM = 100
#: Mails a day Cognito's default sender (COGNITO_DEFAULT) sends for an account (docs/deploy.md).
COGNITO_DEFAULT_DAILY_MAILS = 50
#: The bootstrap version aws-cdk-lib's DefaultStackSynthesizer requires (MIN_BOOTSTRAP_STACK_VERSION),
#: and where the bootstrap stack records its version; used when no synthesized assembly says more.
DEFAULT_BOOTSTRAP_VERSION = 6
DEFAULT_BOOTSTRAP_PARAMETER = "/cdk-bootstrap/hnb659fds/version"


def reserved_concurrency(config: StageConfig) -> int:
    """What the stage's functions reserve: every ``*_reserved_concurrency`` its capacity target derives."""
    limits = config.capacity.limits
    return sum(
        int(getattr(limits, f.name)) for f in dataclasses.fields(limits) if f.name.endswith("_reserved_concurrency")
    )


def check_concurrency(lambda_client: Any, reserved: int, *, deployed: bool) -> Finding:
    """Room for the stage's reserved concurrency, leaving the 100 Lambda keeps unreserved."""
    check = "Lambda concurrency"
    limits = lambda_client.get_account_settings()["AccountLimit"]
    limit, unreserved = limits["ConcurrentExecutions"], limits["UnreservedConcurrentExecutions"]
    needed = reserved + LAMBDA_UNRESERVED_MINIMUM
    detail = (
        f"account limit {limit}, unreserved {unreserved}; the stage reserves {reserved} and Lambda keeps "
        f"{LAMBDA_UNRESERVED_MINIMUM} unreserved, so {needed} must be free"
    )
    raise_quota = (
        "request a higher 'Concurrent executions' quota (Service Quotas, AWS Lambda), "
        "or lower the stage's capacity target in cdk.json (docs/capacity.md)"
    )
    if unreserved >= needed:
        return Finding(check, "OK", detail)
    if limit < needed:
        return Finding(check, "BLOCKER", detail + ": the account limit is too small", raise_quota)
    if deployed:
        return Finding(
            check,
            "WARN",
            detail + "; the stage is deployed, so its own reservation may already be counted as reserved",
            "if the deploy fails on ReservedConcurrentExecutions: " + raise_quota,
        )
    return Finding(check, "BLOCKER", detail + ": other functions hold the rest", raise_quota)


def stage_deployed(cloudformation: Any, stage: str, part: str) -> bool:
    """Whether the stage's ``part`` stack (``Api``: its reserved concurrency; ``Events``: its mail) exists."""
    try:
        stacks = cloudformation.describe_stacks(StackName=f"MangaAssist-{stage}-{part}")["Stacks"]
    except ClientError:
        return False
    return any(s.get("StackStatus") != "DELETE_COMPLETE" for s in stacks)


# --- SES -----------------------------------------------------------------------------------------


def _identity(sesv2: Any, identity: str) -> dict[str, Any] | None:
    """The SES identity, or None when the region has none of that name."""
    try:
        return dict(sesv2.get_email_identity(EmailIdentity=identity))
    except ClientError as error:
        if _code(error) == "NotFoundException":
            return None
        raise


def check_ses_identity(sesv2: Any, sender: str | None, *, deployed: bool) -> Finding:
    """The notice sender's SES identity, which the stage's Events stack creates (stacks/mail.py).

    Before the first deploy the address must not be an identity yet (CloudFormation's create fails
    with AlreadyExists); after it, the address must have confirmed SES's verification mail, or
    every notice is rejected. A verified domain of the address is named for the reader.
    """
    check = "SES sender"
    if sender is None:
        return Finding(check, "OK", "no notice_sender: notices stay in the app, nobody is mailed")
    found = _identity(sesv2, sender)
    confirm = f"confirm the verification mail SES sends to {sender} (until then every notice is rejected)"
    if found is not None and not deployed:
        return Finding(
            check,
            "BLOCKER",
            f"{sender} already is an SES identity, made outside this stage: the stage's AWS::SES::EmailIdentity "
            "would fail to create (AlreadyExists)",
            f"delete it (aws sesv2 delete-email-identity --email-identity {sender}) if nothing else sends from it, "
            "or set another notice_sender in cdk.json",
        )
    if found is not None and found.get("VerifiedForSendingStatus"):
        return Finding(check, "OK", f"{sender} is verified for sending")
    if found is not None:
        return Finding(check, "WARN", f"{sender} is not verified ({found.get('VerificationStatus', '?')})", confirm)
    domain = sender.rsplit("@", 1)[-1]
    domain_identity = _identity(sesv2, domain)
    verified_domain = bool(domain_identity and domain_identity.get("VerifiedForSendingStatus"))
    also = f"; its domain {domain} is verified" if verified_domain else ""
    if deployed:
        return Finding(
            check,
            "WARN",
            f"{sender} is not an SES identity here though the stage is deployed (deleted outside CloudFormation?)"
            + also,
            "recreate it: aws sesv2 create-email-identity --email-identity " + sender + ", then " + confirm,
        )
    return Finding(check, "WARN", f"the deploy creates {sender} as an SES identity (unverified){also}", confirm)


def check_ses_account(sesv2: Any) -> Finding:
    """The SES account in this region: out of the sandbox, or in it (only verified recipients)."""
    try:
        account = sesv2.get_account()
    except ClientError as error:
        return Finding("SES account", "WARN", f"could not read it ({_message(error)})", "check it in the SES console")
    quota = account.get("SendQuota", {})
    limits = f"{_number(quota.get('Max24HourSend'))} a day, {_number(quota.get('MaxSendRate'))} a second"
    if not account.get("SendingEnabled", True):
        return Finding("SES account", "BLOCKER", "sending is disabled for the account", "see the SES console")
    if not account.get("ProductionAccessEnabled"):
        return Finding(
            "SES account",
            "WARN",
            f"in the SES sandbox ({limits}): it mails only verified recipients",
            "verify each recipient (aws sesv2 create-email-identity), or request production access "
            "(SES console, Account dashboard) before customers are mailed",
        )
    return Finding("SES account", "OK", f"production access ({limits})")


# --- CDK bootstrap -------------------------------------------------------------------------------


@dataclass(frozen=True)
class BootstrapNeed:
    """The bootstrap version the stage's deployment needs, where it is recorded, and who says so."""

    version: int
    parameter: str
    source: str


def bootstrap_need(assembly: Path | None) -> BootstrapNeed:
    """What the synthesized assembly's stacks and assets require, else aws-cdk-lib's own minimum."""
    manifest = assembly / "manifest.json" if assembly is not None else None
    if manifest is not None and manifest.is_file():
        needs = [
            (props["requiresBootstrapStackVersion"], props.get("bootstrapStackVersionSsmParameter"))
            for artifact in json.loads(manifest.read_text()).get("artifacts", {}).values()
            if "requiresBootstrapStackVersion" in (props := artifact.get("properties", {}))
        ]
        if needs:
            version, parameter = max(needs, key=lambda need: need[0])
            where = manifest.relative_to(ROOT) if manifest.is_relative_to(ROOT) else manifest
            return BootstrapNeed(int(version), parameter or DEFAULT_BOOTSTRAP_PARAMETER, f"{where}")
    try:
        pinned = importlib.metadata.version("aws-cdk-lib")
    except importlib.metadata.PackageNotFoundError:
        pinned = "?"
    return BootstrapNeed(
        DEFAULT_BOOTSTRAP_VERSION, DEFAULT_BOOTSTRAP_PARAMETER, f"aws-cdk-lib {pinned}'s minimum (no synthesized stage)"
    )


def check_bootstrap(ssm: Any, need: BootstrapNeed, account: str, region: str) -> Finding:
    """The bootstrap stack's version (its SSM parameter) against the version the stage needs."""
    check = "CDK bootstrap"
    bootstrap = f"npx cdk bootstrap aws://{account}/{region}"
    try:
        value = ssm.get_parameter(Name=need.parameter)["Parameter"]["Value"]
    except ClientError as error:
        if _code(error) == "ParameterNotFound":
            return Finding(check, "BLOCKER", f"not bootstrapped ({need.parameter} does not exist)", bootstrap)
        return Finding(check, "WARN", f"could not read {need.parameter} ({_message(error)})", "check ssm:GetParameter")
    try:
        version = int(value)
    except ValueError:
        return Finding(check, "BLOCKER", f"{need.parameter} holds {value!r}, not a version", bootstrap)
    detail = f"version {version}; {need.source} needs {need.version} or later"
    if version < need.version:
        return Finding(check, "BLOCKER", detail, bootstrap + " (with the CDK CLI of package-lock.json)")
    return Finding(check, "OK", detail)


# --- Cognito mail --------------------------------------------------------------------------------


def pool_mail_sender(assembly: Path | None) -> str | None:
    """The stage's user pool mail sender (EmailSendingAccount) in the synthesized Storage template.

    None without a synthesized stage or when the stage has no pool; COGNITO_DEFAULT when the pool
    names none (CloudFormation's default).
    """
    if assembly is None:
        return None
    for template in sorted(assembly.glob("*Storage*.template.json")):
        for resource in json.loads(template.read_text()).get("Resources", {}).values():
            if resource.get("Type") == "AWS::Cognito::UserPool":
                mail = resource.get("Properties", {}).get("EmailConfiguration", {})
                return str(mail.get("EmailSendingAccount", "COGNITO_DEFAULT"))
    return None


def check_cognito_mail(config: StageConfig, sender: str | None = None) -> Finding:
    """Cognito's default sender (50 mails a day) against a production pool that anyone may sign up to."""
    check = "Cognito mail"
    if config.identity.provider != "cognito":
        return Finding(check, "OK", "an external OIDC issuer signs users in: the stage has no pool")
    sender = sender or "COGNITO_DEFAULT"  # the app sets no EmailConfiguration
    if sender != "COGNITO_DEFAULT":
        return Finding(check, "OK", f"the pool mails through {sender}")
    detail = (
        f"the pool mails through Cognito's default sender, at most {COGNITO_DEFAULT_DAILY_MAILS} mails a day "
        "for the account (sign-up codes, password resets, invitations)"
    )
    if config.is_production and config.identity.self_sign_up:
        return Finding(
            check,
            "WARN",
            detail + ", and the production pool is open to self sign-up",
            "give the pool an SES sender (Cognito EmailConfiguration, DEVELOPER) before opening sign-up, "
            "or turn identity.self_sign_up off",
        )
    return Finding(check, "OK", detail)


# --- placeholders --------------------------------------------------------------------------------


def placeholders(value: Any, key: str = "") -> Iterable[tuple[str, str]]:
    """(key, value) of every setting still on the reserved ``.example`` top-level domain."""
    if isinstance(value, str):
        host = value.split("@", 1)[-1].split("://", 1)[-1].split("/", 1)[0].split(":", 1)[0]
        if host == "example" or host.endswith(".example"):
            yield key, value
    elif isinstance(value, dict):
        for name, item in value.items():
            yield from placeholders(item, f"{key}.{name}" if key else name)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from placeholders(item, key)


def check_placeholders(config: StageConfig) -> Finding:
    """Values cdk.json ships on ``.example`` (RFC 2606: never delivered, never resolved) for the stage."""
    found = list(placeholders(dataclasses.asdict(config)))
    if not found:
        return Finding("placeholders", "OK", "no setting is on the .example domain")
    listed = ", ".join(f"{key}={value}" for key, value in found)
    return Finding(
        "placeholders",
        "BLOCKER" if config.is_production else "WARN",
        f"still on .example: {listed}",
        f"replace them under context.stages.{config.name} in cdk.json (docs/deploy.md, checklist)",
    )
