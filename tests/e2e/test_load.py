"""Load on the embedded stage, bounded in count and time: see ``local/load/run.py``.

Select it with ``-m load``; size it with ``LOAD_SESSIONS`` and ``LOAD_MESSAGES`` (defaults 50 and
20). The figures are printed (``-s``), never asserted.
"""

from __future__ import annotations

import os

import pytest

from embedded import embedded_stage
from embedded.synth import SynthesizedStage
from local.load.run import DEFAULT_MESSAGES, DEFAULT_SESSIONS, run_load

pytestmark = [pytest.mark.slow, pytest.mark.load]


def test_concurrent_sessions_lose_and_repeat_nothing(synthesized: SynthesizedStage) -> None:
    sessions = int(os.environ.get("LOAD_SESSIONS", DEFAULT_SESSIONS))
    messages = int(os.environ.get("LOAD_MESSAGES", DEFAULT_MESSAGES))
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
