"""Count the findings of cdk-nag's NIST 800-53 rev 5, HIPAA Security and PCI DSS 3.2.1 packs over one stage.

These packs are not part of the build (AwsSolutions is, see stacks/stage.py): this synthesizes the
stage once in a throwaway directory with the three packs as validation plugins and prints, per
pack, the number of findings and their rules, so a change to the stage's posture can be measured:
``python -m tools.compliance_counts prod``.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from aws_cdk import Validations
from cdk_nag import HIPAASecurityChecks, NIST80053R5Checks, PCIDSS321Checks

from embedded.synth import cdk_context, stage_config
from stacks.stage import MangaAssistStage, stage_app


def count(report: dict[str, Any]) -> dict[str, Counter[str]]:
    """Findings by pack and rule: one per violating construct of each violated rule."""
    result: dict[str, Counter[str]] = {}
    for plugin in report.get("pluginReports", []):
        rules: Counter[str] = Counter()
        for violation in plugin.get("violations", []):
            rules[violation["ruleName"]] += len(violation.get("violatingConstructs", []))
        result[plugin.get("pluginName", "?")] = rules
    return result


def synth_report(stage: str) -> dict[str, Any]:
    """The validation report of one synth of ``stage`` with the three packs."""
    with tempfile.TemporaryDirectory(prefix="cdkout-compliance-") as scratch:
        outdir = Path(scratch)
        app = stage_app(context=cdk_context(), outdir=str(outdir))
        built = MangaAssistStage(app, stage_config(stage), nag=False)
        scope = built
        Validations.of(built).add_plugins(NIST80053R5Checks(scope), HIPAASecurityChecks(scope), PCIDSS321Checks(scope))
        try:
            app.synth()
        except Exception as error:  # the CDK raises when a plugin fails; the report is written first
            print(f"synth reported: {type(error).__name__}", file=sys.stderr)
        report = outdir / "validation-report.json"
        return json.loads(report.read_text()) if report.exists() else {}


def main(argv: list[str]) -> int:
    stage = argv[0] if argv else "prod"
    for pack, rules in count(synth_report(stage)).items():
        print(f"{pack}: {sum(rules.values())} findings")
        for rule, n in sorted(rules.items()):
            print(f"  {rule}: {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
