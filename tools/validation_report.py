"""Fail when a synth's policy validation report (cdk-nag) holds a finding.

The CDK CLI writes the plugins' failures to ``<outdir>/validation-report.json`` but still exits 0,
so `make cfn-lint` calls this after its synth: ``python -m tools.validation_report cdk.out.all``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def findings(outdir: Path) -> list[str]:
    """``<rule> <construct path>`` for every violation in the report (none when there is no report)."""
    report = outdir / "validation-report.json"
    if not report.exists():
        return []
    data = json.loads(report.read_text())
    return [
        f"{violation['ruleName']} {construct['constructPath']}"
        for plugin in data.get("pluginReports", [])
        if plugin.get("conclusion") != "success"
        for violation in plugin.get("violations", [])
        for construct in violation.get("violatingConstructs", [])
    ]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tools.validation_report <cdk outdir>", file=sys.stderr)
        return 2
    found = findings(Path(argv[0]))
    for line in found:
        print(f"cdk-nag: {line}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
