"""``make deploy`` / ``diff`` / ``destroy``: the CDK command each builds, and the stages each refuses."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from embedded.synth import stage_config
from stacks.config import with_overrides
from tools import deploy, preflight


def test_deploy_addresses_the_stage_asks_before_broadening_and_keeps_the_outputs() -> None:
    cmd = deploy.command("deploy", stage_config("dev"))
    assert cmd[:4] == ["npx", "--no-install", "cdk", "deploy"]
    assert cmd[4] == "MangaAssist-dev/*"
    assert cmd[cmd.index("--app") + 1].endswith(" app.py")
    assert cmd[cmd.index("-c") + 1] == "stage=dev"
    assert cmd[cmd.index("--require-approval") + 1] == "broadening"
    # outside cdk.out, which every `make synth` deletes, and git-ignored
    assert cmd[cmd.index("--outputs-file") + 1] == ".deploy/outputs-dev.json"
    assert deploy.outputs_file("dev") == deploy.ROOT / ".deploy" / "outputs-dev.json"
    assert ".deploy/" in (deploy.ROOT / ".gitignore").read_text().splitlines()


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


def test_a_dry_run_of_deploy_shows_the_preflight_before_the_deploy(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(deploy.SKIP_PREFLIGHT, raising=False)
    assert deploy.main(["deploy", "--stage", "dev", "--dry-run"]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("+ ")
    assert lines[0].endswith(" -m tools.preflight --stage dev")
    assert lines[1].startswith("+ npx --no-install cdk deploy 'MangaAssist-dev/*'")
    assert deploy.main(["diff", "--stage", "dev", "--dry-run"]) == 0
    assert "tools.preflight" not in capsys.readouterr().err  # only a deploy is checked first


def _never_run(*args: object, **kwargs: object) -> object:
    raise AssertionError(f"ran {args}")


def test_a_preflight_blocker_stops_the_deploy(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(deploy.SKIP_PREFLIGHT, raising=False)
    checked: list[list[str]] = []
    monkeypatch.setattr(preflight, "main", lambda argv: checked.append(argv) or 1)
    monkeypatch.setattr(deploy.subprocess, "run", _never_run)

    assert deploy.main(["deploy", "--stage", "dev"]) == 1

    assert checked == [["--stage", "dev"]]
    assert "the preflight found a blocker, so stage dev was not deployed (SKIP_PREFLIGHT=1" in capsys.readouterr().err


def test_a_clean_preflight_lets_the_deploy_run_and_skip_preflight_says_it_skipped(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    ran: list[list[str]] = []
    monkeypatch.setattr(deploy, "outputs_file", lambda stage: tmp_path / ".deploy" / f"outputs-{stage}.json")
    monkeypatch.setattr(preflight, "main", lambda argv: 0)
    monkeypatch.setattr(
        deploy.subprocess, "run", lambda cmd, **_: ran.append(cmd) or subprocess.CompletedProcess(cmd, 0)
    )
    monkeypatch.delenv(deploy.SKIP_PREFLIGHT, raising=False)

    assert deploy.main(["deploy", "--stage", "dev"]) == 0
    assert ran[0][3] == "deploy"
    assert (tmp_path / ".deploy").is_dir()  # where the CLI writes the outputs

    monkeypatch.setattr(preflight, "main", _never_run)
    monkeypatch.setenv(deploy.SKIP_PREFLIGHT, "1")
    assert deploy.main(["deploy", "--stage", "dev"]) == 0
    assert "Preflight skipped (SKIP_PREFLIGHT): nothing checked the account" in capsys.readouterr().err
    assert len(ran) == 2
