"""Tests mirror the code: every module of ``lambdas/`` has a test module named after it.

``lambdas/<area>/<module>.py`` is tested in ``tests/unit/<area>/test_<module>.py`` (and
``lambdas/shared/store/<module>.py`` in ``tests/unit/shared/store/test_<module>.py``), so the test
of any handler, repository or use case is one guess away. Package faces (``__init__.py``) are
tested through the modules they hand on.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAMBDAS = ROOT / "lambdas"
UNIT = ROOT / "tests" / "unit"


def expected_test(module: Path) -> Path:
    """Where the test of ``lambdas/<area>/<module>.py`` lives."""
    relative = module.relative_to(LAMBDAS)
    return UNIT / relative.parent / f"test_{relative.name}"


def test_every_lambdas_module_has_a_test_module_named_after_it() -> None:
    modules = sorted(p for p in LAMBDAS.rglob("*.py") if p.name != "__init__.py")
    missing = [
        f"{module.relative_to(ROOT)} -> {expected_test(module).relative_to(ROOT)}"
        for module in modules
        if not expected_test(module).is_file()
    ]
    assert not missing, "modules without a test module named after them:\n" + "\n".join(missing)


def test_every_test_package_is_a_package() -> None:
    """The tests tree uses packages: a folder of test modules without ``__init__.py`` would clash by name."""
    folders = {p.parent for p in (ROOT / "tests").rglob("test_*.py")}
    assert sorted(str(f.relative_to(ROOT)) for f in folders if not (f / "__init__.py").is_file()) == []


def test_the_rule_finds_a_handler_one_guess_away() -> None:
    assert expected_test(LAMBDAS / "ws" / "message.py") == UNIT / "ws" / "test_message.py"
    assert expected_test(LAMBDAS / "shared" / "store" / "table.py") == UNIT / "shared" / "store" / "test_table.py"
