"""Cold imports of the handler modules, as Lambda runs them, against ``import boto3`` alone.

Which modules: every module a Python function's ``Handler`` names in the synthesized templates
(one row per module; the cleanup worker's four functions share one), so a new function is measured
without anyone listing it. Each runs from its own code asset in the assembly, which holds only
``.py`` files, as Lambda gets them: the task root is read-only there, so no bytecode is cached and
every cold start compiles the app's own modules; ``PYTHONDONTWRITEBYTECODE`` keeps it so here, and
no ``PYTHONPYCACHEPREFIX`` (the Makefile's) lends it bytecode compiled by an earlier round.

The environment is Lambda's (:func:`lambda_environment`): ``LAMBDA_TASK_ROOT`` set and tracing on,
as the functions deploy. Outside Lambda the X-Ray SDK builds a sampling client at import (about as
costly as ``import boto3`` itself) and ``POWERTOOLS_TRACE_DISABLED`` skips the patching, so
measuring there counts work Lambda never does and leaves out work it always does.

Every round imports the baseline and each module once, each in a fresh interpreter; a figure is
the median over the rounds of the import's CPU time (:func:`cold_import_seconds` says why).

The interpreter is the functions' runtime's version where this machine has one (found as the
synth finds the one that compiles the asset's bytecode, :mod:`constructs_lib.bytecode`), with
the runtime's SDK and the Powertools layer's packages, at the versions this repository pins,
installed for it into ``.bench-runtime/`` (:func:`runtime_interpreter`). Without one, this
interpreter stands in, and the rows say so: its imports cost differently, and it ignores the
asset's bytecode if there is any.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Final

PY: Final = sys.executable
ROOT: Final = Path(__file__).resolve().parents[1]
#: What Lambda's Python runtime brings (the SDK) and what the Powertools layer adds, by distribution
#: name: installed for the runtime's interpreter at the versions this repository's environment pins.
RUNTIME_PACKAGES: Final = (
    "boto3",
    "botocore",
    "s3transfer",
    "jmespath",
    "python-dateutil",
    "six",
    "urllib3",
    "aws-lambda-powertools",
    "aws-xray-sdk",
    "wrapt",
    "typing_extensions",
    "fastjsonschema",
    "PyJWT",
    "cryptography",
    "cffi",
    "pycparser",
)
#: Only the functions' own code: CDK's providers (Node.js) are not ours to trim.
_RUNTIME_PREFIX: Final = "python"
#: What Lambda sets that is not the function's own configuration.
_LAMBDA_PREFIXES: Final = ("POWERTOOLS_", "LAMBDA_", "AWS_LAMBDA_", "_X_AMZN", "_HANDLER")


@dataclass(frozen=True)
class Handler:
    """One handler module, the code asset it runs from and its function's plain-text variables."""

    module: str
    asset: Path
    variables: Mapping[str, str] = field(default_factory=dict)
    runtime: str = ""  # the function's Runtime (python3.14)


def lambda_environment(task_root: Path, variables: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment as Lambda would set it around a handler's import.

    The function's own plain-text variables (resource names are references until deploy, and
    nothing reads them at import) go on top; so does nothing that disables tracing. The X-Ray SDK
    marks its start in ``/tmp/.aws-xray``, as it does in Lambda.
    """
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(_LAMBDA_PREFIXES) and key != "PYTHONPYCACHEPREFIX"
    }
    region = environment.get("AWS_REGION") or environment.get("AWS_DEFAULT_REGION") or "us-east-1"
    environment.update(
        {
            "POWERTOOLS_SERVICE_NAME": "cold-import-probe",
            **(variables or {}),
            "LAMBDA_TASK_ROOT": str(task_root),
            "AWS_LAMBDA_FUNCTION_NAME": "cold-import-probe",
            "AWS_REGION": region,
            "AWS_DEFAULT_REGION": region,
            "PYTHONDONTWRITEBYTECODE": "1",
        }
    )
    return environment


def handlers_in(assembly: Path) -> list[Handler]:
    """Every handler module of the assembly's Python functions, with its code asset, by module name."""
    found: dict[str, Handler] = {}
    for template_path in sorted(assembly.rglob("*.template.json")):
        template = json.loads(template_path.read_text())
        for resource in template.get("Resources", {}).values():
            properties: dict[str, Any] = resource.get("Properties", {})
            if resource.get("Type") != "AWS::Lambda::Function":
                continue
            if not str(properties.get("Runtime", "")).startswith(_RUNTIME_PREFIX):
                continue
            asset_path = resource.get("Metadata", {}).get("aws:asset:path")
            if not asset_path:
                continue
            module = str(properties["Handler"]).rpartition(".")[0]
            variables = properties.get("Environment", {}).get("Variables", {})
            found.setdefault(
                module,
                Handler(
                    module,
                    (template_path.parent / asset_path).resolve(),
                    {k: v for k, v in variables.items() if isinstance(v, str)},
                    str(properties["Runtime"]),
                ),
            )
    return [found[module] for module in sorted(found)]


