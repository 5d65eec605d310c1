"""cdk-nag (AwsSolutions) over dev and prod: no stack of either stage has an unacknowledged finding.

One synthesis of both stages with the checks on (the shared fixtures synthesize without them).
The CLI's synth writes a failing validation report but still exits 0, so this test, and the
report check in `make cfn-lint`, are what hold the app to cdk-nag.
"""

from __future__ import annotations

import re

import pytest

from embedded.synth import stage_config, synthesize

_FINDING = re.compile(r"MangaAssist-\w+/")


@pytest.mark.slow
def test_every_stack_passes_cdk_nag_in_dev_and_prod() -> None:
    try:
        stages = synthesize(stage_config("dev"), stage_config("prod"), nag=True)
    except Exception as error:  # jsii raises RuntimeError carrying the validation report
        report = str(error)
        if "alidation" not in report:
            raise
        findings = [line.strip() for line in report.splitlines() if _FINDING.search(line)]
        assert findings, report  # a validation failure that names no construct is a failure too
        pytest.fail("cdk-nag findings:\n" + "\n".join(findings))
    assert set(stages) == {"dev", "prod"}
