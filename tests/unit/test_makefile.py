"""What the Makefile gives every command it runs."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bytecode_is_kept_in_the_repo_even_where_the_environment_says_write_none() -> None:
    # Given a caller whose environment turns bytecode off, as many CI and container images do
    environment = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    environment.pop("PYTHONPYCACHEPREFIX", None)
    make = shutil.which("make")
    assert make, "make is not on PATH: the README's commands need it"
    # When the Makefile runs a command
    shown = subprocess.run(  # noqa: S603 - make from PATH, a fixed rule
        [
            make,
            "--no-print-directory",
            "-s",
            "--eval",
            'bytecode-settings: ; @echo "[$${PYTHONDONTWRITEBYTECODE-}] [$${PYTHONPYCACHEPREFIX-}]"',
            "bytecode-settings",
        ],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    )
    # Then the command compiles into .pycache/, once for every later process
    assert shown.stdout.strip() == f"[] [{ROOT / '.pycache'}]"
