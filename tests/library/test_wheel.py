"""The construct library as another team gets it: a wheel, installed into a fresh virtual environment.

The wheel is built from a copy of the repository (so the build leaves nothing in the work tree),
installed into a new venv outside the repository, and a small foreign app synthesizes there:
its own ``app.py`` in a temp directory, with no ``lambdas``, ``stacks`` or ``cdk.json`` of
ours. To stay offline and fast, the venv reaches the repository venv's third-party packages
(aws-cdk-lib, constructs, boto3) through a ``.pth`` file; the repository root is never on its path.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
APP_PACKAGES = ("lambdas", "stacks", "tests", "tools", "bench")
_COPY_IGNORE = shutil.ignore_patterns(
    ".git",
    ".venv",
    "node_modules",
    "cdk.out*",
    "__pycache__",
    "*.pyc",
    ".mypy_cache",
    ".ruff_cache",
    "build",
    "*.egg-info",
)

FOREIGN_APP = textwrap.dedent(
    """
    import json
    import sys

    import constructs_lib
    from aws_cdk import App, Duration, Stack
    from aws_cdk import aws_kms as kms
    from aws_cdk import aws_lambda as lambda_
    from aws_cdk import aws_sns as sns
    from aws_cdk import aws_stepfunctions as sfn
    from constructs_lib import (
        FanoutTopic,
        HumanApprovalGate,
        SecureEventBus,
        SingleTable,
        StreamConsumer,
        WorkflowOptions,
        WorkflowStateMachine,
    )

    app = App(outdir=sys.argv[1])
    stack = Stack(app, "Orders")
    key = kms.Key(stack, "Key", enable_key_rotation=True)
    table = SingleTable(stack, "Orders", encryption_key=key)
    handler = lambda_.Function(
        stack,
        "OnChange",
        runtime=lambda_.Runtime.PYTHON_3_12,
        handler="index.handler",
        code=lambda_.Code.from_inline("def handler(event, context):\\n    return {}\\n"),
    )
    StreamConsumer(stack, "Changes", function=handler, table=table.table, encryption_key=key)
    queue_key = kms.Key(stack, "QueueKey", enable_key_rotation=True)
    topic = FanoutTopic(stack, "Shipping", encryption_key=key, queue_encryption_key=queue_key)
    parcels = sns.SubscriptionFilter.string_filter(allowlist=["parcel"])
    topic.add_queue_subscriber("Warehouse", filter_policy={"kind": parcels})
    SecureEventBus(stack, "Bus", encryption_key=key)

    gate = HumanApprovalGate(stack, "Refund", existing_table=table.table, link_base_url="https://api.example.org/v1")
    gate.on_rejected(sfn.Fail(stack, "RefundDeclined"))
    pay = sfn.Pass(stack, "PayOut")
    workflow = WorkflowStateMachine(
        stack,
        "Refunds",
        definition=sfn.Chain.start(gate).next(pay),
        options=WorkflowOptions(encryption_key=key, timeout=Duration.days(8)),
    )
    gate.bind(workflow.state_machine)
    app.synth()
    print(json.dumps({"library": constructs_lib.__file__}))
    """
)


def _run(command: list[str], **options: Any) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(command, capture_output=True, text=True, check=False, **options)  # noqa: S603
    assert result.returncode == 0, f"{' '.join(command)}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tmp_path_factory.mktemp("source") / "repo"
    shutil.copytree(REPO, source, ignore=_COPY_IGNORE)
    dist = tmp_path_factory.mktemp("dist")
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
         "-w", str(dist), str(source)],
    )  # fmt: skip
    (built,) = dist.glob("*.whl")
    return built


@pytest.fixture(scope="module")
def foreign_template(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    """Install the wheel into a fresh venv, synthesize the foreign app there; its template and library path."""
    root = tmp_path_factory.mktemp("foreign")
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q", str(wheel)])
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    # Third-party packages only: the repository venv's site-packages, never the repository root.
    (site / "zz_third_party.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    app_dir = root / "app"
    app_dir.mkdir()
    (app_dir / "app.py").write_text(FOREIGN_APP)
    environment = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    result = _run([str(python), "app.py", str(root / "cdk.out")], cwd=app_dir, env=environment, timeout=120)
    library = json.loads(result.stdout.strip().splitlines()[-1])["library"]
    template = json.loads((root / "cdk.out" / "Orders.template.json").read_text())
    return template, library


def test_the_wheel_holds_the_library_and_the_gate_runtime_and_nothing_of_the_app(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top_levels = {name.split("/")[0] for name in names}

    assert wheel.name.startswith("hardened_cdk_constructs-0.1.0-")
    assert not top_levels & set(APP_PACKAGES), sorted(top_levels)
    assert {t for t in top_levels if not t.endswith(".dist-info")} == {"constructs_lib"}
    assert "constructs_lib/approval_gate/gate_runtime/request.py" in names
    assert "constructs_lib/approval_gate/gate_runtime/decide.py" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert [n for n in names if n.endswith(".dist-info/LICENSE") or "/licenses/LICENSE" in n]
    metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
    text = zipfile.ZipFile(wheel).read(metadata).decode()
    assert "Requires-Dist: aws-cdk-lib" in text
    assert "Requires-Dist: constructs" in text
    assert "Author-email: MangaAssist Dev <dev@mangaassist.example>" in text
    # The licence as an SPDX expression (metadata 2.4), not the table form setuptools retires
    assert "License-Expression: Apache-2.0" in text
    assert "License-File: LICENSE" in text
    assert "cdk-nag" not in text


def test_a_foreign_app_synthesizes_with_the_installed_library(foreign_template: tuple[dict[str, Any], str]) -> None:
    template, library = foreign_template
    resources = template["Resources"]
    functions = {lid: r["Properties"] for lid, r in resources.items() if r["Type"] == "AWS::Lambda::Function"}
    handlers = {props["Handler"] for props in functions.values()}

    # Then the library came from the venv, not from the repository
    assert not library.startswith(str(REPO)), library
    # and the gate's functions run the gate's own code asset, never a handler of our app
    assert {"gate_runtime.request.handler", "gate_runtime.decide.handler"} <= handlers
    assert not [h for h in handlers if h.startswith(APP_PACKAGES)]
    gate_assets = {
        json.dumps(props["Code"]) for props in functions.values() if props["Handler"].startswith("gate_runtime.")
    }
    assert len(gate_assets) == 1, "request and decision functions share the gate's one code asset"
    # and every construct of the app is there
    kinds = {r["Type"] for r in resources.values()}
    assert {
        "AWS::DynamoDB::Table",
        "AWS::Lambda::EventSourceMapping",
        "AWS::SNS::Topic",
        "AWS::SQS::Queue",
        "AWS::Events::EventBus",
        "AWS::StepFunctions::StateMachine",
    } <= kinds
    # and the gate keeps its reviews in the table it was given, with that table's key names
    request = next(p for p in functions.values() if p["Handler"] == "gate_runtime.request.handler")
    variables = request["Environment"]["Variables"]
    assert (variables["REVIEW_PARTITION_KEY"], variables["REVIEW_SORT_KEY"]) == ("PK", "SK")
