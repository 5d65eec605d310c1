"""constructs_lib.bytecode: the code asset's bytecode, compiled at synth by a Python of the runtime's version.

CI has no Python 3.14 (the functions' runtime), so the asset test pretends the runtime is this
interpreter's version: what is checked is the mechanism, which does not depend on the version.
No test makes a new ``Runtime``: CDK adds each to ``Runtime.ALL``, and cdk-nag takes the newest
there for the latest runtime, so a made-up ``python3.99`` would fail every later nag check.
"""

from __future__ import annotations

import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_lambda as lambda_
from aws_cdk.assertions import Annotations, Match, Template

from constructs_lib import SharedFunction, bytecode
from constructs_lib import shared_function as factory

PROBE = Path(__file__).resolve().parents[1] / "fixtures" / "probe_pkg"
HERE = f"python{sys.version_info.major}.{sys.version_info.minor}"
OTHER = "python3.99"
#: PEP 552: the flags word of a checked-hash pyc (hash-based, check the source).
CHECKED_HASH_FLAGS = 0b11


def test_runtime_names_read_as_versions() -> None:
    assert bytecode.runtime_version("python3.14") == (3, 14)
    with pytest.raises(ValueError, match=r"not a Python runtime name: 'nodejs22\.x'"):
        bytecode.runtime_version("nodejs22.x")


def test_none_turns_bytecode_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(bytecode.ENVIRONMENT_VARIABLE, "none")
    assert bytecode.turned_off()
    assert bytecode.bytecode_python(HERE) is None


def test_a_named_interpreter_of_another_version_is_refused_with_both_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(bytecode.ENVIRONMENT_VARIABLE, sys.executable)
    assert bytecode.bytecode_python(HERE) == sys.executable
    with pytest.raises(bytecode.BytecodeError, match=rf"is Python {HERE[6:]}, but the functions run {OTHER}"):
        bytecode.bytecode_python(OTHER)
    monkeypatch.setenv(bytecode.ENVIRONMENT_VARIABLE, "/nonexistent/python")
    with pytest.raises(bytecode.BytecodeError, match="does not run as a Python interpreter"):
        bytecode.bytecode_python(HERE)


def test_unnamed_it_is_this_interpreter_or_the_runtimes_version_on_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(bytecode.ENVIRONMENT_VARIABLE, raising=False)
    assert bytecode.bytecode_python(HERE) == sys.executable
    monkeypatch.setenv("PATH", str(tmp_path))
    assert bytecode.bytecode_python(OTHER) is None
    found = tmp_path / OTHER
    found.write_text(f"#!/bin/sh\necho {OTHER[6:].replace('.', ' ')}\n")  # says it is 3.99, as that version would
    found.chmod(found.stat().st_mode | stat.S_IXUSR)
    assert bytecode.bytecode_python(OTHER) == str(found)
    # A version manager's shim of a version it has not installed is on PATH, but does not run
    found.write_text("#!/bin/sh\necho 'python3.99: command not found' >&2\nexit 127\n")
    assert bytecode.bytecode_python(OTHER) is None
    found.write_text("#!/bin/sh\necho 'pyenv: version 3.99 is not installed'\n")
    assert bytecode.bytecode_python(OTHER) is None


def _package(root: Path) -> Path:
    shutil.copytree(PROBE, root / "probe_pkg")
    return root


def test_compiled_bytecode_is_checked_hash_records_the_task_root_and_is_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = _package(tmp_path / "a"), _package(tmp_path / "b")
    # (a bytecode directory of the caller's, as the Makefile sets, does not take the asset's bytecode)
    elsewhere = tmp_path / "pycache-prefix"
    monkeypatch.setenv("PYTHONPYCACHEPREFIX", str(elsewhere))

    bytecode.compile_tree(sys.executable, first)
    bytecode.compile_tree(sys.executable, second)

    tag = sys.implementation.cache_tag
    pyc = first / "probe_pkg" / "__pycache__" / f"handler.{tag}.pyc"
    assert int.from_bytes(pyc.read_bytes()[4:8], "little") == CHECKED_HASH_FLAGS
    assert pyc.read_bytes() == (second / "probe_pkg" / "__pycache__" / f"handler.{tag}.pyc").read_bytes()
    assert b"/var/task/probe_pkg/handler.py" in pyc.read_bytes()
    assert str(first).encode() not in pyc.read_bytes()
    assert not elsewhere.exists()
    # Python loads it (python -v says where a module's code came from)
    loaded = subprocess.run(
        [sys.executable, "-v", "-c", "import probe_pkg.handler"],
        cwd=first,
        env={"PYTHONDONTWRITEBYTECODE": "1", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert f"code object from '{pyc}'" in loaded.stderr


def test_source_that_does_not_compile_fails_the_synth_with_the_error(tmp_path: Path) -> None:
    root = _package(tmp_path)
    (root / "probe_pkg" / "broken.py").write_text("def broken(:\n")
    with pytest.raises(bytecode.BytecodeError, match=r"could not compile the code asset:(.|\n)*broken.py"):
        bytecode.compile_tree(sys.executable, root)


def _asset_files(outdir: Path, stack: Stack) -> list[str]:
    function = next(iter(Template.from_stack(stack).find_resources("AWS::Lambda::Function").values()))
    asset_dir = outdir / f"asset.{str(function['Properties']['Code']['S3Key']).removesuffix('.zip')}"
    return sorted(str(p.relative_to(asset_dir)) for p in asset_dir.rglob("*") if p.is_file())


def _synth(outdir: Path) -> tuple[App, Stack]:
    app = App(outdir=str(outdir))
    stack = Stack(app, "Bytecode")
    SharedFunction(stack, "Probe", code_root=PROBE, handler="probe_pkg.handler.handler")
    app.synth()
    return app, stack


def test_the_asset_holds_the_bytecode_when_a_python_of_the_runtime_compiles_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # (never a new Runtime: CDK adds each to Runtime.ALL, where cdk-nag looks for the latest one)
    here = next(runtime for runtime in lambda_.Runtime.ALL if runtime.name == HERE)
    monkeypatch.setattr(factory, "RUNTIME", here)
    monkeypatch.setenv(bytecode.ENVIRONMENT_VARIABLE, sys.executable)

    _, stack = _synth(tmp_path / "out")

    tag = sys.implementation.cache_tag
    assert _asset_files(tmp_path / "out", stack) == [
        "probe_pkg/__init__.py",
        f"probe_pkg/__pycache__/__init__.{tag}.pyc",
        f"probe_pkg/__pycache__/handler.{tag}.pyc",
        "probe_pkg/handler.py",
    ]
    Annotations.from_stack(stack).has_no_info("*", Match.any_value())


def test_without_a_python_of_the_runtime_the_asset_holds_sources_and_the_synth_says_so(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(bytecode.ENVIRONMENT_VARIABLE, raising=False)
    monkeypatch.setattr(bytecode, "bytecode_python", lambda runtime_name: None)  # none found (see the tests above)

    _, stack = _synth(tmp_path / "out")

    assert _asset_files(tmp_path / "out", stack) == ["probe_pkg/__init__.py", "probe_pkg/handler.py"]
    Annotations.from_stack(stack).has_info(
        "/Bytecode", Match.string_like_regexp("sources only: no Python 3.14 here.*LAMBDA_BYTECODE_PYTHON")
    )


def test_a_named_interpreter_of_another_version_fails_the_synth(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(bytecode.ENVIRONMENT_VARIABLE, sys.executable)  # this one is not python3.14
    with pytest.raises(bytecode.BytecodeError, match="its bytecode would never be used"):
        _synth(tmp_path / "out")
