"""The harness's guard against a test leaving the environment changed (tests/support/environment.py)."""

from __future__ import annotations

import os

import pytest

from tests.support.environment import left_changed


@pytest.fixture
def unset() -> str:
    name = "MANGA_GUARD_PROBE"
    assert os.environ.get(name, "") == ""
    return name


def test_a_variable_set_and_left_is_named_and_emptied(unset: str) -> None:
    with left_changed() as changed:
        os.environ[unset] = "left behind"
    assert changed == [unset]
    assert os.environ[unset] == ""


def test_a_changed_variable_is_named_and_put_back() -> None:
    with left_changed() as changed:
        os.environ["AWS_REGION"] = "eu-west-1"
    assert changed == ["AWS_REGION"]
    assert os.environ["AWS_REGION"] == "us-east-1"


def test_a_variable_left_empty_counts_as_unset_as_the_bridge_leaves_it(unset: str) -> None:
    with left_changed() as changed:
        os.environ[unset] = ""
    assert changed == []


def test_pytests_own_phase_variable_is_not_a_leak() -> None:
    phase = os.environ["PYTEST_CURRENT_TEST"]
    with left_changed() as changed:
        os.environ["PYTEST_CURRENT_TEST"] = phase.replace("(call)", "(teardown)")
    os.environ["PYTEST_CURRENT_TEST"] = phase
    assert changed == []
