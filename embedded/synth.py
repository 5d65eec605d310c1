"""Synthesize stages the way `cdk synth` does, once per test run, and hand out templates.

A synthesis takes tens of seconds of jsii: :func:`shared_stage` makes one per configuration and
test run (``embedded.once_per_run``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aws_cdk.assertions import Template

from embedded.once_per_run import made_once, scratch_directory
from stacks.config import StageConfig
from stacks.project import cdk_json_context
from stacks.project import stage_config as stage_config
from stacks.stage import MangaAssistStage, stage_app

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("Storage", "Events", "Orchestration", "Api")


def cdk_context() -> dict[str, Any]:
    """The context `cdk synth` passes: cdk.json's, plus version reporting as the CLI enables it."""
    return {**cdk_json_context(), "aws:cdk:version-reporting": True}


@dataclass(frozen=True)
class StageAssembly:
    """One stage's nested cloud assembly, which ``embedded_stage`` deploys."""

    assembly_dir: Path


@dataclass(frozen=True)
class SynthesizedStage(StageAssembly):
    """The four templates of one stage, keyed by part name (Storage, Events, ...), and the stage itself."""

    stage: MangaAssistStage
    templates: dict[str, dict[str, Any]]

    def template(self, part: str) -> Template:
        return Template.from_json(self.templates[part])


def synthesize(*configs: StageConfig, nag: bool = False, outdir: Path | None = None) -> dict[str, SynthesizedStage]:
    """Build the given stages in one App, synthesize once, return their templates by stage name.

    Without ``outdir``, the assembly goes to a temporary directory removed when the process exits.
    """
    outdir = outdir or scratch_directory("cdkout-")
    app = stage_app(context=cdk_context(), outdir=str(outdir))
    stages = [MangaAssistStage(app, config, nag=nag) for config in configs]
    app.synth()
    result = {}
    for stage in stages:
        assembly = stage.synth()
        templates = {
            part: assembly.get_stack_artifact(getattr(stage, part.lower()).artifact_id).template for part in PARTS
        }
        result[stage.config.name] = SynthesizedStage(Path(assembly.directory), stage, templates)
    return result


def shared_stage(config: StageConfig, *, nag: bool = False) -> StageAssembly:
    """``config``'s stage synthesized once per test run (see :func:`made_once`): its cloud assembly alone."""

    def make(directory: Path) -> None:
        stage = synthesize(config, nag=nag, outdir=directory)[config.name]
        (directory / _NESTED).write_text(str(stage.assembly_dir.relative_to(directory)))

    directory = made_once(f"stage {config!r} nag={nag}", make)
    return StageAssembly(directory / (directory / _NESTED).read_text())


#: Where :func:`shared_stage` notes the stage's nested assembly, beside the App's.
_NESTED = "nested-assembly.txt"


@functools.cache
def default_stages() -> dict[str, SynthesizedStage]:
    """dev and prod from cdk.json, synthesized once per test process."""
    return synthesize(stage_config("dev"), stage_config("prod"))
