"""The stage's own Bedrock guardrail: on in both stages, its policy, its version, who may apply it; the settings."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_kms as kms

from embedded.synth import PARTS, SynthesizedStage, cdk_context, stage_config
from stacks.config import ConfigError, load_stage_config, with_overrides
from stacks.guardrail import compose_guardrail
from stacks.guardrail_config import DEFAULT_BLOCKED_INPUT, DEFAULT_BLOCKED_OUTPUT, GuardrailConfig

# ------------------------------------------------------------------ settings


@pytest.fixture(scope="module")
def stages() -> dict[str, Any]:
    return cdk_context()["stages"]


def _load(stages: dict[str, Any], stage: str = "dev", **entry: Any) -> Any:
    return load_stage_config({**stages, stage: {**stages[stage], **entry}}, stage)


def test_both_stages_create_their_own_guardrail(stages: dict[str, Any]) -> None:
    for name in ("dev", "prod"):
        config = load_stage_config(stages, name)
        assert config.guardrail.create is True
        assert config.bedrock_guardrail_id is None


def test_a_stage_without_the_block_has_no_guardrail_and_customer_facing_messages() -> None:
    config = GuardrailConfig()
    assert config.create is False
    assert "payment details" in DEFAULT_BLOCKED_INPUT
    assert "payment details" in DEFAULT_BLOCKED_OUTPUT
    assert max(len(DEFAULT_BLOCKED_INPUT), len(DEFAULT_BLOCKED_OUTPUT)) <= 500


def test_an_existing_guardrail_still_works_once_create_is_off(stages: dict[str, Any]) -> None:
    config = _load(stages, guardrail={"create": False}, bedrock_guardrail_id="gr0abc123", bedrock_guardrail_version="2")
    assert (config.guardrail.create, config.bedrock_guardrail_id, config.bedrock_guardrail_version) == (
        False,
        "gr0abc123",
        "2",
    )


def test_fails_when_a_stage_both_creates_and_names_a_guardrail(stages: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=r"stage 'dev': guardrail.create is true and bedrock_guardrail_id"):
        _load(stages, bedrock_guardrail_id="gr0abc123", bedrock_guardrail_version="2")


def test_a_stage_without_a_model_creates_no_guardrail() -> None:
    echo = with_overrides(stage_config("dev"), bedrock_model_id=None)
    scope = Stack(App(), "Echo")
    key = kms.Key(scope, "Key")
    assert echo.guardrail.create is True
    assert compose_guardrail(scope, echo, encryption_key=key) is None
    assert compose_guardrail(scope, stage_config("dev"), encryption_key=key) is not None


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ({"create": "yes"}, r"guardrail.create must be true or false \(given 'yes'\)"),
        ({"blocked_input_message": ""}, r"guardrail.blocked_input_message must be a text of 1..500"),
        ({"blocked_output_message": "x" * 501}, r"guardrail.blocked_output_message must be a text of 1..500"),
        ({"kms": "aws"}, r"unknown guardrail keys \['kms'\]"),
        ([], r"guardrail must be an object"),
    ],
)
def test_fails_on_a_bad_guardrail_block(stages: dict[str, Any], block: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _load(stages, guardrail=block)


# ------------------------------------------------------------------ templates


def _resources(stage: SynthesizedStage, kind: str) -> dict[str, tuple[str, dict[str, Any]]]:
    return {
        lid: (part, res["Properties"])
        for part in PARTS
        for lid, res in stage.templates[part]["Resources"].items()
        if res["Type"] == kind
    }


@pytest.mark.slow
def test_the_guardrail_masks_contact_details_and_blocks_payment_details_in_replies(
    any_stage: SynthesizedStage,
) -> None:
    [(part, props)] = _resources(any_stage, "AWS::Bedrock::Guardrail").values()
    assert part == "Storage"
    name = any_stage.stage.config.name
    assert props["Name"] == f"MangaAssist-{name}-chat"
    assert props["BlockedInputMessaging"] == DEFAULT_BLOCKED_INPUT
    assert props["BlockedOutputsMessaging"] == DEFAULT_BLOCKED_OUTPUT
    entities = {e["Type"]: e for e in props["SensitiveInformationPolicyConfig"]["PiiEntitiesConfig"]}
    for kind in ("EMAIL", "PHONE", "ADDRESS"):
        assert (entities[kind]["InputAction"], entities[kind]["OutputAction"]) == ("ANONYMIZE", "ANONYMIZE"), kind
    for kind in (
        "CREDIT_DEBIT_CARD_NUMBER",
        "CREDIT_DEBIT_CARD_CVV",
        "CREDIT_DEBIT_CARD_EXPIRY",
        "US_BANK_ACCOUNT_NUMBER",
        "INTERNATIONAL_BANK_ACCOUNT_NUMBER",
        "PIN",
        "PASSWORD",
    ):
        assert (entities[kind]["InputAction"], entities[kind]["OutputAction"]) == ("ANONYMIZE", "BLOCK"), kind
    assert all(e["InputEnabled"] and e["OutputEnabled"] for e in entities.values())
    assert "NAME" not in entities  # authors' and characters' names are what the shop talks about
    # encrypted with the stage's data key
    [key_id] = [lid for lid in any_stage.templates["Storage"]["Resources"] if lid.startswith("DataKey")]
    assert props["KmsKeyArn"] == {"Fn::GetAtt": [key_id, "Arn"]}


@pytest.mark.slow
def test_the_functions_name_a_published_version_and_only_they_may_apply_it(any_stage: SynthesizedStage) -> None:
    guardrails = _resources(any_stage, "AWS::Bedrock::Guardrail")
    [(_, version)] = _resources(any_stage, "AWS::Bedrock::GuardrailVersion").values()
    [guardrail_id] = guardrails
    assert version["GuardrailIdentifier"] == {"Fn::GetAtt": [guardrail_id, "GuardrailId"]}
    named: set[str] = set()
    for part in PARTS:
        for lid, res in any_stage.templates[part]["Resources"].items():
            variables = res["Properties"].get("Environment", {}).get("Variables", {}) if "Properties" in res else {}
            if "BEDROCK_GUARDRAIL_VERSION" in variables:
                assert "GuardrailVersion" in json.dumps(variables["BEDROCK_GUARDRAIL_VERSION"]), lid
                assert "GuardrailId" in json.dumps(variables["BEDROCK_GUARDRAIL_ID"]), lid
                named.add(f"{part}/{lid.rsplit('Function', 1)[0] if 'Function' in lid else lid}")
    applying: list[str] = []
    for part in PARTS:
        for lid, res in any_stage.templates[part]["Resources"].items():
            if res["Type"] != "AWS::IAM::Policy":
                continue
            for statement in res["Properties"]["PolicyDocument"]["Statement"]:
                actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
                if "bedrock:ApplyGuardrail" in actions:
                    assert actions == ["bedrock:ApplyGuardrail"]
                    assert "GuardrailArn" in json.dumps(statement["Resource"])
                    applying.append(f"{part}/{lid}")
    # the chat, the session function (a rewound turn) and the summaries: named and granted, no one else
    assert len(named) == 3, named
    assert sorted(p.split("/")[0] for p in applying) == ["Api", "Api", "Events"], applying
