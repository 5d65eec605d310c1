"""tools.validation_report: `make cfn-lint` fails on a cdk-nag finding the CLI let through."""

from __future__ import annotations

import json
from pathlib import Path

from tools.validation_report import findings, main


def _report(outdir: Path, conclusion: str) -> None:
    violation = {
        "ruleName": "AwsSolutions-IAM5[Action::kms:GenerateDataKey*]",
        "violatingConstructs": [{"constructPath": "App/Stack/Fn/ServiceRole/DefaultPolicy/Resource"}],
    }
    plugin = {"pluginName": "AwsSolutions", "conclusion": conclusion, "violations": [violation]}
    (outdir / "validation-report.json").write_text(json.dumps({"pluginReports": [plugin]}))


def test_a_failing_report_names_each_finding_and_fails(tmp_path: Path) -> None:
    _report(tmp_path, "failure")

    assert findings(tmp_path) == [
        "AwsSolutions-IAM5[Action::kms:GenerateDataKey*] App/Stack/Fn/ServiceRole/DefaultPolicy/Resource"
    ]
    assert main([str(tmp_path)]) == 1


def test_no_report_or_a_successful_one_passes(tmp_path: Path) -> None:
    assert main([str(tmp_path)]) == 0
    _report(tmp_path, "success")
    assert main([str(tmp_path)]) == 0
