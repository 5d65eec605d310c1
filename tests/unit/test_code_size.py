"""Size limits of the product code: no function over 80 lines, no module over 600.

Measured over the syntax tree: a function's lines run from its first decorator to its last
line, docstring and comments included. A function past the limit is one that does several
things: split it by concern.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Where the limits hold: every product package (the infrastructure, the Lambda code and the contracts,
#: the embedded AWS, what runs it locally, the benchmarks and the tools).
PACKAGES = ("stacks", "constructs_lib", "tools", "lambdas", "contracts", "embedded", "local", "bench")
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 600


def _modules() -> list[Path]:
    return sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))


def _function_lines(source: str) -> dict[str, int]:
    lines: dict[str, int] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            start = min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)])
            assert node.end_lineno is not None
            lines[f"{node.name} (line {node.lineno})"] = node.end_lineno - start + 1
    return lines


@pytest.mark.parametrize("module", _modules(), ids=lambda path: str(path.relative_to(ROOT)))
def test_no_function_over_80_lines_and_no_module_over_600(module: Path) -> None:
    source = module.read_text()

    long_functions = {name: n for name, n in _function_lines(source).items() if n > MAX_FUNCTION_LINES}

    assert long_functions == {}, f"functions over {MAX_FUNCTION_LINES} lines: split them by concern"
    assert len(source.splitlines()) <= MAX_MODULE_LINES, f"over {MAX_MODULE_LINES} lines: split the module"
