"""The stage the end-to-end tests run: synthesized once per process with fast timeouts."""

from __future__ import annotations

import functools

import pytest

from stacks.config import StageConfig, with_overrides
from tests.support.synth import SynthesizedStage, stage_config, synthesize

#: The model the e2e stage names: its functions really call Bedrock Converse, which the harness
#: answers at the client (``tests.e2e.harness.bedrock``; moto has no Converse).
E2E_MODEL_ID = "anthropic.claude-3-haiku-20240307-v1:0"


def e2e_config() -> StageConfig:
    """dev with waits of seconds and a Bedrock model (stubbed at the client by the harness).

    An assigned agent goes idle after 20 s: on a loaded machine the steps between an agent's
    accept and reply have taken more than 10 s, and an execution whose handoff was closed after
    the first reply ends at its next idle check, which the story waits for.
    """
    return with_overrides(
        stage_config("dev"),
        handoff_agent_wait_seconds=10,
        handoff_manager_wait_seconds=10,
        handoff_idle_seconds=20,
        export_poll_seconds=1,
        export_max_polls=5,
        bedrock_model_id=E2E_MODEL_ID,
        authorizer_cache_seconds=0,
    )


@functools.cache
def e2e_stage() -> SynthesizedStage:
    """The e2e stage, synthesized once per process (without cdk-nag: the template is the same)."""
    return synthesize(e2e_config(), nag=False)[e2e_config().name]


@pytest.fixture(scope="session")
def synthesized() -> SynthesizedStage:
    return e2e_stage()
