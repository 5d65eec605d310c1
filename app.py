#!/usr/bin/env python3
"""MangaAssist CDK app: one stage per selected environment (`-c stage=dev`, `-c stage=dev,prod`)."""

from __future__ import annotations

import sys

from aws_cdk import App

from stacks.config import ConfigError, load_stage_config
from stacks.pipeline import DeliveryStage, load_pipeline_config
from stacks.stage import MangaAssistStage, stage_app


def build(app: App) -> list[MangaAssistStage]:
    """Create the selected stages in `app` from its `stages` and `stage` context."""
    selected = str(app.node.try_get_context("stage") or "dev")
    names = [n.strip() for n in selected.split(",") if n.strip()]
    if not names:
        raise ConfigError("-c stage=<name>[,<name>...] selected no stage")
    stages = app.node.try_get_context("stages")
    return [MangaAssistStage(app, load_stage_config(stages, name)) for name in names]


#: ``-c with_pipeline=true`` adds the delivery stage (the pipeline and the dev account's roles, see
#: docs/delivery.md) to the selected stages, which must include the two it promotes.
WITH_PIPELINE = "with_pipeline"


def build_delivery(app: App, stages: list[MangaAssistStage]) -> DeliveryStage | None:
    """The delivery stage from cdk.json's ``pipeline`` context, when ``-c with_pipeline=true`` asks for it."""
    if str(app.node.try_get_context(WITH_PIPELINE) or "false").lower() not in ("true", "1"):
        return None
    defined = app.node.try_get_context("stages") or {}
    every_stage = {name: load_stage_config(defined, name) for name in defined}
    config = load_pipeline_config(app.node.try_get_context("pipeline"), every_stage)
    return DeliveryStage(app, config, stages=stages)


def main() -> None:
    app = stage_app()
    try:
        build_delivery(app, build(app))
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    app.synth()


if __name__ == "__main__":
    main()
