"""``stage_app``: the App every in-process synthesis of the stages builds, made as ``app.py`` makes it.

CDK's built-in CloudFormation Validate stays off there (cfn-lint checks the same schemas in
`make cfn-lint`), so the stage a test, a tool or a test's local server synthesizes is what ``cdk synth`` writes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aws_cdk import App, CfnResource, Stack

from embedded.synth import cdk_context
from stacks.stage import stage_app

#: A property the SQS queue's resource schema does not have: CloudFormation Validate's F3002.
_UNKNOWN = {"NoSuchProperty": "x"}


def _synthesized(app: App) -> Path:
    CfnResource(Stack(app, "Probe"), "Queue", type="AWS::SQS::Queue", properties=_UNKNOWN)
    return Path(app.synth().directory)


def test_stage_app_synthesizes_without_cdks_template_validation(tmp_path: Path) -> None:
    # Given a template that CDK's built-in validation refuses under cdk.json's flags (CDK's default App)
    with pytest.raises(RuntimeError, match="F3002"):
        _synthesized(App(context=cdk_context(), outdir=str(tmp_path / "default")))

    # When the stages' App synthesizes it
    out = _synthesized(stage_app(context=cdk_context(), outdir=str(tmp_path / "stage")))

    # Then nothing validated it: no report, and the template is written as it was built
    assert not (out / "validation-report.json").exists()
    template = json.loads((out / "Probe.template.json").read_text())
    assert template["Resources"]["Queue"]["Properties"] == _UNKNOWN


def test_stage_app_keeps_the_context_and_the_output_directory_it_is_given(tmp_path: Path) -> None:
    app = stage_app(context={"stage": "prod"}, outdir=str(tmp_path))

    assert app.node.try_get_context("stage") == "prod"
    assert Path(app.outdir) == tmp_path
