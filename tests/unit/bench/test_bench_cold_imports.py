"""bench/cold_imports.py: which interpreter the cold imports run on, and whether the asset holds its bytecode."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bench import cold_imports


def test_without_a_python_of_the_runtime_this_one_stands_in_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAMBDA_BYTECODE_PYTHON", "none")

    interpreter = cold_imports.runtime_interpreter("python3.14")

    assert interpreter.python == sys.executable
    assert interpreter.site is None  # this environment's own packages
    assert interpreter.label.endswith("standing in for python3.14 (none found here)")


def test_an_asset_holds_bytecode_only_for_the_runtimes_version(tmp_path: Path) -> None:
    cache = tmp_path / "lambdas" / "__pycache__"
    cache.mkdir(parents=True)
    (tmp_path / "lambdas" / "handler.py").write_text("")
    assert not cold_imports.holds_bytecode(tmp_path, "python3.14")
    (cache / "handler.cpython-313.pyc").write_bytes(b"")
    assert not cold_imports.holds_bytecode(tmp_path, "python3.14")
    (cache / "handler.cpython-314.pyc").write_bytes(b"")
    assert cold_imports.holds_bytecode(tmp_path, "python3.14")
