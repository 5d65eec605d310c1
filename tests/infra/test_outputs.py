"""The stage's outputs: every documented name is in the stack that holds it, with its description."""

from __future__ import annotations

import re
from pathlib import Path

from embedded.synth import ROOT, SynthesizedStage
from stacks.outputs import OUTPUTS


def _named_outputs(stage: SynthesizedStage, part: str) -> dict[str, dict[str, object]]:
    return {
        name: output
        for name, output in stage.templates[part].get("Outputs", {}).items()
        if not name.startswith(("PublishOutput", "ExportsOutput", "RestApiEndpoint"))
    }


def test_each_stack_has_exactly_its_documented_outputs(any_stage: SynthesizedStage) -> None:
    for part in ("Storage", "Events", "Orchestration", "Api"):
        expected = {name for name, output in OUTPUTS.items() if output.part == part}
        outputs = _named_outputs(any_stage, part)
        assert set(outputs) == expected, part
        for name in expected:
            assert outputs[name]["Description"] == OUTPUTS[name].description
            assert "Export" not in outputs[name], f"{name}: an export would pin the stack"


def test_the_urls_come_from_the_apis(dev: SynthesizedStage) -> None:
    api = _named_outputs(dev, "Api")
    assert "wss://" in str(api["WebSocketUrl"]["Value"])
    assert "https://" in str(api["WebSocketCallbackUrl"]["Value"])
    assert "execute-api" in str(api["RestApiBaseUrl"]["Value"])


def test_the_deploy_guide_lists_every_output() -> None:
    guide = Path(ROOT, "docs", "deploy.md").read_text()
    listed = set(re.findall(r"^\| `(\w+)` \|", guide, flags=re.MULTILINE))
    assert set(OUTPUTS) <= listed, sorted(set(OUTPUTS) - listed)
