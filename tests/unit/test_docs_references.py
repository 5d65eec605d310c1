"""The documents point at code that exists: every source path, test id and symbol they name.

A reader follows ``docs/security.md`` to the test that proves a rule or to the line that
acknowledges a finding; a path that moved (a test module split by handler, a module turned into a
package) sends them nowhere. So every backticked ``*.py`` path in the documents must exist, every
``path.py::test_name`` must name a test in that module, and a symbol written right after a path
(`` `path.py` `_grant` ``) must be defined in it. Line numbers are not allowed: they drift with
every edit, a symbol does not.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = sorted(
    [
        *ROOT.glob("docs/*.md"),
        ROOT / "README.md",
        ROOT / "embedded" / "README.md",
        ROOT / "constructs_lib" / "README.md",
    ]
)
#: ``path.py``, optionally ``:line`` or ``::name``, then optionally `` `symbol` `` right after it.
REFERENCE = re.compile(
    r"`(?P<path>[A-Za-z0-9_./-]+/[A-Za-z0-9_.-]+\.py)(?::(?P<line>\d+))?(?:::(?P<test>[A-Za-z0-9_]+))?`"
    r"(?: `(?P<symbol>_?[A-Za-z][A-Za-z0-9_.]*)`)?"
)
#: Paths of other projects the documents quote (Powertools' layer build), and ``.../`` abbreviations.
FOREIGN = ("layer_v3/",)


def _resolve(document: Path, path: str) -> Path | None:
    """A path relative to the repository, the document's folder, or (for the README) a package."""
    for base in (ROOT, document.parent, ROOT / "lambdas"):
        if (base / path).is_file():
            return base / path
    return None


@cache
def _names(module: Path) -> frozenset[str]:
    tree = ast.parse(module.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.add(node.name)
        elif isinstance(node, ast.Assign):
            found.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found.add(node.target.id)
    return frozenset(found)


def broken_references(document: Path) -> list[str]:
    broken = []
    for match in REFERENCE.finditer(document.read_text(encoding="utf-8")):
        path = match["path"]
        if path.startswith(("...", *FOREIGN)):
            continue
        module = _resolve(document, path)
        if module is None:
            broken.append(f"{path}: no such file")
            continue
        if match["line"]:
            broken.append(f"{path}:{match['line']}: a line number drifts; name the function or class")
        for name in (match["test"], match["symbol"]):
            if name and name.split(".")[-1] not in _names(module):
                broken.append(f"{path}: defines no {name}")
    return broken


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_test_and_symbol_a_document_names_exists(document: Path) -> None:
    assert broken_references(document) == []


def test_the_check_finds_a_moved_module_a_missing_test_and_a_line_number(tmp_path: Path) -> None:
    document = tmp_path / "doc.md"
    document.write_text(
        "`tests/unit/test_ws_handlers.py`, `tests/unit/shared/test_tokens.py::test_no_such_thing`, "
        "`constructs_lib/secure_queue.py:65`, `stacks/workflows/handoff.py` `_no_such_helper`, "
        "`stacks/workflows/handoff.py` `_grant`, `.../gate_runtime/decide.py`",
        encoding="utf-8",
    )
    assert broken_references(document) == [
        "tests/unit/test_ws_handlers.py: no such file",
        "tests/unit/shared/test_tokens.py: defines no test_no_such_thing",
        "constructs_lib/secure_queue.py:65: a line number drifts; name the function or class",
        "stacks/workflows/handoff.py: defines no _no_such_helper",
    ]
