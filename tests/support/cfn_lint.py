"""cfn-lint in-process, with its rules loaded once per process.

``cfnlint.api.lint_file`` builds a runner for each file, and a runner imports and instantiates
every rule cfn-lint has: about 1.5 s, longer than linting a stage's template. The CLI runs one rule
set over every template it is given, and whether a rule applies is decided per run from that run's
configuration, so one set serves every call here.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from pathlib import Path

import yaml
from cfnlint.config import ConfigMixIn
from cfnlint.rules import Rules
from cfnlint.runner import Runner
from cfnlint.runner.template.runner import run_template_by_file_paths

#: The app's cfn-lint configuration, which make cfn-lint reads.
CONFIG_FILE = Path(__file__).resolve().parents[2] / ".cfnlintrc"


@cache
def _ignored() -> tuple[str, ...]:
    """The checks the app's ``.cfnlintrc`` ignores (each with its reason there), as ``make cfn-lint`` does."""
    return tuple(yaml.safe_load(CONFIG_FILE.read_text())["ignore_checks"])


@cache
def _rules() -> Rules:
    return Runner(ConfigMixIn([])).rules


def findings(templates: Iterable[Path]) -> list[str]:
    """cfn-lint's findings over ``templates``, each as cfn-lint prints it; none when they pass."""
    paths = [str(path) for path in templates]
    if not paths:
        raise ValueError("no template to lint")
    config = ConfigMixIn(["--template", *paths], ignore_checks=list(_ignored()))
    return [str(match) for match in run_template_by_file_paths(config, _rules())]
