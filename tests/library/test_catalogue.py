"""constructs_lib/README.md: every exported construct has a section, and every example runs, synthesizes and lints.

The prelude's app turns CDK's built-in template validation findings into errors, so an example
whose template CloudFormation would refuse fails its synthesis; cfn-lint then checks every
template the example produced (a FIFO queue with a standard dead-letter queue fails both: E3502).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import constructs_lib
from tests.support.cfn_lint import findings as cfn_lint_findings

README = Path(constructs_lib.__file__).with_name("README.md")
_BLOCK = re.compile(r"^### (\w+)\n(?:.*?\n)*?```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
_PRELUDE = re.compile(r"^```python prelude\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _examples() -> dict[str, str]:
    return dict(_BLOCK.findall(README.read_text()))


def test_every_exported_construct_has_a_section_with_an_example() -> None:
    examples = _examples()

    missing = sorted(set(constructs_lib.__all__) - set(examples))
    assert not missing, f"constructs_lib/README.md has no '### <name>' section with an example for {missing}"
    unknown = sorted(set(examples) - set(constructs_lib.__all__))
    assert not unknown, f"README sections for names constructs_lib does not export: {unknown}"


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(_examples()))
def test_the_example_runs_and_synthesizes(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the prelude (an app, a stack, a key, a function) in a fresh directory
    monkeypatch.chdir(tmp_path)
    match = _PRELUDE.search(README.read_text())
    assert match is not None, "README has no ```python prelude block"
    namespace: dict[str, object] = {}
    exec(compile(match.group(1), "README prelude", "exec"), namespace)  # noqa: S102 - the README's own code

    # When the example runs and the app synthesizes (template validation findings fail it)
    exec(compile(_examples()[name], f"README example {name}", "exec"), namespace)  # noqa: S102
    assembly = namespace["app"].synth()  # type: ignore[attr-defined]

    # Then cfn-lint finds nothing in any template of it
    templates = sorted(Path(assembly.directory).glob("*.template.json"))
    assert templates
    findings = cfn_lint_findings(templates)
    assert findings == [], "\n".join(findings)


def test_the_lint_finds_what_cloudformation_would_refuse(tmp_path: Path) -> None:
    # Given a FIFO queue whose dead-letter queue is a standard one, and a template that passes
    fifo = {"Type": "AWS::SQS::Queue", "Properties": {"FifoQueue": True}}
    fifo["Properties"]["RedrivePolicy"] = {"deadLetterTargetArn": {"Fn::GetAtt": ["Dlq", "Arn"]}, "maxReceiveCount": 3}
    refused, passing = tmp_path / "refused.template.json", tmp_path / "passing.template.json"
    refused.write_text(json.dumps({"Resources": {"Queue": fifo, "Dlq": {"Type": "AWS::SQS::Queue"}}}))
    passing.write_text(json.dumps({"Resources": {"Dlq": {"Type": "AWS::SQS::Queue"}}}))

    # When both are linted, together and twice (the rules are loaded once and serve every call)
    first, second = cfn_lint_findings([refused, passing]), cfn_lint_findings([passing, refused])

    # Then the refused one is named by the rule CloudFormation would refuse it by, each time
    assert [finding.split("]")[0] for finding in first] == ["[E3502: Validate SQS DLQ queues are the same type"]
    assert first == second
    assert "refused.template.json" in first[0]
