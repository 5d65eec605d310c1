"""tools.mutation_report: the score of `make mutation` from mutmut's exported counts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.mutation_report import main, score


def test_timeouts_and_type_checks_kill_and_untested_mutants_are_not_tried() -> None:
    stats = {"killed": 90, "timeout": 2, "caught_by_type_check": 1, "survived": 6, "suspicious": 1, "no_tests": 40}
    assert score(stats) == (93, 100)


def test_the_report_prints_the_score(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stats = tmp_path / "stats.json"
    stats.write_text(json.dumps({"killed": 3, "survived": 1}))
    assert main([str(stats)]) == 0
    assert "3 of 4 mutants killed (75.0%)" in capsys.readouterr().out


def test_fails_without_the_exported_counts(tmp_path: Path) -> None:
    assert main([str(tmp_path / "missing.json")]) == 2
