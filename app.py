#!/usr/bin/env python3
"""MangaAssist CDK app: one stage per selected environment (`-c stage=dev`, `-c stage=dev,prod`)."""

from __future__ import annotations

import sys

from aws_cdk import App

from stacks.config import ConfigError, load_stage_config
from stacks.stage import MangaAssistStage

#: CDK's built-in "CloudFormation Validate" plugin checks each template against the resource
#: schemas. cfn-lint checks the same schemas (and more) over every template of both stages in
#: `make cfn-lint`, at zero findings; the built-in engine adds about 5 s of CPU to every synth
#: of one stage (2-3 s to start, 2-3 s to check the four templates), half of the app's own
#: synth cost. cdk-nag stays on in every synth (stacks/stage.py).
BUILTIN_CLOUDFORMATION_VALIDATION = False


def build(app: App) -> list[MangaAssistStage]:
    """Create the selected stages in `app` from its `stages` and `stage` context."""
    selected = str(app.node.try_get_context("stage") or "dev")
    names = [n.strip() for n in selected.split(",") if n.strip()]
    if not names:
        raise ConfigError("-c stage=<name>[,<name>...] selected no stage")
    stages = app.node.try_get_context("stages")
    return [MangaAssistStage(app, load_stage_config(stages, name)) for name in names]


def main() -> None:
    app = App(builtin_cloud_formation_validation=BUILTIN_CLOUDFORMATION_VALIDATION)
    try:
        build(app)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    app.synth()


if __name__ == "__main__":
    main()
