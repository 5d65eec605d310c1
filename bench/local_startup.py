"""Startup of ``make local``: from process start to "serving", against the embedded stage alone.

``python -m local`` on free ports (demo users and all, as a developer starts it) is timed from
the moment it is spawned to its "serving" line, then stopped with SIGINT. The baseline is what
it builds on: a fresh interpreter that imports the harness, takes the same process settings
(``go_offline``: the environment and the collector's thresholds) and deploys the same assembly on
moto (``embedded_stage``), timed to its first line after the deploy. Both median of ``runs``.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TARGET_SECONDS = 30.0
_BASELINE = (
    "import sys\n"
    "from pathlib import Path\n"
    "from embedded.offline import go_offline\n"
    "go_offline()\n"
    "from embedded import embedded_stage\n"
    "with embedded_stage(Path(sys.argv[1])):\n"
    "    print('deployed', flush=True)\n"
)


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION": "1",
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
    }


def _seconds_to_line(command: Sequence[str], marker: str, *, interrupt: bool, timeout: float = 120) -> float:
    """Wall seconds from spawning ``command`` to its first output line starting with ``marker``."""
    start = time.perf_counter()
    process = subprocess.Popen(  # noqa: S603 - our own modules
        list(command), cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert process.stdout is not None
    try:
        for line in process.stdout:
            if line.startswith(marker):
                elapsed = time.perf_counter() - start
                if interrupt:
                    process.send_signal(signal.SIGINT)
                process.communicate(timeout=timeout)
                return elapsed
            if time.perf_counter() - start > timeout:
                break
        raise RuntimeError(f"{' '.join(command)} never printed {marker!r} (exit {process.poll()})")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def assembly_in(cdk_out: Path | None) -> Path:
    """The dev stage's assembly under ``cdk_out`` (or ``make synth``'s), synthesized here when there is none."""
    for root in (cdk_out, ROOT / "cdk.out"):
        if root is not None and (root / "assembly-MangaAssist-dev" / "manifest.json").exists():
            return root / "assembly-MangaAssist-dev"
    from embedded.synth import stage_config, synthesize

    return synthesize(stage_config("dev"), nag=False)["dev"].assembly_dir


def run(runs: int = 3, cdk_out: Path | None = None) -> list[dict[str, Any]]:
    """The startup row: ``make local``'s median against the embedded stage's, each over ``runs`` runs."""
    assembly = assembly_in(cdk_out)
    local = [
        _seconds_to_line(
            [sys.executable, "-m", "local", "--rest-port", "0", "--ws-port", "0", "--assembly", str(assembly)],
            "serving after",
            interrupt=True,
        )
        for _ in range(runs)
    ]
    alone = [
        _seconds_to_line([sys.executable, "-c", _BASELINE, str(assembly)], "deployed", interrupt=False)
        for _ in range(runs)
    ]
    ours, baseline = statistics.median(local), statistics.median(alone)
    return [
        {
            "what": "make local startup (spawn to serving, demo users created)",
            "this": f"{ours:.1f} s",
            "baseline": f"{baseline:.1f} s (the embedded dev stage alone: import and deploy on moto)",
            "target": f"< {TARGET_SECONDS:.0f} s",
            "met": ours < TARGET_SECONDS,
            "runs": runs,
        }
    ]


if __name__ == "__main__":
    for row in run(int(sys.argv[1]) if len(sys.argv) > 1 else 3):
        print(row)
