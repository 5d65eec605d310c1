"""The stage the end-to-end tests run: the story's stage, synthesized once per test run."""

from __future__ import annotations

import pytest

from embedded.synth import StageAssembly
from local.story.stage import story_stage


@pytest.fixture(scope="session")
def synthesized() -> StageAssembly:
    return story_stage()
