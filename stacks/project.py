"""The repository's own ``cdk.json``: its context is what ``cdk synth`` gives the app (the stages, the
delivery pipeline, CDK's feature flags).

The tools, the benchmarks and the embedded stage read it outside a CDK App (a synth in-process, a
preflight of an account, a token for a deployed pool); they read it here, so a stage's settings mean
the same everywhere and an unknown or invalid stage is refused with the app's own message.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from stacks.config import StageConfig, load_stage_config

CDK_JSON = Path(__file__).resolve().parents[1] / "cdk.json"


def cdk_json_context() -> dict[str, Any]:
    """``cdk.json``'s ``context`` block, read anew at each call (a test or a user may have changed it)."""
    context: dict[str, Any] = json.loads(CDK_JSON.read_text())["context"]
    return context


def stage_config(name: str) -> StageConfig:
    """Stage ``name`` of ``cdk.json``, validated as the app validates it (``ConfigError`` otherwise)."""
    return load_stage_config(cdk_json_context().get("stages"), name)
