"""Every template is text cfn-lint and CloudFormation's YAML-compatible parser accept: no control characters."""

from __future__ import annotations

import json
import re

from embedded.synth import PARTS, SynthesizedStage

#: C0 controls but tab, newline and carriage return, and DEL (what YAML refuses in a document).
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def test_no_template_holds_a_raw_control_character(any_stage: SynthesizedStage) -> None:
    for part in PARTS:
        text = json.dumps(any_stage.templates[part], ensure_ascii=False)
        found = _CONTROL.search(text)
        assert found is None, (
            f"{part}: control character {found.group()!r} near {text[found.start() - 60 : found.start()]!r}"
        )
