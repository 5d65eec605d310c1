"""The delivery stage as ``make synth-all`` builds it, synthesized once per test process.

It is built on the App of ``default_stages()`` (the stages it promotes are those very objects, so
the pipeline reads their assemblies instead of synthesizing dev and prod again) with cdk-nag on.
The App runs its stages' validation plugins only when it is synthesized from its root, so the App
is synthesized again; cdk-nag's findings then fail the synthesis as they fail ``make cfn-lint``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aws_cdk import App
from aws_cdk.assertions import Template

from embedded.synth import cdk_context, default_stages
from stacks.pipeline import DeliveryStage, PipelineConfig, load_pipeline_config

PARTS = ("Access", "Pipeline")


@dataclass(frozen=True)
class SynthesizedDelivery:
    stage: DeliveryStage
    config: PipelineConfig
    templates: dict[str, dict[str, Any]]
    #: The App's cloud assembly: the asset step's buildspec is a file there, not in the template.
    outdir: Path

    def template(self, part: str) -> Template:
        return Template.from_json(self.templates[part])


def pipeline_config() -> PipelineConfig:
    """cdk.json's ``pipeline`` block, validated against its stages."""
    stages = default_stages()
    return load_pipeline_config(cdk_context()["pipeline"], {name: s.stage.config for name, s in stages.items()})


def default_delivery() -> SynthesizedDelivery:
    """The delivery stage from cdk.json; raises the same error on every call when it cannot be built."""
    built = _build()
    if isinstance(built, Exception):
        raise built
    return built


@functools.cache
def _build() -> SynthesizedDelivery | Exception:
    stages = default_stages()
    app = stages["dev"].stage.node.root
    assert isinstance(app, App)
    try:
        config = pipeline_config()
        delivery = DeliveryStage(app, config, stages=[stages["dev"].stage, stages["prod"].stage], nag=True)
        app.synth(force=True)
    except Exception as error:  # jsii raises RuntimeError carrying cdk-nag's report
        return error
    assembly = delivery.synth()
    stacks = {"Access": delivery.access, "Pipeline": delivery.pipeline}
    templates = {part: assembly.get_stack_artifact(stacks[part].artifact_id).template for part in PARTS}
    return SynthesizedDelivery(delivery, config, templates, Path(app.outdir))
