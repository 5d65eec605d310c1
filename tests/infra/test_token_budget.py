"""The ``token_budget`` block: a positive whole number of model tokens per customer and UTC day, on every function."""

from __future__ import annotations

from typing import Any

import pytest

from embedded.synth import cdk_context
from stacks.config import ConfigError, load_stage_config
from stacks.functions import stage_environment
from stacks.token_budget import TokenBudgetConfig


@pytest.fixture(scope="module")
def stages() -> dict[str, Any]:
    return cdk_context()["stages"]


def _load(stages: dict[str, Any], block: Any, stage: str = "dev") -> TokenBudgetConfig:
    values = {**stages[stage], "token_budget": block}
    return load_stage_config({**stages, stage: values}, stage).token_budget


def test_dev_and_prod_budgets_reach_the_functions_as_a_stage_variable(stages: dict[str, Any]) -> None:
    dev, prod = (load_stage_config(stages, name) for name in ("dev", "prod"))
    assert dev.token_budget == TokenBudgetConfig(200_000)
    assert prod.token_budget == TokenBudgetConfig(1_000_000)
    assert stage_environment(dev)["CHAT_DAILY_TOKEN_BUDGET"] == "200000"
    assert stage_environment(prod)["CHAT_DAILY_TOKEN_BUDGET"] == "1000000"


def test_a_stage_without_the_block_gets_two_hundred_thousand_tokens(stages: dict[str, Any]) -> None:
    values = {k: v for k, v in stages["dev"].items() if k != "token_budget"}
    assert load_stage_config({**stages, "dev": values}, "dev").token_budget.daily_tokens_per_customer == 200_000


def test_the_smallest_and_largest_budgets_are_accepted(stages: dict[str, Any]) -> None:
    assert _load(stages, {"daily_tokens_per_customer": 1}).daily_tokens_per_customer == 1
    assert _load(stages, {"daily_tokens_per_customer": 1_000_000_000}).daily_tokens_per_customer == 1_000_000_000


@pytest.mark.parametrize("value", [0, -1, 1_000_000_001, 2.5, "1000", True, None])
def test_fails_for_a_budget_that_is_not_a_positive_whole_number(stages: dict[str, Any], value: Any) -> None:
    with pytest.raises(
        ConfigError, match=r"stage 'dev': token_budget.daily_tokens_per_customer must be a whole number"
    ):
        _load(stages, {"daily_tokens_per_customer": value})


def test_fails_for_an_unknown_key_or_a_block_that_is_not_an_object(stages: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=r"unknown token_budget keys \['daily_tokens'\]"):
        _load(stages, {"daily_tokens": 5})
    with pytest.raises(ConfigError, match="token_budget must be an object"):
        _load(stages, 5)
