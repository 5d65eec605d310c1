"""checkov-skips.yaml names resources that exist, so a rename shows in `make unit`, before checkov runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from embedded.synth import PARTS, ROOT, SynthesizedStage
from stacks.pipeline import DELIVERY_STAGE
from tests.support import delivery
from tools.checkov_gate import StackTemplate, load_skips


def test_every_skipped_resource_exists_in_its_stage_and_stack(dev: SynthesizedStage, prod: SynthesizedStage) -> None:
    # Given the stages as `make synth-all` builds them, the delivery stage among them
    templates: dict[str, dict[str, dict[str, Any]]] = {
        "dev": dev.templates,
        "prod": prod.templates,
        DELIVERY_STAGE: delivery.default_delivery().templates,
    }
    scanned = [
        StackTemplate(stage, part, Path(f"{stage}-{part}.template.json"))
        for stage, parts in (("dev", PARTS), ("prod", PARTS), (DELIVERY_STAGE, delivery.PARTS))
        for part in parts
    ]

    # When the skip file is read (it is well-formed, or this raises naming each problem)
    skips = load_skips(ROOT / "checkov-skips.yaml", scanned)

    # Then every (stage, stack, logical id) it lists is a resource of that template
    missing = [
        str(key)
        for skip in skips
        for key in skip.covered()
        if key.logical_id not in templates[key.stage][key.stack]["Resources"]
    ]
    assert not missing, f"checkov-skips.yaml lists resources the templates do not have: {missing}"
