"""Every workflow test runs the state machines on moto's executor: each definition is parsed once,
its tasks reuse one client per service, and a symmetric key's unused key pair is never generated."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from embedded.services.kms import key_pairs_on_use
from embedded.services.stepfunctions import definitions_parsed_once, task_clients_reused


@pytest.fixture(autouse=True)
def less_work_for_moto() -> Iterator[None]:
    with definitions_parsed_once(), task_clients_reused(), key_pairs_on_use():
        yield
