"""Every handler module loads at import exactly the heavy modules its allow-list names.

One fresh interpreter per handler module, as Lambda starts one, in Lambda's environment (see
:mod:`tests.support.cold_imports`); they run in parallel, and the test fails with every handler
that differs, so a heavy import that creeps into a cold start is named with the module it reached.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

from tests.support.cold_imports import ALLOWED, heavy_imports, unexpected


def test_every_handler_loads_only_the_heavy_modules_it_is_allowed_at_import() -> None:
    modules = sorted(ALLOWED)
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        loaded = dict(zip(modules, pool.map(heavy_imports, modules), strict=True))
    problems = [problem for module in modules if (problem := unexpected(module, loaded[module]))]
    assert not problems, "\n".join(problems)


def test_the_token_verifier_is_loaded_by_the_two_authorizers_only() -> None:
    verifiers = sorted(module for module, allowed in ALLOWED.items() if "lambdas.shared.tokens" in allowed)
    assert verifiers == ["lambdas.api.authorizer", "lambdas.ws.authorizer"]
