"""Every workflow test runs the state machines on moto's executor: each definition is parsed once."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from embedded.services.stepfunctions import definitions_parsed_once


@pytest.fixture(autouse=True)
def parsed_once() -> Iterator[None]:
    with definitions_parsed_once():
        yield