@dataclass(frozen=True)
class Interpreter:
    """The Python the imports run on, where its packages are, and what the rows call it."""

    python: str
    site: Path | None  # None: the packages of this interpreter's own environment
    label: str


def runtime_interpreter(runtime_name: str, cache: Path = ROOT / ".bench-runtime") -> Interpreter:
    """The runtime's Python with its packages (installed once per set of pins), or this one standing in."""
    from constructs_lib.bytecode import bytecode_python

    python = bytecode_python(runtime_name)
    here = f"{sys.version_info.major}.{sys.version_info.minor}.{sys.version_info.micro}"
    if python is None:
        return Interpreter(PY, None, f"Python {here} standing in for {runtime_name} (none found here)")
    pins = sorted(f"{name}=={metadata.version(name)}" for name in RUNTIME_PACKAGES)
    digest = hashlib.sha256("\n".join(pins).encode()).hexdigest()[:16]
    site = cache / f"{runtime_name}-{digest}"
    if not site.is_dir():
        pip = Path(str(metadata.distribution("pip").locate_file("pip")))  # this environment's pip, run by that one
        building = site.with_name(site.name + ".building")
        shutil.rmtree(building, ignore_errors=True)  # what an interrupted install left
        subprocess.run(  # noqa: S603 - the runtime's interpreter installing this repository's pins
            [python, str(pip), "install", "-q", "--no-deps", "--only-binary=:all:", "--target", str(building), *pins],
            check=True,
        )
        building.rename(site)
    full = subprocess.run(  # noqa: S603
        [python, "-c", "import platform; print(platform.python_version())"], capture_output=True, text=True, check=True
    ).stdout.strip()
    return Interpreter(python, site, f"Python {full}, the runtime's ({runtime_name})")


def holds_bytecode(asset: Path, runtime_name: str) -> bool:
    """Whether the code asset holds bytecode for ``runtime_name`` (``python3.14`` -> ``*.cpython-314.pyc``)."""
    tag = "cpython-" + runtime_name.removeprefix("python").replace(".", "")
    return any(asset.rglob(f"__pycache__/*.{tag}.pyc"))


def cold_import_seconds(
    module: str, asset: Path, variables: Mapping[str, str] | None = None, interpreter: Interpreter | None = None
) -> float:
    """CPU seconds of ``import <module>`` in a fresh interpreter running from ``asset``.

    CPU time, not wall time: an import is one thread of computation over files the page cache
    holds, so its CPU time is what a vCPU of its own would take, and it does not count the moments
    a shared machine runs something else (on this 2-core machine, wall time varied by up to 3x
    between runs, CPU time by under a fifth).
    """
    code = f"import time; t = time.process_time(); import {module}; print(time.process_time() - t)"
    environment = lambda_environment(asset, variables)
    if interpreter is not None and interpreter.site is not None:
        environment["PYTHONPATH"] = str(interpreter.site)  # as Lambda's runtime and layer directories
    done = subprocess.run(  # noqa: S603 - a Python interpreter, a module name from our own templates
        [interpreter.python if interpreter else PY, "-c", code],
        cwd=asset,
        env=environment,
        check=True,
        capture_output=True,
        text=True,
    )
    return float(done.stdout.strip().splitlines()[-1])


@dataclass(frozen=True)
class Measured:
    """Median cold import seconds of the baseline and of each handler module."""

    baseline: float
    modules: dict[str, float]


def measure(handlers: Sequence[Handler], runs: int, interpreter: Interpreter | None = None) -> Measured:
    """Interleaved rounds: ``import boto3``, then every handler module, ``runs`` times."""
    if not handlers:
        raise ValueError("no Python function found in the assembly")
    baseline: list[float] = []
    samples: dict[str, list[float]] = {h.module: [] for h in handlers}
    for _ in range(runs):
        baseline.append(cold_import_seconds("boto3", handlers[0].asset, interpreter=interpreter))
        for handler in handlers:
            samples[handler.module].append(
                cold_import_seconds(handler.module, handler.asset, handler.variables, interpreter)
            )
    return Measured(statistics.median(baseline), {m: statistics.median(s) for m, s in samples.items()})
