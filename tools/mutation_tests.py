"""Narrow mutmut's tests of each function to the tests of its own module, so `make mutation` stays bounded.

mutmut's stats pass runs every selected test once and records which functions each one called; a
mutant is then tried against all of those. A function every test reaches (``require_id``, the
table core's ``get``) would send each of its surviving mutants through the whole suite. This keeps,
for a function of ``lambdas/<area>/<module>.py``, the tests of ``tests/unit/<area>/test_<module>*``
(tests mirror the code) and the few modules that test it from outside (:data:`ALSO`); a function
none of those reach keeps what mutmut found. Usage: ``python -m tools.mutation_tests``, between the
stats pass and the mutants (see the Makefile's ``mutation`` target).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

STATS: Final = Path("mutants/mutmut-stats.json")

#: Tests that exercise a module from outside its own test module, by module prefix.
ALSO: Final[Mapping[str, tuple[str, ...]]] = {
    # The use cases are the store's transactions: their tests pin the aggregates' conditions.
    "lambdas.shared.store": ("tests/unit/usecases/",),
    # The table core's batch deletes are driven, throttled and bounded, by a session's partition deletes.
    "lambdas.shared.store.table": ("tests/unit/shared/store/test_sessions_partition.py",),
    # Both authorizers verify with it; the property tests generate tokens against both.
    "lambdas.shared.tokens": (
        "tests/unit/shared/test_token_properties.py",
        "tests/unit/api/test_authorizer.py",
        "tests/unit/ws/test_authorizer.py",
    ),
    # Hostile input reaches every REST handler.
    "lambdas.api": ("tests/unit/test_hostile_input.py",),
    # The access table lives with the contracts; the REST access tests and the authorizer read it.
    # (tests/unit/test_contracts.py reads the contracts' source as text, which mutmut rewrites.)
    "contracts.access": ("tests/unit/api/test_access.py", "tests/unit/api/test_authorizer.py"),
}

_MANGLED: Final = re.compile(r"^(?P<module>[\w.]+?)\.x(?:_|ǁ)")


def module_of(mangled: str) -> str:
    """``lambdas.shared.store.table`` of ``lambdas.shared.store.table.xǁTableCoreǁget``."""
    match = _MANGLED.match(mangled)
    return match.group("module") if match else mangled


def own_tests(module: str, package: bool) -> tuple[str, ...]:
    """The test path prefixes of ``module`` by the layout rule (a package: its whole test folder)."""
    parts = module.split(".")[1:]
    if package:
        return ("tests/unit/" + "/".join(parts) + "/",)
    return ("tests/unit/" + "/".join([*parts[:-1], f"test_{parts[-1]}"]),)


def prefixes(module: str, package: bool) -> tuple[str, ...]:
    extra = tuple(p for name, paths in ALSO.items() if module == name or module.startswith(name + ".") for p in paths)
    return own_tests(module, package) + extra


def narrow(tests_by_function: Mapping[str, Iterable[str]], packages: set[str]) -> tuple[dict[str, list[str]], int]:
    """Each function's tests narrowed to its module's; and how many functions kept all theirs (none matched)."""
    narrowed: dict[str, list[str]] = {}
    kept = 0
    for function, tests in tests_by_function.items():
        module = module_of(function)
        allowed = prefixes(module, module in packages)
        chosen = sorted(t for t in tests if t.startswith(allowed))
        if not chosen:
            chosen, kept = sorted(tests), kept + 1
        narrowed[function] = chosen
    return narrowed, kept


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else STATS
    data = json.loads(path.read_text())
    before = sum(len(t) for t in data["tests_by_mangled_function_name"].values())
    packages = {str(p.parent).replace("/", ".") for p in Path("lambdas").rglob("__init__.py")}
    data["tests_by_mangled_function_name"], kept = narrow(data["tests_by_mangled_function_name"], packages)
    after = sum(len(t) for t in data["tests_by_mangled_function_name"].values())
    path.write_text(json.dumps(data, indent=4))
    print(
        f"mutmut's test associations narrowed to each module's tests: {before} -> {after} ({kept} functions kept all)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
