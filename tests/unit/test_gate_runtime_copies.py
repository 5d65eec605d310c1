"""The approval gate's runtime keeps its own copies of a few app helpers: they must stay alike.

The gate's code ships in its own asset, with the library and without the app, so it cannot import
``lambdas``; the helpers below are copied instead. This test reads both sources (no import) and
fails when one copy changes without the other: change both, or name the difference here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GATE = ROOT / "constructs_lib" / "approval_gate" / "gate_runtime"

#: (gate module, app module, helper names, names the gate spells differently: app name -> gate name)
COPIES = [
    (
        GATE / "environment.py",
        ROOT / "lambdas" / "shared" / "env.py",
        ("once", "container", "require", "optional", "integer"),
        {"MissingSetting": "SettingError"},
    ),
    (GATE / "records.py", ROOT / "lambdas" / "shared" / "records.py", ("_int", "_opt_int", "_opt_str"), {}),
]


class _Renamed(ast.NodeTransformer):
    """Drops docstrings (they may cite their own module) and applies the known renames."""

    def __init__(self, renames: dict[str, str]) -> None:
        self.renames = renames

    def visit_Name(self, node: ast.Name) -> ast.Name:
        node.id = self.renames.get(node.id, node.id)
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            node.body = body[1:] or [ast.Pass()]
        self.generic_visit(node)
        return node


def _code(path: Path, name: str, renames: dict[str, str]) -> str:
    tree = ast.parse(path.read_text())
    (function,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    return ast.unparse(_Renamed(renames).visit(function))


@pytest.mark.parametrize(
    ("gate", "app", "name", "renames"),
    [(gate, app, name, renames) for gate, app, names, renames in COPIES for name in names],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_the_gate_runtime_copy_is_the_app_helper(gate: Path, app: Path, name: str, renames: dict[str, str]) -> None:
    assert _code(gate, name, {}) == _code(app, name, renames), (
        f"{name} differs between {gate.relative_to(ROOT)} and {app.relative_to(ROOT)}: change both"
    )
