"""lambdas.ws.runtime: the WebSocket handlers share one store and one Step Functions client per container."""

from __future__ import annotations

from lambdas.shared import settings
from lambdas.ws import runtime


def test_the_handlers_store_is_the_functions_one_store() -> None:
    assert runtime.store is settings.store


def test_the_step_functions_client_is_made_once() -> None:
    assert runtime.stepfunctions() is runtime.stepfunctions()
