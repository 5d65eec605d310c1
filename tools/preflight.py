"""``make preflight STAGE=dev``: what a deploy of a stage needs from its account that no emulator checks.

With the deployer's credentials (the boto3 default session; the region is the stage's, else
``--region``, else the profile's), it reads and never writes:

- the caller's account (and that it is the one the stage pins);
- the model: its cross-region inference profile (GetInferenceProfile) and every model the profile
  routes to, or the foundation model (GetFoundationModel): Active, Legacy (a warning with the end
  of life) or gone; and the account's access to it (GetFoundationModelAvailability);
- Lambda's concurrency quota (GetAccountSettings) against what the stage reserves, plus the 100
  that Lambda always keeps unreserved;
- SES: the identity of ``notice_sender`` (that the stage can create it, then that it is verified;
  its domain too) and the sandbox (sesv2);
- the CDK bootstrap version (SSM) against what the synthesized assembly (or the pinned
  aws-cdk-lib) needs;
- Cognito's mail: the default sender's daily limit against a production pool open to sign-ups;
- cdk.json values still on the reserved ``.example`` domain.

It prints a table (check, status, detail, fix) and exits 1 when any row is a BLOCKER, 0
otherwise (2 for a bad stage). Every check is a function of the client(s) it reads, so tests drive
each status with botocore's Stubber. ``make deploy`` runs it first (``SKIP_PREFLIGHT=1`` skips it).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import json
import sys
import textwrap
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from botocore.exceptions import BotoCoreError, ClientError

from stacks.config import INFERENCE_PROFILE_PREFIXES, ConfigError, StageConfig, foundation_model_of, load_stage_config

ROOT = Path(__file__).resolve().parent.parent
Status = Literal["OK", "WARN", "BLOCKER"]
#: Concurrency Lambda keeps for functions without a reservation: a reservation may not eat into it
#: (PutFunctionConcurrency in the Lambda API reference).
LAMBDA_UNRESERVED_MINIMUM = 100
#: Mails a day Cognito's default sender (COGNITO_DEFAULT) sends for an account (docs/deploy.md).
COGNITO_DEFAULT_DAILY_MAILS = 50
#: The bootstrap version aws-cdk-lib's DefaultStackSynthesizer requires (MIN_BOOTSTRAP_STACK_VERSION),
#: and where the bootstrap stack records its version; used when no synthesized assembly says more.
DEFAULT_BOOTSTRAP_VERSION = 6
DEFAULT_BOOTSTRAP_PARAMETER = "/cdk-bootstrap/hnb659fds/version"
#: A client for a service in a region (boto3's ``Session.client``; tests hand out stubbed ones).
ClientFactory = Callable[[str], Any]


@dataclass(frozen=True)
class Finding:
    """One row of the table: what was checked, how it stands, what was seen, and what to do."""

    check: str
    status: Status
    detail: str
    fix: str = ""


#: Bedrock's answers for an id it does not offer in the region (or no longer offers at all).
_NOT_FOUND = ("ResourceNotFoundException", "ValidationException")


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def _message(error: ClientError) -> str:
    found = error.response.get("Error", {})
    return f"{found.get('Code', '?')}: {found.get('Message', '')}".rstrip(": ")


def _day(value: Any) -> str:
    return value.date().isoformat() if isinstance(value, datetime) else str(value)


# --- identity ------------------------------------------------------------------------------------


def check_identity(sts: Any, config: StageConfig, region: str) -> tuple[Finding, str]:
    """Whose credentials these are (and their account), and that they reach the account the stage pins."""
    try:
        caller = sts.get_caller_identity()
    except ClientError as error:
        refused = Finding(
            "credentials", "BLOCKER", f"STS refused them ({_message(error)})", "refresh the credentials (AWS_PROFILE)"
        )
        return refused, ""
    account = str(caller["Account"])
    if config.account is not None and account != config.account:
        elsewhere = Finding(
            "credentials",
            "BLOCKER",
            f"account {account}, but stage {config.name} pins account {config.account}",
            f"use credentials of account {config.account} (AWS_PROFILE)",
        )
        return elsewhere, account
    return Finding("credentials", "OK", f"account {account} in {region} as {caller['Arn']}"), account


# --- the model -----------------------------------------------------------------------------------


def check_model(bedrock: Any, model_id: str | None) -> list[Finding]:
    """The stage's model in this region: its profile and every model behind it, or the model itself."""
    if model_id is None:
        return [Finding("model", "OK", "bedrock_model_id is null: the echo responder answers, nothing is invoked")]
    if not model_id.startswith(INFERENCE_PROFILE_PREFIXES):
        return [check_foundation_model(bedrock, model_id), check_model_access(bedrock, model_id)]
    check = "model profile"
    try:
        profile = bedrock.get_inference_profile(inferenceProfileIdentifier=model_id)
    except ClientError as error:
        if _code(error) == "AccessDeniedException":
            return [
                Finding(
                    check,
                    "BLOCKER",
                    f"{model_id}: access denied ({_message(error)})",
                    "let the deployer read Bedrock (bedrock:GetInferenceProfile), or lift the SCP that denies it",
                )
            ]
        if _code(error) not in _NOT_FOUND:
            raise
        return [
            Finding(
                check,
                "BLOCKER",
                f"{model_id}: not offered to this region ({_message(error)})",
                "choose a profile this region is a source of (aws bedrock list-inference-profiles), "
                "or deploy the stage to a source region of this one",
            )
        ]
    if profile.get("status") != "ACTIVE":
        return [Finding(check, "BLOCKER", f"{model_id}: status {profile.get('status')}", "choose an active profile")]
    arns = [m["modelArn"] for m in profile.get("models", [])]
    regions = sorted({arn.split(":")[3] for arn in arns if arn.split(":")[3]})
    where = ", ".join(regions) if regions else "any commercial region (global)"
    findings = [Finding(check, "OK", f"{model_id}: ACTIVE, routes to {where}")]
    models = sorted({arn.rsplit("/", 1)[-1] for arn in arns}) or [foundation_model_of(model_id)]
    for model in models:
        findings.append(check_foundation_model(bedrock, model))
    findings.append(check_model_access(bedrock, models[0]))
    return findings


