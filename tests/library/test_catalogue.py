"""constructs_lib/README.md: every exported construct has a section, and every example runs and synthesizes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import constructs_lib

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

    # When the example runs and the app synthesizes
    exec(compile(_examples()[name], f"README example {name}", "exec"), namespace)  # noqa: S102
    namespace["app"].synth()  # type: ignore[attr-defined]
