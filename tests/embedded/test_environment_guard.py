"""The harness's guard against a test leaving the environment changed (tests/support/environment.py)."""

from __future__ import annotations

import os
import threading

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


def test_both_reads_wait_for_the_invocation_in_flight(unset: str) -> None:
    # Given a function's invocation holding its variables while the test ends
    from embedded import runtime

    started, finish = threading.Event(), threading.Event()

    def invocation() -> None:
        with runtime.function_environment({unset: "the function's own"}):
            started.set()
            finish.wait(timeout=60)

    with left_changed(runtime.between_invocations) as changed:
        worker = threading.Thread(target=invocation)
        worker.start()
        started.wait(timeout=60)
        threading.Timer(0.2, finish.set).start()
    worker.join()
    # Then the guard read after the invocation ended: nothing was left, and nothing was disturbed
    assert changed == []
    assert os.environ.get(unset, "") == ""