def check_foundation_model(bedrock: Any, model_id: str) -> Finding:
    """A foundation model's lifecycle here: ACTIVE is fine, LEGACY warns with its end of life, gone blocks."""
    check = "model"
    try:
        details = bedrock.get_foundation_model(modelIdentifier=model_id)["modelDetails"]
    except ClientError as error:
        if _code(error) == "AccessDeniedException":
            return Finding(
                check,
                "BLOCKER",
                f"{model_id}: access denied ({_message(error)})",
                "let the deployer read Bedrock (bedrock:GetFoundationModel), or lift the SCP that denies it",
            )
        if _code(error) not in _NOT_FOUND:
            raise
        return Finding(
            check,
            "BLOCKER",
            f"{model_id}: not offered in this region, or past its end of life ({_message(error)})",
            "choose a current model (docs/deploy.md) in cdk.json's bedrock_model_id",
        )
    lifecycle = details.get("modelLifecycle", {})
    status = lifecycle.get("status", "?")
    if status == "ACTIVE":
        return Finding(check, "OK", f"{model_id}: ACTIVE")
    if status == "LEGACY":
        parts = [f"{model_id}: LEGACY"]
        if lifecycle.get("endOfLifeTime"):
            parts.append(f"end of life {_day(lifecycle['endOfLifeTime'])}")
        if lifecycle.get("publicExtendedAccessTime"):
            parts.append(f"extended access (higher price) from {_day(lifecycle['publicExtendedAccessTime'])}")
        return Finding(
            check,
            "WARN",
            ", ".join(parts),
            "move bedrock_model_id to an Active model before the end of life (calls fail after it)",
        )
    return Finding(
        check, "BLOCKER", f"{model_id}: lifecycle {status}", "choose a current model in cdk.json's bedrock_model_id"
    )


def check_model_access(bedrock: Any, model_id: str) -> Finding:
    """Whether the account may call the model yet: use-case form, Marketplace agreement, entitlement."""
    check = "model access"
    try:
        found = bedrock.get_foundation_model_availability(modelId=model_id)
    except ClientError as error:
        return Finding(
            check,
            "WARN",
            f"{model_id}: could not read it ({_message(error)})",
            "make the first call yourself before customers do (docs/deploy.md, Bedrock model access)",
        )
    agreement = found.get("agreementAvailability", {}).get("status", "?")
    seen = {
        "agreement": agreement,
        "authorization": found.get("authorizationStatus", "?"),
        "entitlement": found.get("entitlementAvailability", "?"),
        "region": found.get("regionAvailability", "?"),
    }
    detail = f"{model_id}: " + ", ".join(f"{key} {value}" for key, value in seen.items())
    if set(seen.values()) <= {"AVAILABLE", "AUTHORIZED"}:
        return Finding(check, "OK", detail)
    return Finding(
        check,
        "WARN",
        detail,
        "submit Anthropic's use-case form once for the account, then invoke the model once as a principal "
        "allowed aws-marketplace:Subscribe and ViewSubscriptions (docs/deploy.md, Bedrock model access)",
    )


# --- Lambda concurrency --------------------------------------------------------------------------


