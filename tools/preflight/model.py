"""Preflight checks of who deploys and of the stage's model: the account, the inference profile, its models."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from stacks.config import INFERENCE_PROFILE_PREFIXES, StageConfig, foundation_model_of
from tools.preflight.findings import Finding, _code, _day, _message

#: Bedrock's answers for an id it does not offer in the region (or no longer offers at all).
_NOT_FOUND = ("ResourceNotFoundException", "ValidationException")


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
