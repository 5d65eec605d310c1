"""Load on the embedded stage, bounded in count and time: see ``local/load/run.py``.

Select it with ``-m load``; size it with ``LOAD_SESSIONS`` and ``LOAD_MESSAGES``. In the suite it runs
20 sessions of 10 messages (two of them handed to an agent, eight threads at once): the races it
guards need concurrency, not volume, and the full 50 x 20 run took 18 minutes of a loaded CI
machine's suite. ``make load`` runs the full size. The figures are printed (``-s``), never asserted.
"""

from __future__ import annotations

import os

import pytest

from embedded import embedded_stage
from embedded.synth import StageAssembly
from local.load.run import run_load

pytestmark = [pytest.mark.slow, pytest.mark.load]

SUITE_SESSIONS = 20
SUITE_MESSAGES = 10


def test_concurrent_sessions_lose_and_repeat_nothing(synthesized: StageAssembly) -> None:
    sessions = int(os.environ.get("LOAD_SESSIONS", SUITE_SESSIONS))
    messages = int(os.environ.get("LOAD_MESSAGES", SUITE_MESSAGES))
    # Given the stage deployed on a fresh account
    with embedded_stage(synthesized.assembly_dir) as stage:
        # When the sessions chat at once, every 10th handed to an agent halfway
        report = run_load(stage, sessions=sessions, messages=messages)
    for line in report.lines():
        print(line)
    # Then every turn is stored once with exact numbers, each summary is written once and every
    # status change reached the bus's targets once
    assert report.messages == sessions * messages
    assert report.problems == []
