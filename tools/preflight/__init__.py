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
- cdk.json values still on the reserved ``.example`` domain;
- where ``analytics_search`` is on: a private collection's VPC endpoint (ACTIVE) and that its
  subnets and security groups are in the endpoint's VPC; a public one is a warning.

It prints a table (check, status, detail, fix) and exits 1 when any row is a BLOCKER, 0
otherwise (2 for a bad stage). Every check is a function of the client(s) it reads, so tests drive
each status with botocore's Stubber. ``make deploy`` runs it first (``SKIP_PREFLIGHT=1`` skips it).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError

from stacks.config import ConfigError, StageConfig
from stacks.project import stage_config
from tools.preflight.account import (
    COGNITO_DEFAULT_DAILY_MAILS,
    DEFAULT_BOOTSTRAP_PARAMETER,
    DEFAULT_BOOTSTRAP_VERSION,
    LAMBDA_UNRESERVED_MINIMUM,
    BootstrapNeed,
    bootstrap_need,
    check_bootstrap,
    check_cognito_mail,
    check_concurrency,
    check_placeholders,
    check_ses_account,
    check_ses_identity,
    placeholders,
    pool_mail_sender,
    reserved_concurrency,
    stage_deployed,
)
from tools.preflight.findings import ROOT, Finding, Status, _guarded, exit_code, render
from tools.preflight.model import check_foundation_model, check_identity, check_model, check_model_access
from tools.preflight.search import check_search

__all__ = [
    "COGNITO_DEFAULT_DAILY_MAILS",
    "DEFAULT_BOOTSTRAP_PARAMETER",
    "DEFAULT_BOOTSTRAP_VERSION",
    "LAMBDA_UNRESERVED_MINIMUM",
    "BootstrapNeed",
    "ClientFactory",
    "Finding",
    "Status",
    "bootstrap_need",
    "check_bootstrap",
    "check_cognito_mail",
    "check_concurrency",
    "check_foundation_model",
    "check_identity",
    "check_model",
    "check_model_access",
    "check_placeholders",
    "check_search",
    "check_ses_account",
    "check_ses_identity",
    "default_assembly",
    "exit_code",
    "main",
    "placeholders",
    "pool_mail_sender",
    "render",
    "reserved_concurrency",
    "run",
    "stage_config",
    "stage_deployed",
]

#: A client for a service in a region (boto3's ``Session.client``; tests hand out stubbed ones).
ClientFactory = Callable[[str], Any]


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
    search = config.analytics_search
    if search.enabled:
        findings += _guarded(
            "search collection",
            lambda: check_search(
                client("opensearchserverless") if search.private else None,
                client("ec2") if search.private else None,
                search,
            ),
        )
    return findings


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
