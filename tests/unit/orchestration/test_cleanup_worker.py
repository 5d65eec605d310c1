"""lambdas.orchestration.cleanup_worker: the sweep plan."""

from __future__ import annotations

import pytest

from lambdas.shared import env as lambda_env


def test_cleanup_plan_cutoff_honours_grace_override_and_never_a_future_now(monkeypatch: pytest.MonkeyPatch) -> None:
    import time as clock

    from lambdas.orchestration import cleanup_worker

    monkeypatch.setenv("CLEANUP_GRACE_SECONDS", "3600")
    monkeypatch.setenv("CLEANUP_SHARDS", "3")
    lambda_env.reset()
    now = int(clock.time())
    plan = cleanup_worker.plan.__wrapped__
    default = plan({"input": {}}, None)
    assert now - 3600 <= default["cutoff"] <= int(clock.time()) - 3600
    assert default["cutoff_text"] == str(default["cutoff"])
    assert default["shards"] == ["CLEANUP#0", "CLEANUP#1", "CLEANUP#2"]
    assert plan({"input": {"now": 1_000_000}}, None)["cutoff"] == 1_000_000 - 3600
    assert plan({"input": {"now": now + 86400}}, None)["cutoff"] >= now - 3600  # a future now is ignored
    assert plan({"input": {"now": 1_000_000, "older_than_seconds": 0}}, None)["cutoff"] == 1_000_000
    assert plan({"input": {"older_than_seconds": 10**9}}, None)["cutoff"] <= int(clock.time()) - 3600
    lambda_env.reset()
