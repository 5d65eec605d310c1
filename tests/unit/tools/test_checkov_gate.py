"""tools.checkov_gate: `make checkov` fails on a finding the skip file does not accept, and on a stale skip."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tools.checkov_gate import (
    GateError,
    Key,
    StackTemplate,
    checkov_command,
    checkov_environment,
    compare,
    main,
    parse_skips,
    report_findings,
    stack_templates,
)

STAGES = ("dev", "prod")
STACKS = ("Storage", "Api")
REASON = "The function calls only AWS APIs over TLS with IAM; a VPC would protect nothing here."


def _outdir(tmp_path: Path) -> Path:
    """A cloud assembly like `make synth-all` writes: two stages of two stacks, one function each."""
    out = tmp_path / "cdk.out.all"
    assemblies: dict[str, Any] = {"Tree": {"type": "cdk:tree", "properties": {"file": "tree.json"}}}
    for stage in STAGES:
        directory = f"assembly-MangaAssist-{stage}"
        (out / directory).mkdir(parents=True)
        assemblies[directory] = {
            "type": "cdk:cloud-assembly",
            "properties": {"directoryName": directory, "displayName": f"MangaAssist-{stage}"},
        }
        stacks: dict[str, Any] = {}
        for stack in STACKS:
            name = f"MangaAssist{stage}{stack}0A1B2C3D"
            function = {
                "Type": "AWS::Lambda::Function",
                "Metadata": {"aws:cdk:path": f"MangaAssist-{stage}/{stack}/Fn"},
            }
            (out / directory / f"{name}.template.json").write_text(json.dumps({"Resources": {"Fn": function}}))
            stacks[name] = {
                "type": "aws:cloudformation:stack",
                "displayName": f"MangaAssist-{stage}/{stack}",
                "properties": {"templateFile": f"{name}.template.json"},
            }
        (out / directory / "manifest.json").write_text(json.dumps({"artifacts": stacks}))
    (out / "manifest.json").write_text(json.dumps({"artifacts": assemblies}))
    return out


def _report(templates: list[StackTemplate], failed: list[tuple[str, str]]) -> dict[str, Any]:
    """checkov's JSON for some templates: one passed check on each, ``(check id, stack)`` failures on Fn."""

    def check(template: StackTemplate, check_id: str) -> dict[str, Any]:
        return {
            "check_id": check_id,
            "check_name": f"name of {check_id}",
            "file_path": f"/{template.path}",
            "resource": "AWS::Lambda::Function.Fn",
        }

    by_stack = {t.stack: t for t in templates}
    return {
        "check_type": "cloudformation",
        "results": {
            "passed_checks": [check(t, "CKV_AWS_45") for t in templates],
            "failed_checks": [check(by_stack[stack], check_id) for check_id, stack in failed],
            "skipped_checks": [],
            "parsing_errors": [],
        },
        "summary": {"parsing_errors": 0, "checkov_version": "3.3.30"},
    }


def _entry(**changes: Any) -> dict[str, Any]:
    return {"check": "CKV_AWS_117", "stages": ["dev", "prod"], "resources": {"Api": ["Fn"]}, "reason": REASON} | changes


@pytest.fixture
def templates(tmp_path: Path) -> list[StackTemplate]:
    return stack_templates(_outdir(tmp_path))


def _stage(templates: list[StackTemplate], stage: str) -> list[StackTemplate]:
    return [t for t in templates if t.stage == stage]


def test_templates_are_named_by_stage_and_stack(templates: list[StackTemplate]) -> None:
    assert sorted((t.stage, t.stack) for t in templates) == [
        ("dev", "Api"),
        ("dev", "Storage"),
        ("prod", "Api"),
        ("prod", "Storage"),
    ]
    assert templates[0].construct_paths() == {"Fn": f"MangaAssist-{templates[0].stage}/{templates[0].stack}/Fn"}


