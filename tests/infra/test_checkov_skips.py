"""checkov-skips.yaml names resources that exist, so a rename shows in `make unit`, before checkov runs."""

from __future__ import annotations

from pathlib import Path

from embedded.synth import PARTS, ROOT, SynthesizedStage
from tools.checkov_gate import StackTemplate, load_skips


def test_every_skipped_resource_exists_in_its_stage_and_stack(dev: SynthesizedStage, prod: SynthesizedStage) -> None:
    # Given the stages as `make synth-all` builds them
    stages = {"dev": dev, "prod": prod}
    templates = [StackTemplate(name, part, Path(f"{name}-{part}.template.json")) for name in stages for part in PARTS]

    # When the skip file is read (it is well-formed, or this raises naming each problem)
    skips = load_skips(ROOT / "checkov-skips.yaml", templates)

    # Then every (stage, stack, logical id) it lists is a resource of that template
    missing = [
        str(key)
        for skip in skips
        for key in skip.covered()
        if key.logical_id not in stages[key.stage].templates[key.stack]["Resources"]
    ]
    assert not missing, f"checkov-skips.yaml lists resources the templates do not have: {missing}"
