"""``app.py`` synthesized as the CDK CLI runs it: in its own interpreter, with the CLI's environment.

One run of both stages, in a fresh interpreter (so nothing a test imported counts): what synthesis
loads, whether aws-cdk-lib recorded an error code in ``CDK_ERROR_FILE``, and what the Lambda
code asset holds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from embedded.synth import cdk_context

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

#: Runs app.py as ``cdk synth`` does, then reports the top-level packages the interpreter loaded.
_SYNTH = """
import json, runpy, sys
runpy.run_path("app.py", run_name="__main__")
print(json.dumps(sorted(sys.modules)))
"""


@dataclass(frozen=True)
class Synthesis:
    outdir: Path
    error_file: Path
    modules: frozenset[str]


@pytest.fixture(scope="module")
def synthesis(tmp_path_factory: pytest.TempPathFactory) -> Synthesis:
    # Given the environment the CLI gives the app: the output directory, the context, the error file
    outdir = tmp_path_factory.mktemp("cdk.out")
    error_file = outdir / "error.txt"
    environment = {
        **os.environ,
        "CDK_OUTDIR": str(outdir),
        "CDK_CONTEXT_JSON": json.dumps({**cdk_context(), "stage": "dev,prod"}),
        "CDK_ERROR_FILE": str(error_file),
        "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION": "1",
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
    }
    # When app.py synthesizes both stages in a fresh interpreter
    done = subprocess.run(  # noqa: S603 - this interpreter, a fixed script
        [sys.executable, "-c", _SYNTH],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    modules = frozenset(json.loads(done.stdout.strip().splitlines()[-1]))
    return Synthesis(outdir, error_file, modules)


def test_synthesis_loads_neither_boto3_nor_the_lambda_runtime(synthesis: Synthesis) -> None:
    loaded = sorted(m for m in synthesis.modules if m.split(".")[0] in ("boto3", "botocore", "lambdas"))

    assert loaded == [], f"synthesis imported Lambda runtime code: {loaded[:10]}"
    assert "contracts" in synthesis.modules


def test_synthesis_records_no_error_in_the_clis_error_file(synthesis: Synthesis) -> None:
    # aws-cdk-lib writes the code of every construct error it creates, caught or not, to this file.
    assert (synthesis.outdir / "manifest.json").is_file()
    assert not synthesis.error_file.exists(), f"error.txt holds {synthesis.error_file.read_text()!r}"


def test_the_lambda_asset_ships_the_contracts_beside_the_lambdas_package(synthesis: Synthesis) -> None:
    template_path = next((synthesis.outdir / "assembly-MangaAssist-dev").glob("*Events*.template.json"))
    template = json.loads(template_path.read_text())
    function = next(
        r for r in template["Resources"].values() if r["Properties"].get("Handler") == "lambdas.events.router.handler"
    )
    asset = synthesis.outdir / f"asset.{function['Properties']['Code']['S3Key'].removesuffix('.zip')}"

    top_levels = sorted(p.name for p in asset.iterdir())

    assert top_levels == ["contracts", "lambdas"]
    assert (asset / "contracts" / "workflows.py").is_file()
