"""bench.capacity_sim on a small stage: bounded at its target, refusing with a frame at twice it, nothing lost.

The simulation is seeded, so these are outcomes of one deterministic run, not timings.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

pytest.importorskip("simpy", reason="simpy is pinned in requirements-dev.txt: make install")

from bench import capacity_sim
from bench.capacity_sim import Outcome, Scenario, simulate
from stacks.capacity import CapacityConfig

#: 600 chats at 2 messages a minute: 20 a second; the route admits 30 (burst 60), 120 run at once.
SMALL = CapacityConfig(concurrent_chats=600, connects_per_second=5)


def _run(load: float, **limits: int) -> Outcome:
    derived = dataclasses.replace(SMALL.limits, **limits)
    return simulate(Scenario("small", SMALL, derived, load, arrival_seconds=40.0, warmup_seconds=10.0, seed=7))


def test_at_its_target_nothing_is_refused_and_the_first_frame_is_within_the_target() -> None:
    out = _run(1.0)
    assert out.offered > 700  # about 20 a second for 40 s
    assert (out.refused_gateway, out.refused_lambda, out.no_reply, out.lost) == (0, 0, 0, 0)
    assert out.replied == out.offered
    assert out.p95(out.first_frames) <= SMALL.first_frame_p95_seconds
    assert out.p95(out.durations) <= SMALL.reply_p95_seconds
    assert out.most_running < SMALL.limits.message_reserved_concurrency
    assert out.records_routed == out.records  # the stream drained
    assert out.oldest_record <= SMALL.limits.stream_batching_window_seconds + 1


def test_at_twice_its_target_the_gateway_refuses_the_excess_with_a_frame_and_nothing_is_lost() -> None:
    out = _run(2.0)
    # 40 a second for 30 s against a route that admits 30 a second (and a burst): about 240 refused
    assert 100 < out.refused_gateway < 400
    assert out.refused_lambda == 0
    assert out.no_reply == 0
    assert out.lost == 0
    assert out.replied + out.refused_gateway == out.offered
    assert out.connects_refused > 0  # 10 connects a second against 8 (burst 16)
    assert out.p95(out.first_frames) <= SMALL.first_frame_p95_seconds  # who got through is served on time


def test_too_little_reserved_concurrency_shows_as_lambda_refusals_each_with_a_frame() -> None:
    out = _run(1.0, message_reserved_concurrency=20)
    assert out.refused_lambda > 0
    assert out.lost == 0
    assert out.most_running == 20


def test_a_model_quota_below_the_need_leaves_turns_without_a_reply_frame_but_none_lost() -> None:
    out = _run(1.0, bedrock_requests_per_minute=300)
    assert out.model_retries > 0
    assert out.no_reply > 0
    assert out.lost == 0


def test_the_same_seed_gives_the_same_run() -> None:
    first, second = _run(2.0), _run(2.0)
    assert capacity_sim.row(first) == capacity_sim.row(second)


def test_the_table_replaces_only_its_marked_section(tmp_path: Path) -> None:
    page = tmp_path / "capacity.md"
    page.write_text(f"# Capacity\n\nbefore\n{capacity_sim.START}\nold table\n{capacity_sim.END}\nafter\n")
    capacity_sim.write_section(capacity_sim.section([_run(1.0)]), page)
    text = page.read_text()
    assert "old table" not in text
    assert text.startswith("# Capacity\n\nbefore\n")
    assert text.endswith(f"{capacity_sim.END}\nafter\n")
    assert "| small | 1x (600 chats) |" in text
    with pytest.raises(ValueError, match="has no section marked"):
        capacity_sim.write_section("x", _unmarked(tmp_path))


def _unmarked(tmp_path: Path) -> Path:
    page = tmp_path / "unmarked.md"
    page.write_text("# no markers\n")
    return page
