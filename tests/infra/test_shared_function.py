"""SharedFunction: the one way every Lambda of the app is built (tested on a function in a test stack)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Duration, Stack
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from aws_cdk.assertions import Match, Template

from constructs_lib import SharedFunction
from constructs_lib.shared_function import POWERTOOLS_VERSION, powertools_parameter_name

PROBE = Path(__file__).resolve().parents[1] / "fixtures" / "probe_pkg"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> tuple[Template, Path]:
    outdir = tmp_path_factory.mktemp("cdkout")
    app = App(outdir=str(outdir))
    stack = Stack(app, "FactoryTest")
    failures = sqs.Queue(stack, "Failures", enforce_ssl=True)
    SharedFunction(
        stack,
        "Probe",
        code_root=PROBE,
        handler="probe_pkg.handler.handler",
        environment={"TABLE_NAME": "t"},
        timeout=Duration.seconds(12),
        memory_size=512,
        log_retention=logs.RetentionDays.TWO_WEEKS,
        on_failure=failures,
        retry_attempts=1,
    )
    app.synth()
    return Template.from_stack(stack), outdir


@pytest.fixture(scope="module")
def template(synthesized: tuple[Template, Path]) -> Template:
    return synthesized[0]


def test_function_defaults(template: Template) -> None:
    template.has_resource_properties(
        "AWS::Lambda::Function",
        {
            "Runtime": "python3.14",
            "Architectures": ["arm64"],
            "Handler": "probe_pkg.handler.handler",
            "Timeout": 12,
            "MemorySize": 512,
            "TracingConfig": {"Mode": "Active"},
            "LoggingConfig": Match.object_like({"LogFormat": "JSON", "LogGroup": {"Ref": Match.any_value()}}),
            "Layers": [{"Ref": Match.string_like_regexp("SsmParameterValue.*powertools")}],
            "Environment": {
                "Variables": {
                    "POWERTOOLS_SERVICE_NAME": "Probe",
                    "POWERTOOLS_METRICS_NAMESPACE": "Probe",
                    "POWERTOOLS_LOG_LEVEL": "INFO",
                    "TABLE_NAME": "t",
                }
            },
        },
    )


def test_powertools_layer_resolves_through_public_ssm_at_the_pinned_version(template: Template) -> None:
    pinned = next(
        line.split("==")[1].strip()
        for line in (ROOT / "requirements.txt").read_text().splitlines()
        if line.startswith("aws-lambda-powertools==")
    )
    assert pinned == POWERTOOLS_VERSION
    name = powertools_parameter_name()
    assert name == f"/aws/service/powertools/python/arm64/python3.14/{pinned}"
    params = template.to_json()["Parameters"]
    assert any(p.get("Default") == name and "AWS::SSM::Parameter::Value" in p["Type"] for p in params.values())


def test_log_group_has_retention(template: Template) -> None:
    template.has_resource_properties("AWS::Logs::LogGroup", {"RetentionInDays": 14})


def test_role_has_no_managed_policies_and_writes_only_its_log_group(template: Template) -> None:
    roles = template.find_resources("AWS::IAM::Role")
    assert len(roles) == 1
    assert "ManagedPolicyArns" not in next(iter(roles.values()))["Properties"]
    statements = _statements(template)
    log_statements = [s for s in statements if any(str(a).startswith("logs:") for a in _list(s["Action"]))]
    assert log_statements, "the function can write its logs"
    for statement in log_statements:
        assert statement["Resource"] != "*"


def test_xray_wildcard_lives_alone_in_the_tracing_policy(template: Template) -> None:
    policies = template.find_resources("AWS::IAM::Policy")
    wildcard = [
        (name, s)
        for name, p in policies.items()
        for s in p["Properties"]["PolicyDocument"]["Statement"]
        if s.get("Resource") == "*"
    ]
    assert [name.startswith("ProbeTracingPolicy") for name, _ in wildcard] == [True]
    assert sorted(wildcard[0][1]["Action"]) == ["xray:PutTelemetryRecords", "xray:PutTraceSegments"]


def test_async_failures_go_to_the_queue(template: Template) -> None:
    template.has_resource_properties(
        "AWS::Lambda::EventInvokeConfig",
        {
            "MaximumRetryAttempts": 1,
            "DestinationConfig": {
                "OnFailure": {"Destination": {"Fn::GetAtt": [Match.string_like_regexp("Failures"), "Arn"]}}
            },
        },
    )


def test_asset_holds_only_the_package(synthesized: tuple[Template, Path]) -> None:
    template, outdir = synthesized
    code = template.find_resources("AWS::Lambda::Function")
    s3_key = next(iter(code.values()))["Properties"]["Code"]["S3Key"]
    asset_hash = s3_key.removesuffix(".zip")
    asset_dir = outdir / f"asset.{asset_hash}"
    files = sorted(str(p.relative_to(asset_dir)) for p in asset_dir.rglob("*") if p.is_file())
    assert files == ["probe_pkg/__init__.py", "probe_pkg/handler.py"]


def _asset_of(code_root: Path, outdir: Path) -> tuple[str, list[str]]:
    """Synthesize one function from ``code_root``; its asset hash and the files its asset holds."""
    app = App(outdir=str(outdir))
    stack = Stack(app, "AssetTest")
    SharedFunction(stack, "Probe", code_root=code_root, handler="probe_pkg.handler.handler")
    app.synth()
    function = next(iter(Template.from_stack(stack).find_resources("AWS::Lambda::Function").values()))
    asset_hash = str(function["Properties"]["Code"]["S3Key"]).removesuffix(".zip")
    asset_dir = outdir / f"asset.{asset_hash}"
    return asset_hash, sorted(str(p.relative_to(asset_dir)) for p in asset_dir.rglob("*") if p.is_file())


def test_asset_is_an_include_list_of_the_packages_python_files(tmp_path: Path) -> None:
    # Given the package twice: a clean copy, and one in a checkout full of local state
    clean = tmp_path / "clean" / "probe_pkg"
    shutil.copytree(PROBE, clean)
    dirty_root = tmp_path / "dirty"
    dirty = dirty_root / "probe_pkg"
    shutil.copytree(PROBE, dirty)
    (dirty_root / ".env").write_text("SECRET=root\n")
    (dirty_root / "notes.txt").write_text("root notes\n")
    (dirty_root / ".git").mkdir()
    (dirty_root / ".git" / "config").write_text("[core]\n")
    (dirty / ".env").write_text("SECRET=package\n")
    (dirty / "notes.txt").write_text("todo\n")
    (dirty / "__pycache__").mkdir()
    (dirty / "__pycache__" / "handler.cpython-311.pyc").write_bytes(b"\0\0")
    (dirty / ".git").mkdir()
    (dirty / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (dirty / ".hidden").mkdir()
    (dirty / ".hidden" / "leak.py").write_text("TOKEN = 'x'\n")
    (dirty / "sub").mkdir()
    (dirty / "sub" / "__init__.py").write_text("")
    (dirty / "sub" / "README.md").write_text("docs\n")
    clean_sub = clean / "sub"
    clean_sub.mkdir()
    (clean_sub / "__init__.py").write_text("")

    # When each is built into the code asset
    clean_hash, clean_files = _asset_of(clean, tmp_path / "out-clean")
    dirty_hash, dirty_files = _asset_of(dirty, tmp_path / "out-dirty")

    # Then the asset holds exactly the Python files, and its hash ignores everything else
    assert dirty_files == ["probe_pkg/__init__.py", "probe_pkg/handler.py", "probe_pkg/sub/__init__.py"]
    assert dirty_files == clean_files
    assert dirty_hash == clean_hash
    # And a change to the code changes it
    (dirty / "handler.py").write_text((dirty / "handler.py").read_text() + "\n# changed\n")
    changed_hash, _ = _asset_of(dirty, tmp_path / "out-changed")
    assert changed_hash != clean_hash


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"handler": "probe_pkg.missing.handler"}, r"handler 'probe_pkg.missing.handler': no module"),
        ({"handler": "other.handler.handler"}, r"must live in the 'probe_pkg' package"),
        ({"handler": "Probe-Pkg.handler"}, r"handler must be a dotted path"),
        ({"memory_size": 64}, r"memory_size must be 128..10240 MB \(given 64\)"),
        ({"retry_attempts": 3}, r"retry_attempts must be 0..2 \(given 3\)"),
    ],
)
def test_fails_on_bad_props(kwargs: dict[str, Any], message: str) -> None:
    stack = Stack(App(), "Bad")
    props: dict[str, Any] = {"code_root": PROBE, "handler": "probe_pkg.handler.handler", **kwargs}
    SharedFunction(stack, "Fn", **props)
    with pytest.raises(RuntimeError, match=r"\[Bad/Fn\] .*" + message):
        Template.from_stack(stack)


def _statements(template: Template) -> list[dict[str, Any]]:
    return [
        s
        for p in template.find_resources("AWS::IAM::Policy").values()
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def test_template_is_json_serializable(template: Template) -> None:
    json.dumps(template.to_json())
