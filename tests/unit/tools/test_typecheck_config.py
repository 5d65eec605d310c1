"""mypy follows only the aws-cdk-lib modules the code imports (pyproject.toml): keep that list true."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _followed_cdk_modules() -> set[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    followed: set[str] = set()
    for override in config["overrides"]:
        if override.get("follow_imports") == "normal":
            followed.update(m for m in override["module"] if m.split(".")[0] == "aws_cdk")
    return followed


def _imported_cdk_modules() -> dict[str, str]:
    """Every aws_cdk module the type-checked code imports, with one file that imports it."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    found: dict[str, str] = {}
    for entry in config["files"]:
        path = ROOT / entry
        for source in [path] if path.is_file() else sorted(path.rglob("*.py")):
            for node in ast.walk(ast.parse(source.read_text())):
                names: list[str] = []
                if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "aws_cdk":
                    names.append(node.module)
                    # `from aws_cdk import aws_s3 as s3` (or `pipelines`) imports that submodule;
                    # classes such as `Stack` are capitalized
                    if node.module == "aws_cdk":
                        names += [f"aws_cdk.{a.name}" for a in node.names if a.name[:1].islower()]
                elif isinstance(node, ast.Import):
                    names += [a.name for a in node.names if a.name.split(".")[0] == "aws_cdk"]
                for name in names:
                    found.setdefault(name, str(source.relative_to(ROOT)))
    return found


def test_every_imported_cdk_module_is_type_checked_not_skipped() -> None:
    # Given the modules the code imports and the ones mypy is told to follow
    imported, followed = _imported_cdk_modules(), _followed_cdk_modules()
    # Then each imported one is followed (a skipped one would type-check as Any, silently)
    missing = {module: where for module, where in imported.items() if module not in followed}
    assert missing == {}, f"add these to the follow_imports = 'normal' list in pyproject.toml: {missing}"
    # And the list names nothing the code no longer imports
    assert followed - set(imported) == set()
