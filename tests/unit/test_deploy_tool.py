"""``make deploy`` / ``diff`` / ``destroy``: the CDK command each builds, and the stages each refuses."""

from __future__ import annotations

import pytest

from embedded.synth import stage_config
from stacks.config import with_overrides
from tools import deploy


def test_deploy_addresses_the_stage_asks_before_broadening_and_keeps_the_outputs() -> None:
    cmd = deploy.command("deploy", stage_config("dev"))
    assert cmd[:4] == ["npx", "--no-install", "cdk", "deploy"]
    assert cmd[4] == "MangaAssist-dev/*"
    assert cmd[cmd.index("--app") + 1].endswith(" app.py")
    assert cmd[cmd.index("-c") + 1] == "stage=dev"
    assert cmd[cmd.index("--require-approval") + 1] == "broadening"
    assert cmd[cmd.index("--outputs-file") + 1] == "cdk.out/outputs-dev.json"


def test_diff_of_an_unpinned_production_stage_is_allowed_but_its_deploy_is_refused() -> None:
    prod = stage_config("prod")
    assert prod.is_production
    assert prod.account is None
    assert deploy.command("diff", prod)[3:5] == ["diff", "MangaAssist-prod/*"]
    with pytest.raises(deploy.Refused, match=r'set "account" and "region" in cdk.json under context.stages.prod'):
        deploy.command("deploy", prod)


def test_a_pinned_production_stage_deploys_but_never_destroys() -> None:
    pinned = with_overrides(stage_config("prod"), account="123456789012", region="eu-west-1")
    assert "deploy" in deploy.command("deploy", pinned)
    with pytest.raises(deploy.Refused, match="retains its data"):
        deploy.command("destroy", pinned)


def test_a_disposable_stage_destroys_without_a_prompt() -> None:
    cmd = deploy.command("destroy", stage_config("dev"))
    assert cmd[3:5] == ["destroy", "MangaAssist-dev/*"]
    assert "--force" in cmd


def test_extra_arguments_follow_the_command() -> None:
    assert deploy.command("diff", stage_config("dev"), ["--context", "x=1"])[-2:] == ["--context", "x=1"]


def test_main_prints_the_command_on_a_dry_run_and_explains_refusals(capsys: pytest.CaptureFixture[str]) -> None:
    assert deploy.main(["deploy", "--stage", "dev", "--dry-run"]) == 0
    assert "+ npx --no-install cdk deploy 'MangaAssist-dev/*' --app " in capsys.readouterr().err
    assert deploy.main(["destroy", "--stage", "prod", "--dry-run"]) == 2
    assert "error: stage prod" in capsys.readouterr().err
    assert deploy.main(["deploy", "--stage", "qa", "--dry-run"]) == 2
    assert "unknown stage 'qa'" in capsys.readouterr().err
