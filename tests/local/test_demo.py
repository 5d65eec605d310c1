"""``make demo``'s process environment: the story it narrates must find what the functions emit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_demo_keeps_the_functions_metrics_on_for_the_story_that_reads_them() -> None:
    # The story's handoff-metrics step reads the functions' EMF lines; an offline run that turned
    # Powertools Metrics off would leave it waiting for lines that are never printed.
    probe = (
        "import local.demo\n"
        "from aws_lambda_powertools.metrics.functions import is_metrics_disabled\n"
        "import os\n"
        "print(is_metrics_disabled(), os.environ['AWS_LAMBDA_LOG_LEVEL'])\n"
    )
    done = subprocess.run(  # noqa: S603 - this interpreter, a fixed probe
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.split() == ["False", "ERROR"], done.stdout + done.stderr