def test_findings_the_skip_file_lists_are_accepted(templates: list[StackTemplate]) -> None:
    # Given the same finding in both stages and one entry for both
    findings = [
        *report_findings(_report(_stage(templates, "dev"), [("CKV_AWS_117", "Api")]), _stage(templates, "dev")),
        *report_findings(_report(_stage(templates, "prod"), [("CKV_AWS_117", "Api")]), _stage(templates, "prod")),
    ]
    skips = parse_skips({"skips": [_entry()]}, templates)

    verdict = compare(findings, skips)

    assert verdict.passed
    assert [f.key for f in verdict.accepted] == [
        Key("CKV_AWS_117", "dev", "Api", "Fn"),
        Key("CKV_AWS_117", "prod", "Api", "Fn"),
    ]


def test_a_finding_no_entry_lists_fails_the_gate(templates: list[StackTemplate]) -> None:
    dev = _stage(templates, "dev")
    findings = report_findings(_report(dev, [("CKV_AWS_117", "Api"), ("CKV_AWS_116", "Storage")]), dev)
    skips = parse_skips({"skips": [_entry(stages=["dev"])]}, templates)

    verdict = compare(findings, skips)

    assert not verdict.passed
    assert [f.key for f in verdict.unaccepted] == [Key("CKV_AWS_116", "dev", "Storage", "Fn")]
    assert verdict.unaccepted[0].check_name == "name of CKV_AWS_116"


def test_an_entry_whose_finding_is_gone_fails_as_stale(templates: list[StackTemplate]) -> None:
    # Given an entry for both stages, and the finding left only in dev (prod was fixed)
    dev = _stage(templates, "dev")
    findings = report_findings(_report(dev, [("CKV_AWS_117", "Api")]), dev)
    skips = parse_skips({"skips": [_entry()]}, templates)

    verdict = compare(findings, skips)

    assert not verdict.passed
    assert verdict.stale == [Key("CKV_AWS_117", "prod", "Api", "Fn")]
    assert not verdict.unaccepted


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (_entry(check="CKV_AWS_1x"), "check must be a checkov AWS check id"),
        (_entry(stages=["staging"]), "stages must list scanned stages"),
        (_entry(stages=[]), "stages must list scanned stages"),
        (_entry(resources={"Web": ["Fn"]}), "'Web' is not a scanned stack"),
        (_entry(resources={"Api": []}), "Api must list logical ids"),
        (_entry(resources={"Api": ["MangaAssist-dev/Api/Fn"]}), "Api must list logical ids"),
        (_entry(resources=["Fn"]), "resources must map a stack"),
        (_entry(reason="accepted"), "reason must say why in at least 40 characters"),
        (_entry(owner="me"), "keys must be exactly"),
        ("CKV_AWS_117", "must be a mapping"),
    ],
)
def test_fails_on_a_malformed_entry(templates: list[StackTemplate], entry: Any, message: str) -> None:
    with pytest.raises(GateError, match=rf"entry 1: .*{message}"):
        parse_skips({"skips": [entry]}, templates)


def test_fails_on_a_resource_listed_twice_for_one_check(templates: list[StackTemplate]) -> None:
    with pytest.raises(GateError, match="CKV_AWS_117 dev Api Fn is listed 2 times"):
        parse_skips({"skips": [_entry(), _entry(stages=["dev"])]}, templates)


@pytest.mark.parametrize("data", [None, [], {"skip": []}, {"skips": {}}])
def test_fails_on_a_skip_file_without_a_list_of_skips(templates: list[StackTemplate], data: Any) -> None:
    with pytest.raises(GateError, match="one key, 'skips'"):
        parse_skips(data, templates)


def test_yaml_anchors_share_one_resource_list_between_entries(templates: list[StackTemplate]) -> None:
    text = f"""
skips:
  - check: CKV_AWS_117
    stages: [dev]
    resources: &functions {{Api: [Fn], Storage: [Fn]}}
    reason: &why "{REASON}"
  - check: CKV_AWS_173
    stages: [dev]
    resources: *functions
    reason: *why
"""
    skips = parse_skips(yaml.safe_load(text), templates)
    assert sorted(str(key) for skip in skips for key in skip.covered()) == [
        "CKV_AWS_117 dev Api Fn",
        "CKV_AWS_117 dev Storage Fn",
        "CKV_AWS_173 dev Api Fn",
        "CKV_AWS_173 dev Storage Fn",
    ]


