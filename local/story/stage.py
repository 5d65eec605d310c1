"""The stage the story, ``make demo`` and the load run stand up: dev with waits of seconds."""

from __future__ import annotations

import dataclasses
import functools

from embedded.synth import StageAssembly, shared_stage, stage_config
from stacks.config import StageConfig, with_overrides

#: The model the story's stage names: its functions really call Bedrock Converse, which the
#: embedded stage answers at the client (``embedded.services.bedrock``; moto has no Converse).
STORY_MODEL_ID = "global.anthropic.claude-haiku-4-5-20251001-v1:0"


def story_config() -> StageConfig:
    """dev, with a Bedrock model (stubbed at the client by the embedded stage) and no authorizer cache.

    The workflows keep dev's own waits (an agent's 300 s, a manager's 900 s, the 120 s idle limit):
    the story runs with the stage's clock frozen and moves it where it wants a timer to fire, so no
    timer fires because the machine is slow and none waits on it in real time.

    API Gateway's throttles are sized above what the scripted runs send (the story's burst of 30
    messages, the load run's customers on 8 threads), so the story proves the application's own
    limits; dev's gateway throttles themselves are proven by ``tests/e2e/test_throttles.py``.
    """
    return with_overrides(
        stage_config("dev"),
        bedrock_model_id=STORY_MODEL_ID,
        authorizer_cache_seconds=0,
        # A target whose derived throttles admit 200 messages, 105 connects and 600 REST calls a second.
        capacity=dataclasses.replace(stage_config("dev").capacity, concurrent_chats=4000, connects_per_second=70),
        # The clock stands still through a run, so the model-call cap never refills: size it above every run's calls.
        model_resilience=dataclasses.replace(stage_config("dev").model_resilience, model_calls_per_second=500),
    )


@functools.cache
def story_stage() -> StageAssembly:
    """The story's stage, synthesized once per process, or per test run (without cdk-nag: the template is the same)."""
    return shared_stage(story_config(), nag=False)
