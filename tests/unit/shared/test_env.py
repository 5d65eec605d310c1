"""lambdas.shared.env: environment variables read once, and errors that name the variable."""

from __future__ import annotations

import pytest

from lambdas.shared import env


def test_a_missing_required_variable_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SOME_SETTING", raising=False)
    with pytest.raises(env.MissingSetting, match="SOME_SETTING"):
        env.require("SOME_SETTING")


def test_an_integer_out_of_its_range_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOME_NUMBER", "0")
    with pytest.raises(env.MissingSetting, match="SOME_NUMBER"):
        env.integer("SOME_NUMBER", low=1, high=5)
    monkeypatch.setenv("SOME_NUMBER", "5")
    assert env.integer("SOME_NUMBER", low=1, high=5) == 5


def test_once_builds_one_value_until_reset() -> None:
    built: list[int] = []

    @env.once
    def thing() -> int:
        built.append(1)
        return len(built)

    assert (thing(), thing()) == (1, 1)
    env.reset()
    assert thing() == 2


def test_a_container_keeps_its_own_values_and_reset_clears_only_the_running_one() -> None:
    built: list[str] = []

    @env.once
    def thing() -> str:
        built.append("x")
        return f"value {len(built)}"

    # Given a value cached in the process's own container and one in a harness's container
    ours = thing()
    warm: env.Values = {}
    with env.container(warm):
        theirs = thing()
        # When the harness's container runs again, its value is still there, not the process's
        assert thing() == theirs
        env.reset()
        assert thing() == "value 3"
    # Then the process's container kept its value through the other's reset
    assert (ours, theirs, thing()) == ("value 1", "value 2", "value 1")


def test_a_flag_reads_true_and_false(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOME_FLAG", "true")
    assert env.flag("SOME_FLAG") is True
    monkeypatch.setenv("SOME_FLAG", "false")
    assert env.flag("SOME_FLAG") is False
    monkeypatch.delenv("SOME_FLAG")
    assert env.flag("SOME_FLAG", default=True) is True
