"""Infrastructure tests read templates synthesized once per process (see embedded/synth.py)."""

from __future__ import annotations

import pytest

from embedded.synth import SynthesizedStage, default_stages


@pytest.fixture(scope="session")
def dev() -> SynthesizedStage:
    return default_stages()["dev"]


@pytest.fixture(scope="session")
def prod() -> SynthesizedStage:
    return default_stages()["prod"]


@pytest.fixture(scope="session", params=["dev", "prod"])
def any_stage(request: pytest.FixtureRequest) -> SynthesizedStage:
    return default_stages()[request.param]
