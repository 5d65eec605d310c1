"""The whole story on the synthesized stage, stood up on moto."""

from __future__ import annotations

import pytest

from embedded import embedded_stage
from embedded.synth import SynthesizedStage
from local.story import STEPS, Step, run_story
from local.story.stage import story_config
from tests.support.identity import refusal

pytestmark = pytest.mark.slow


def test_story_runs_end_to_end_on_the_synthesized_stage(synthesized: SynthesizedStage) -> None:
    # Given the synthesized stage deployed on a fresh moto account
    done: list[Step] = []
    with embedded_stage(synthesized.assembly_dir) as stage:
        # When the story runs (each step asserts its own outcome: see the step modules of local/story/)
        run_story(stage, story_config(), done.append)
        # Then every step ran, and nothing the harness emulates was left unconsumed
        assert len(done) == len(STEPS)
        assert stage.streams.pending() == 0
        assert stage.rest.invalid_requests == []
        assert [(c.handler, repr(c.error)) for c in stage.calls.calls if c.error is not None and not refusal(c)] == []
        # And every Bedrock call (answered by the client stub) named the stage's model
        assert stage.bedrock.calls
        assert {c.model_id for c in stage.bedrock.calls} == {story_config().bedrock_model_id}
