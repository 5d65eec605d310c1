"""The whole story on the synthesized stage, stood up on moto."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import e2e_config
from tests.e2e.harness import embedded_stage
from tests.e2e.story import STEPS, Step, run_story
from tests.support.synth import SynthesizedStage

pytestmark = pytest.mark.slow


def test_story_runs_end_to_end_on_the_synthesized_stage(synthesized: SynthesizedStage) -> None:
    # Given the synthesized stage deployed on a fresh moto account
    done: list[Step] = []
    with embedded_stage(synthesized.assembly_dir) as stage:
        # When the story runs (each step asserts its own outcome: see tests/e2e/story.py)
        run_story(stage, e2e_config(), done.append)
        # Then every step ran, and nothing the harness emulates was left unconsumed
        assert len(done) == len(STEPS)
        assert stage.streams.pending() == 0
        assert stage.rest.invalid_requests == []
        assert [(c.handler, repr(c.error)) for c in stage.calls.calls if c.error is not None] == []
        # And every Bedrock call (answered by the client stub) named the stage's model
        assert stage.bedrock.calls
        assert {c.model_id for c in stage.bedrock.calls} == {e2e_config().bedrock_model_id}