def reserved_concurrency(config: StageConfig) -> int:
    """What the stage's functions reserve: every ``*_reserved_concurrency`` setting together."""
    return sum(
        int(getattr(config, f.name)) for f in dataclasses.fields(config) if f.name.endswith("_reserved_concurrency")
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
        "or lower message_reserved_concurrency in cdk.json"
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


def _number(value: Any) -> str:
    """A quota as SES reports it (a float; -1 for no limit)."""
    if not isinstance(value, (int, float)):
        return "?"
    return "no limit" if value < 0 else f"{value:g}"


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


# --- the run -------------------------------------------------------------------------------------


def _guarded(name: str, check: Callable[[], Finding | list[Finding]]) -> list[Finding]:
    """A check's findings; an error it did not expect is a WARN that says it could not check."""
    try:
        found = check()
    except ClientError as error:
        return [Finding(name, "WARN", f"could not check ({_message(error)})", "check it by hand (docs/deploy.md)")]
    return found if isinstance(found, list) else [found]


def run(config: StageConfig, client: ClientFactory, region: str, *, assembly: Path | None = None) -> list[Finding]:
    """Every check of the stage, in the order the table shows them."""
    identity, account = check_identity(client("sts"), config, region)
    findings = [identity]
    if identity.status == "BLOCKER":
        return findings  # what these credentials read says nothing of the stage's account
    findings += _guarded("model", lambda: check_model(client("bedrock"), config.bedrock_model_id))
    cloudformation = client("cloudformation")
    reserved = reserved_concurrency(config)
    findings += _guarded(
        "Lambda concurrency",
        lambda: check_concurrency(
            client("lambda"), reserved, deployed=stage_deployed(cloudformation, config.name, "Api")
        ),
    )
    sesv2 = client("sesv2")
    findings += _guarded(
        "SES sender",
        lambda: check_ses_identity(
            sesv2, config.notice_sender, deployed=stage_deployed(cloudformation, config.name, "Events")
        ),
    )
    if config.notice_sender is not None:
        findings += _guarded("SES account", lambda: check_ses_account(sesv2))
    findings += _guarded(
        "CDK bootstrap", lambda: check_bootstrap(client("ssm"), bootstrap_need(assembly), account, region)
    )
    findings.append(check_cognito_mail(config, pool_mail_sender(assembly)))
    findings.append(check_placeholders(config))
    return findings


#: Widths the detail and fix columns wrap at, so a row fits a terminal of about 140 columns.
DETAIL_WIDTH, FIX_WIDTH = 60, 48


def render(findings: Sequence[Finding]) -> str:
    """The findings as a table: check, status, detail, fix (the last two wrapped)."""
    header = ("check", "status", "detail", "fix")
    rows = [header, *((f.check, f.status, f.detail, f.fix or "-") for f in findings)]
    wrapped = [
        [
            [row[0]],
            [row[1]],
            textwrap.wrap(row[2], DETAIL_WIDTH, break_on_hyphens=False) or [""],
            textwrap.wrap(row[3], FIX_WIDTH, break_on_hyphens=False) or [""],
        ]
        for row in rows
    ]
    widths = [max(len(line) for row in wrapped for line in row[column]) for column in range(4)]
    lines = []
    for number, row in enumerate(wrapped):
        for index in range(max(len(cell) for cell in row)):
            cells = [cell[index] if index < len(cell) else "" for cell in row]
            lines.append(" | ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip())
        if number == 0:
            lines.append("-+-".join("-" * width for width in widths))
    return "\n".join(lines)


def exit_code(findings: Sequence[Finding]) -> int:
    """1 when any finding blocks the deploy, else 0."""
    return 1 if any(f.status == "BLOCKER" for f in findings) else 0


def stage_config(name: str) -> StageConfig:
    """The stage's validated configuration from cdk.json."""
    return load_stage_config(json.loads((ROOT / "cdk.json").read_text())["context"].get("stages"), name)


def default_assembly(stage: str) -> Path | None:
    """``make synth``'s assembly of the stage, when there is one."""
    found = ROOT / "cdk.out" / f"assembly-MangaAssist-{stage}"
    return found if (found / "manifest.json").is_file() else None


def main(argv: Sequence[str] | None = None, *, session: Any = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.preflight", description=__doc__.splitlines()[0])
    parser.add_argument("--stage", default="dev", help="the stage in cdk.json's context.stages (default dev)")
    parser.add_argument("--region", help="the region to check (default: the stage's, else your AWS profile's)")
    parser.add_argument("--profile", help="the AWS profile to read with (default: the default session)")
    parser.add_argument("--assembly", type=Path, help="a synthesized stage assembly (default: cdk.out's, if any)")
    args = parser.parse_args(argv)
    try:
        config = stage_config(args.stage)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if session is None:
        import boto3

        session = boto3.session.Session(profile_name=args.profile)
    region = config.region or args.region or session.region_name
    if not region:
        print(
            f"error: stage {config.name} pins no region: give --region or set AWS_REGION / the profile's region",
            file=sys.stderr,
        )
        return 2
    if config.region is not None and args.region and args.region != config.region:
        print(f"error: stage {config.name} is pinned to {config.region}, not {args.region}", file=sys.stderr)
        return 2
    try:
        findings = run(
            config,
            lambda service: session.client(service, region_name=region),
            region,
            assembly=args.assembly or default_assembly(config.name),
        )
    except BotoCoreError as error:  # no credentials, no endpoint, ...
        findings = [Finding("credentials", "BLOCKER", str(error), "set AWS_PROFILE or credentials for the account")]
    print(f"Preflight of stage {config.name} in {region}:")
    print(render(findings))
    code = exit_code(findings)
    blockers = sum(f.status == "BLOCKER" for f in findings)
    print("No blocker." if code == 0 else f"{blockers} blocker(s): a deploy would fail or break; fix them first.")
    return code


if __name__ == "__main__":
    sys.exit(main())
