"""tools.mutation_tests: each mutated function keeps the tests of its own module (and the few named beside it)."""

from __future__ import annotations

from tools.mutation_tests import module_of, narrow, prefixes

STORE = "tests/unit/shared/store/"


def test_a_mangled_name_gives_its_module() -> None:
    assert module_of("lambdas.shared.store.table.xǁTableCoreǁget") == "lambdas.shared.store.table"
    assert module_of("lambdas.api.rest.x__execution__mutmut_3") == "lambdas.api.rest"
    assert module_of("not mangled") == "not mangled"


def test_a_module_keeps_its_own_test_module_and_what_tests_it_from_outside() -> None:
    assert prefixes("lambdas.shared.store.handoffs", package=False) == (
        f"{STORE}test_handoffs",
        "tests/unit/usecases/",
    )
    assert prefixes("lambdas.shared.store.table", package=False) == (
        f"{STORE}test_table",
        "tests/unit/usecases/",
        f"{STORE}test_sessions_partition.py",
    )
    assert prefixes("lambdas.shared.store", package=True) == (STORE, "tests/unit/usecases/")


def test_narrowing_keeps_a_functions_own_tests_and_all_of_them_when_none_is_its_own() -> None:
    tests = {
        "lambdas.shared.store.handoffs.xǁHandoffsǁabandon": [
            f"{STORE}test_handoffs.py::test_a",
            "tests/unit/usecases/test_customer_leaves.py::test_b",
            "tests/unit/api/test_rest.py::test_c",
        ],
        "lambdas.api.rest.x__execution": ["tests/unit/test_hostile_input.py::test_d", "tests/e2e/test_story.py::t"],
        "lambdas.shared.tokens.x_verify": ["tests/unit/api/test_rest.py::test_e"],
    }
    narrowed, kept = narrow(tests, packages=set())
    assert narrowed == {
        "lambdas.shared.store.handoffs.xǁHandoffsǁabandon": [
            f"{STORE}test_handoffs.py::test_a",
            "tests/unit/usecases/test_customer_leaves.py::test_b",
        ],
        "lambdas.api.rest.x__execution": ["tests/unit/test_hostile_input.py::test_d"],
        "lambdas.shared.tokens.x_verify": ["tests/unit/api/test_rest.py::test_e"],
    }
    assert kept == 1
