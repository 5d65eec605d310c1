"""A process that runs a stage on embedded AWS outside pytest: fake credentials, one region, and a
collector set for the heap such a process holds."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator

import pytest

from embedded.heap import THRESHOLDS
from embedded.offline import OFFLINE_ENVIRONMENT, go_offline


@pytest.fixture
def process_settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Whatever ``go_offline`` changes in this process is put back afterwards."""
    for key in OFFLINE_ENVIRONMENT:
        monkeypatch.setenv(key, "before")
    monkeypatch.setenv("AWS_PROFILE", "someone")
    monkeypatch.setenv("AWS_LAMBDA_LOG_LEVEL", "before")
    thresholds = gc.get_threshold()
    gc.set_threshold(700, 10, 10)  # Python's defaults
    yield
    gc.set_threshold(*thresholds)


@pytest.mark.usefixtures("process_settings")
def test_go_offline_sets_fake_credentials_one_region_and_no_profile_and_extra_settings_win() -> None:
    go_offline(AWS_LAMBDA_LOG_LEVEL="ERROR", AWS_REGION="eu-west-1")

    assert "AWS_PROFILE" not in os.environ
    assert os.environ["AWS_ACCESS_KEY_ID"] == "offline"
    assert os.environ["AWS_DEFAULT_REGION"] == "us-east-1"
    assert os.environ["AWS_EC2_METADATA_DISABLED"] == "true"
    assert (os.environ["AWS_REGION"], os.environ["AWS_LAMBDA_LOG_LEVEL"]) == ("eu-west-1", "ERROR")


@pytest.mark.usefixtures("process_settings")
def test_go_offline_collects_cycles_less_often_than_pythons_defaults() -> None:
    go_offline()

    assert gc.get_threshold() == THRESHOLDS
    assert all(ours >= default for ours, default in zip(THRESHOLDS, (700, 10, 10), strict=True))
