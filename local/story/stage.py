"""The stage the story, ``make demo`` and the load run stand up: dev with waits of seconds."""

from __future__ import annotations

import functools

from embedded.synth import SynthesizedStage, stage_config, synthesize
from stacks.config import StageConfig, with_overrides

#: The model the story's stage names: its functions really call Bedrock Converse, which the
#: embedded stage answers at the client (``embedded.services.bedrock``; moto has no Converse).
STORY_MODEL_ID = "global.anthropic.claude-haiku-4-5-20251001-v1:0"


def story_config() -> StageConfig:
    """dev with waits of seconds and a Bedrock model (stubbed at the client by the embedded stage).

    An assigned agent goes idle after 20 s: on a loaded machine the steps between an agent's
    accept and reply have taken more than 10 s, and an execution whose handoff was closed after
    the first reply ends at its next idle check, which the story waits for.

    API Gateway's throttles are sized above what the scripted runs send (the story's burst of 30
    messages, the load run's customers on 8 threads), so the story proves the application's own
    limits; dev's gateway throttles themselves are proven by ``tests/e2e/test_throttles.py``.
    """
    return with_overrides(
        stage_config("dev"),
        handoff_agent_wait_seconds=10,
        handoff_manager_wait_seconds=10,
        handoff_idle_seconds=20,
        export_poll_seconds=1,
        export_max_polls=5,
        bedrock_model_id=STORY_MODEL_ID,
        authorizer_cache_seconds=0,
        api_throttle_rate=200,
        api_throttle_burst=400,
        ws_connect_throttle_rate=100,
        ws_connect_throttle_burst=200,
        ws_message_throttle_rate=200,
        ws_message_throttle_burst=400,
    )


@functools.cache
def story_stage() -> SynthesizedStage:
    """The story's stage, synthesized once per process (without cdk-nag: the template is the same)."""
    return synthesize(story_config(), nag=False)[story_config().name]
