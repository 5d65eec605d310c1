"""Bytecode for a code asset, compiled at synth time by a Python of the functions' runtime.

Lambda runs a function from its read-only task root (``/var/task``), where Python cannot write
the bytecode it compiles: without ``__pycache__`` in the asset, every cold start compiles every
module of the app it imports. When the machine that synthesizes has a Python of the runtime's
version, the asset also holds each module's bytecode, so a cold start only loads it.

Which interpreter compiles (:func:`bytecode_python`):

* ``LAMBDA_BYTECODE_PYTHON`` names it (a path or a command on ``PATH``); ``none`` turns bytecode
  off. An interpreter of another version is refused with both versions named: its bytecode would
  be ignored at every cold start.
* Otherwise the one running the synth, when it is the runtime's version; else ``pythonX.Y`` of the
  runtime's version on ``PATH``, when it runs as that version (a version manager's shim of a
  version it has not installed does not); else none, and the asset holds the sources alone (as it
  always did: correct, only slower to start).

The bytecode is checked-hash (PEP 552): Python uses a module's ``.pyc`` only while it was compiled
from exactly the source beside it, whatever the files' times after a zip and an unzip. The paths
it records are the task root's (Python puts the real path in on loading anyway), so the same
sources give the same bytes on every machine: the asset's hash does not change with who synthesized.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Final

#: The environment variable that names the interpreter (see the module docstring).
ENVIRONMENT_VARIABLE: Final = "LAMBDA_BYTECODE_PYTHON"
#: Where Lambda puts a function's code: the paths the bytecode records.
TASK_ROOT: Final = "/var/task"
_OFF: Final = frozenset({"none", "off", "0", "false"})


class BytecodeError(RuntimeError):
    """The named interpreter cannot compile for the runtime, or compiling failed."""


def runtime_version(runtime_name: str) -> tuple[int, int]:
    """``python3.14`` -> ``(3, 14)``."""
    major, _, minor = runtime_name.removeprefix("python").partition(".")
    if not (runtime_name.startswith("python") and major.isdigit() and minor.isdigit()):
        raise ValueError(f"not a Python runtime name: {runtime_name!r}")
    return int(major), int(minor)


def interpreter_version(python: str) -> tuple[int, int]:
    """The ``(major, minor)`` version of the interpreter ``python`` (a path or a command)."""
    try:
        done = subprocess.run(  # noqa: S603 - the interpreter the user named, or one found on PATH
            [python, "-c", "import sys; print(*sys.version_info[:2])"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError) as err:
        raise BytecodeError(f"{python} does not run as a Python interpreter: {err}") from None
    try:
        major, minor = done.stdout.split()
        return int(major), int(minor)
    except ValueError:
        raise BytecodeError(f"{python} does not say its version as Python does: {done.stdout!r}") from None


def turned_off() -> bool:
    """Whether ``LAMBDA_BYTECODE_PYTHON`` turns bytecode off (``none``)."""
    return os.environ.get(ENVIRONMENT_VARIABLE, "").strip().lower() in _OFF


def bytecode_python(runtime_name: str) -> str | None:
    """The interpreter that compiles the asset's bytecode for ``runtime_name``, or None (see the module docstring)."""
    wanted = runtime_version(runtime_name)
    if turned_off():
        return None
    named = os.environ.get(ENVIRONMENT_VARIABLE, "").strip()
    if named:
        python = shutil.which(named) or named
        found = interpreter_version(python)
        if found != wanted:
            raise BytecodeError(
                f"{ENVIRONMENT_VARIABLE}={named} is Python {found[0]}.{found[1]}, but the functions run "
                f"{runtime_name}: its bytecode would never be used (name a Python {wanted[0]}.{wanted[1]}, or none)"
            )
        return python
    if sys.version_info[:2] == wanted:
        return sys.executable
    candidate = shutil.which(f"python{wanted[0]}.{wanted[1]}")
    if candidate is None:
        return None
    try:  # a version manager's shim of a version it has not installed is on PATH but does not run
        return candidate if interpreter_version(candidate) == wanted else None
    except BytecodeError:
        return None


def compile_tree(python: str, root: Path) -> None:
    """Write checked-hash bytecode beside every module under ``root``, with the task root's paths.

    Without ``PYTHONPYCACHEPREFIX``, which would send the bytecode to that directory instead of
    the asset's ``__pycache__``.
    """
    command = [
        python,
        "-m",
        "compileall",
        "-q",
        "--invalidation-mode",
        "checked-hash",
        "-s",
        str(root),
        "-p",
        TASK_ROOT,
        str(root),
    ]
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPYCACHEPREFIX"}
    done = subprocess.run(  # noqa: S603 - the interpreter chosen above
        command, capture_output=True, text=True, check=False, timeout=600, env=environment
    )
    if done.returncode != 0:
        raise BytecodeError(f"{python} could not compile the code asset:\n{done.stdout}{done.stderr}".rstrip())
