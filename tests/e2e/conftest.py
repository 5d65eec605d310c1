"""The stage the end-to-end tests run: the story's stage, synthesized once per process."""

from __future__ import annotations

import pytest

from embedded.synth import SynthesizedStage
from local.story.stage import story_stage


@pytest.fixture(scope="session")
def synthesized() -> SynthesizedStage:
    return story_stage()
