"""Synthesize stages the way `cdk synth` does, once per test process, and hand out templates."""

from __future__ import annotations

import functools
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aws_cdk import App
from aws_cdk.assertions import Template

from stacks.config import StageConfig, load_stage_config
from stacks.stage import MangaAssistStage

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("Storage", "Events", "Orchestration", "Api")


def cdk_context() -> dict[str, Any]:
    """The context `cdk synth` passes: cdk.json's, plus version reporting as the CLI enables it."""
    context: dict[str, Any] = json.loads((ROOT / "cdk.json").read_text())["context"]
    return {**context, "aws:cdk:version-reporting": True}


def stage_config(name: str) -> StageConfig:
    return load_stage_config(cdk_context()["stages"], name)


@dataclass(frozen=True)
class SynthesizedStage:
    """The four templates of one stage, keyed by part name (Storage, Events, ...)."""

    stage: MangaAssistStage
    templates: dict[str, dict[str, Any]]
    assembly_dir: Path

    def template(self, part: str) -> Template:
        return Template.from_json(self.templates[part])


def synthesize(*configs: StageConfig, nag: bool = False) -> dict[str, SynthesizedStage]:
    """Build the given stages in one App, synthesize once, return their templates by stage name."""
    outdir = Path(tempfile.mkdtemp(prefix="cdkout-"))
    app = App(context=cdk_context(), outdir=str(outdir))
    stages = [MangaAssistStage(app, config, nag=nag) for config in configs]
    app.synth()
    result = {}
    for stage in stages:
        assembly = stage.synth()
        templates = {
            part: assembly.get_stack_artifact(getattr(stage, part.lower()).artifact_id).template for part in PARTS
        }
        result[stage.config.name] = SynthesizedStage(stage, templates, Path(assembly.directory))
    return result


@functools.cache
def default_stages() -> dict[str, SynthesizedStage]:
    """dev and prod from cdk.json, synthesized once per test process."""
    return synthesize(stage_config("dev"), stage_config("prod"))
