"""What one process of a test run makes, for every other process of the run to reuse.

A stage's synthesis takes tens of seconds of jsii, and a run's processes (pytest-xdist's workers,
the servers they start) each asked for the same few configurations. The run names a directory in
:data:`SHARED_DIR` that its processes inherit; :func:`made_once` fills one entry of it once.
Nothing here imports the CDK: the run's first process sets the directory up before its workers start.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

#: The environment variable naming a directory where one test run's processes share what they
#: synthesized. Unset, every process synthesizes for itself.
SHARED_DIR = "EMBEDDED_SYNTH_SHARED_DIR"


def scratch_directory(prefix: str) -> Path:
    """A new temporary directory, removed when this process exits.

    A synthesis writes several megabytes of assets and templates; one made for a single process
    (a worker's stages, ``make capacity``, the demo) would otherwise stay in the temporary folder.
    """
    directory = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    return directory


def made_once(name: str, make: Callable[[Path], None]) -> Path:
    """The directory that ``make`` filled for ``name``: made once per test run, by whichever process asks first.

    Another process asking meanwhile waits for it (a lock file), then reads the same directory.
    A ``make`` that raises leaves nothing behind, and the next caller makes it again. Outside a
    test run (:data:`SHARED_DIR` unset), and where there is no ``fcntl``, every call makes its own,
    removed when the process exits.
    """
    root = os.environ.get(SHARED_DIR, "")
    try:
        import fcntl
    except ImportError:  # Windows: no advisory locks; each process makes its own
        root = ""
    if not root:
        directory = scratch_directory("cdkout-")
        make(directory)
        return directory
    digest = hashlib.sha256(name.encode()).hexdigest()[:24]
    directory, made = Path(root) / digest, Path(root) / f"{digest}.made"
    with (Path(root) / f"{digest}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not made.exists():
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir(parents=True)
            make(directory)
            made.write_text(name)
    return directory