def _broken(report: dict[str, Any], change: str) -> dict[str, Any]:
    if change == "parsing error":
        report["summary"]["parsing_errors"] = 1
        report["results"]["parsing_errors"] = ["/x.template.json"]
    elif change == "skipped by checkov":
        report["results"]["skipped_checks"] = [{"check_id": "CKV_AWS_117", "resource": "AWS::Lambda::Function.Fn"}]
    elif change == "template not scanned":
        report["results"]["passed_checks"].pop()
    elif change == "another framework":
        report["check_type"] = "terraform"
    elif change == "unknown file":
        report["results"]["passed_checks"][0]["file_path"] = "/elsewhere/Other.template.json"
    return report


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("parsing error", "could not parse"),
        ("skipped by checkov", r"skipped checks itself \(CKV_AWS_117 AWS::Lambda::Function.Fn\)"),
        ("template not scanned", "reported nothing for assembly-MangaAssist-dev/MangaAssistdevApi0A1B2C3D"),
        ("another framework", "not a checkov CloudFormation report"),
        ("unknown file", "which is no synthesized template"),
    ],
)
def test_fails_on_a_report_it_cannot_trust(templates: list[StackTemplate], change: str, message: str) -> None:
    dev = _stage(templates, "dev")
    with pytest.raises(GateError, match=message):
        report_findings(_broken(_report(dev, []), change), dev)


def test_checkov_runs_offline_on_nothing_of_the_callers_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a caller with a platform API key and checkov options in its environment
    monkeypatch.setenv("BC_API_KEY", "key")
    monkeypatch.setenv("CKV_SKIP_CHECK", "CKV_AWS_117")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")

    command = checkov_command(Path("venv/bin/checkov"), [Path("a.template.json")])
    environment = checkov_environment(tmp_path)

    # Then checkov gets only its own settings: CloudFormation checks, no downloads, no version check
    assert command[0] == str(Path("venv/bin/checkov").absolute())
    assert command[1:9] == [
        "--framework",
        "cloudformation",
        "--skip-download",
        "--soft-fail",
        "--compact",
        "--output",
        "json",
        "--file",
    ]
    assert command[9:] == [str(Path("a.template.json").resolve())]
    assert environment["CKV_SKIP_PACKAGE_UPDATE_CHECK"] == "true"
    assert environment["BC_SKIP_MAPPING"] == "TRUE"
    assert environment["HOME"] == str(tmp_path)
    assert not {"BC_API_KEY", "CKV_SKIP_CHECK", "HTTPS_PROXY"} & set(environment)


def test_checkov_keeps_its_bytecode_where_the_caller_does_and_writes_none_without_a_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPYCACHEPREFIX", str(tmp_path / "pycache"))
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    kept = checkov_environment(tmp_path)
    assert kept["PYTHONPYCACHEPREFIX"] == str(tmp_path / "pycache")
    assert "PYTHONDONTWRITEBYTECODE" not in kept

    monkeypatch.delenv("PYTHONPYCACHEPREFIX")
    written_nowhere = checkov_environment(tmp_path)
    assert written_nowhere["PYTHONDONTWRITEBYTECODE"] == "1"
    assert "PYTHONPYCACHEPREFIX" not in written_nowhere


