"""The mutation score of `make mutation`, from the counts mutmut exports.

``mutmut export-cicd-stats`` writes ``mutants/mutmut-cicd-stats.json``; this prints the score
(killed, timed-out and type-checker-caught mutants of those tried) and exits 0 (the run is a
report, not a gate: each survivor is read, then either pinned by a test or shown equivalent).
Usage: ``python -m tools.mutation_report [mutants/mutmut-cicd-stats.json]``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

DEFAULT_STATS = Path("mutants/mutmut-cicd-stats.json")


def score(stats: dict[str, Any]) -> tuple[int, int]:
    """(mutants killed, mutants tried): a timeout or a type-checker refusal kills; no test or skipped is not tried."""
    killed = sum(int(stats.get(name, 0)) for name in ("killed", "timeout", "caught_by_type_check", "segfault"))
    tried = killed + int(stats.get("survived", 0)) + int(stats.get("suspicious", 0))
    return killed, tried


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else DEFAULT_STATS
    if not path.exists():
        print(f"{path} is missing: run `mutmut export-cicd-stats` after `mutmut run`", file=sys.stderr)
        return 2
    stats = json.loads(path.read_text())
    killed, tried = score(stats)
    percent = 100.0 * killed / tried if tried else 0.0
    print(f"mutation score: {killed} of {tried} mutants killed ({percent:.1f}%)")
    untested = int(stats.get("no_tests", 0))
    if untested:
        print(f"{untested} mutants in code no selected test runs (`mutmut results` lists them)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
