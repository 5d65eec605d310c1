"""cdk.json's ``pipeline`` block: validated against the stages it promotes, with errors that say what to fix."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from aws_cdk import App

from embedded.synth import cdk_context
from stacks.config import ConfigError, StageConfig, load_stage_config
from stacks.pipeline import DeliveryStage, PipelineConfig, load_pipeline_config


@pytest.fixture(scope="module")
def stages() -> dict[str, StageConfig]:
    raw = cdk_context()["stages"]
    return {name: load_stage_config(raw, name) for name in raw}


@pytest.fixture(scope="module")
def raw() -> dict[str, Any]:
    return dict(cdk_context()["pipeline"])


def test_cdk_json_pipeline_loads_with_obvious_placeholders(raw: dict[str, Any], stages: dict[str, StageConfig]) -> None:
    config = load_pipeline_config(raw, stages)
    assert (config.dev_stage, config.prod_stage, config.branch) == ("dev", "prod", "main")
    # Nothing in it can reach a real account or person before someone replaces it (docs/delivery.md)
    assert config.account == "123456789012"  # the account id AWS's documentation uses
    assert config.connection_arn.endswith(":connection/00000000-0000-0000-0000-000000000000")
    assert str(config.alarm_email).endswith(".example")


def test_config_is_frozen(raw: dict[str, Any], stages: dict[str, StageConfig]) -> None:
    config = load_pipeline_config(raw, stages)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.branch = "other"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"account": "12345"}, r"pipeline: account must be a 12-digit AWS account id \(given '12345'\)"),
        ({"region": "Europe"}, r"pipeline: region must be an AWS region"),
        ({"connection_arn": "arn:aws:s3:::bucket"}, r"pipeline: connection_arn must be a CodeConnections ARN"),
        (
            {
                "connection_arn": "arn:aws:codeconnections:us-east-1:123456789012:connection/"
                "00000000-0000-0000-0000-000000000000"
            },
            r"connection_arn must be a connection in the pipeline's account and region \(123456789012, eu-west-1\)",
        ),
        ({"repository": "backend"}, r"pipeline: repository must be owner/name \(given 'backend'\)"),
        ({"branch": "feature/../main"}, r"pipeline: branch must be a branch name"),
        ({"alarm_email": "oncall"}, r"pipeline: alarm_email must be an e-mail address"),
        ({"github_oidc_provider_arn": "arn:aws:iam::123456789012:oidc-provider/example.com"}, r"token\.actions"),
        ({"prod_stage": "dev"}, r"dev_stage/prod_stage must name two different stages"),
        ({"prod_stage": "staging"}, r"prod_stage must name a stage of cdk.json's context.stages \(\['dev', 'prod'\]\)"),
        ({"dev_stage": "prod", "prod_stage": "dev"}, r"dev_stage must be a stage that does not retain data"),
        ({"branch": 7}, r"pipeline: branch must be a string \(given 7\)"),
    ],
)
def test_fails_on_a_bad_value(
    raw: dict[str, Any], stages: dict[str, StageConfig], change: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_pipeline_config({**raw, **change}, stages)


def test_fails_when_prod_stage_does_not_retain_its_data(raw: dict[str, Any], stages: dict[str, StageConfig]) -> None:
    # Given a second disposable stage named as production
    both = {**stages, "qa": dataclasses.replace(stages["dev"], name="qa")}
    with pytest.raises(ConfigError, match=r"prod_stage must be a stage that retains its data"):
        load_pipeline_config({**raw, "prod_stage": "qa"}, both)


def test_fails_when_a_stage_pins_another_region(raw: dict[str, Any], stages: dict[str, StageConfig]) -> None:
    # Given prod pinned to another account (fine) in another region (not: the pipeline crosses accounts only)
    pinned = {**stages, "prod": dataclasses.replace(stages["prod"], account="333333333333", region="us-east-1")}
    with pytest.raises(ConfigError, match=r"region must be the region stage 'prod' pins \(us-east-1\)"):
        load_pipeline_config(raw, pinned)


def test_fails_on_unknown_and_missing_keys(raw: dict[str, Any], stages: dict[str, StageConfig]) -> None:
    with pytest.raises(ConfigError, match=r"pipeline: unknown keys \['brnach'\]"):
        load_pipeline_config({**raw, "brnach": "main"}, stages)
    without = {k: v for k, v in raw.items() if k != "connection_arn"}
    with pytest.raises(ConfigError, match=r"pipeline: missing keys \['connection_arn'\]"):
        load_pipeline_config(without, stages)
    with pytest.raises(ConfigError, match=r"context 'pipeline' must be an object"):
        load_pipeline_config(None, stages)


def test_fails_when_the_promoted_stages_are_not_selected(raw: dict[str, Any], stages: dict[str, StageConfig]) -> None:
    config: PipelineConfig = load_pipeline_config(raw, stages)
    with pytest.raises(ConfigError, match=r"the pipeline deploys dev and prod: select both \(-c stage=dev,prod"):
        DeliveryStage(App(), config, stages=[])
