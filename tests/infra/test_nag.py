"""cdk-nag (AwsSolutions, 3.x Validations API): synth fails on any unacknowledged finding."""

from __future__ import annotations

from pathlib import Path

import pytest
from aws_cdk import App, Stack, Stage, Validations
from aws_cdk import aws_sqs as sqs
from cdk_nag import AwsSolutionsChecks

from constructs_lib import SharedFunction

PROBE = Path(__file__).resolve().parents[1] / "fixtures" / "probe_pkg"


def _nagged_stack(tmp_path: Path) -> tuple[App, Stack]:
    app = App(outdir=str(tmp_path))
    stage = Stage(app, "NagProbe")
    Validations.of(stage).add_plugins(AwsSolutionsChecks(stage))
    return app, Stack(stage, "Probe")


def test_fails_synth_on_an_unacknowledged_finding(tmp_path: Path) -> None:
    # Given a queue with neither a DLQ nor an SSL-only policy
    app, stack = _nagged_stack(tmp_path)
    sqs.Queue(stack, "Naked")
    # When / Then synthesis stops and names the rules
    with pytest.raises(RuntimeError, match=r"(?s)AwsSolutions-SQS3.*AwsSolutions-SQS4"):
        app.synth()


def test_shared_function_is_nag_clean(tmp_path: Path) -> None:
    # Given a function built by the factory, with its one scoped X-Ray acknowledgement
    app, stack = _nagged_stack(tmp_path)
    SharedFunction(stack, "Fn", code_root=PROBE, handler="probe_pkg.handler.handler")
    # When / Then synthesis passes every AwsSolutions rule
    app.synth()