_FAKE_CHECKOV = """#!{python}
import json, os, sys
# Refuse a run that could reach the platform or read the caller's settings.
if "--skip-download" not in sys.argv or "BC_API_KEY" in os.environ or os.getcwd() != os.environ["HOME"]:
    sys.exit(3)
if {crash}:
    print("Traceback: boom", file=sys.stderr)
    sys.exit(2)
files = sys.argv[sys.argv.index("--file") + 1:]
def check(path, check_id):
    return dict(check_id=check_id, check_name="Lambda in a VPC", file_path=path, resource="AWS::Lambda::Function.Fn")
print(json.dumps(dict(
    check_type="cloudformation",
    results=dict(passed_checks=[check(f, "CKV_AWS_45") for f in files],
                 failed_checks=[check(f, "CKV_AWS_117") for f in files], skipped_checks=[], parsing_errors=[]),
    summary=dict(parsing_errors=0, checkov_version="3.3.30"),
)))
"""


def _fake_checkov(tmp_path: Path, *, crash: bool = False) -> Path:
    checkov = tmp_path / "venv" / "bin" / "checkov"
    checkov.parent.mkdir(parents=True)
    checkov.write_text(_FAKE_CHECKOV.format(python=sys.executable, crash=crash))
    checkov.chmod(0o755)
    return checkov


def _skip_file(tmp_path: Path, entries: list[dict[str, Any]]) -> Path:
    path = tmp_path / "checkov-skips.yaml"
    path.write_text(yaml.safe_dump({"skips": entries}))
    return path


def test_main_scans_every_stage_and_passes_when_every_finding_is_accepted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a finding on every function of both stages, all accepted (and a key checkov must not see)
    monkeypatch.setenv("BC_API_KEY", "key")
    outdir = _outdir(tmp_path)
    skips = _skip_file(tmp_path, [_entry(resources={"Api": ["Fn"], "Storage": ["Fn"]})])

    code = main([str(outdir), "--checkov", str(_fake_checkov(tmp_path)), "--skips", str(skips)])

    # Then it passes, says so with the counts, and keeps each stage's report
    assert code == 0
    assert "checkov: 4 templates of 2 stages, 4 findings: 4 accepted by" in capsys.readouterr().out
    assert json.loads((outdir / "checkov-prod.json").read_text())["check_type"] == "cloudformation"
    assert (outdir / "checkov-dev.json").is_file()


def test_main_fails_naming_each_finding_not_accepted_and_each_stale_skip(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given skips for dev only, one of them for a check that no longer fails
    outdir = _outdir(tmp_path)
    skips = _skip_file(
        tmp_path,
        [
            _entry(stages=["dev"], resources={"Api": ["Fn"], "Storage": ["Fn"]}),
            _entry(check="CKV_AWS_116", stages=["dev"]),
        ],
    )

    code = main([str(outdir), "--checkov", str(_fake_checkov(tmp_path)), "--skips", str(skips)])

    # Then prod's findings are named with their construct paths, and the stale skip too
    assert code == 1
    err = capsys.readouterr().err
    assert "not accepted: CKV_AWS_117 prod Api Fn (MangaAssist-prod/Api/Fn): Lambda in a VPC" in err
    assert "not accepted: CKV_AWS_117 prod Storage Fn (MangaAssist-prod/Storage/Fn)" in err
    assert "CKV_AWS_116 dev Api Fn matches no finding any more" in err


def test_main_fails_when_checkov_crashes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outdir = _outdir(tmp_path)
    skips = _skip_file(tmp_path, [_entry()])

    code = main([str(outdir), "--checkov", str(_fake_checkov(tmp_path, crash=True)), "--skips", str(skips)])

    assert code == 2
    assert "exited 2:\nTraceback: boom" in capsys.readouterr().err


def test_main_fails_before_scanning_on_a_malformed_skip_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    skips = _skip_file(tmp_path, [_entry(reason="ok")])

    code = main([str(_outdir(tmp_path)), "--checkov", str(tmp_path / "absent"), "--skips", str(skips)])

    assert code == 2
    assert "entry 1: reason must say why" in capsys.readouterr().err


def test_main_fails_without_a_synthesized_assembly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "cdk.out.all"), "--skips", str(_skip_file(tmp_path, []))]) == 2
    assert "synthesize first (make synth-all)" in capsys.readouterr().err
