"""Settings and fixtures every test shares: no real AWS credentials, a fixed region, quiet jsii, moto, a clock,
no real endpoint and no environment left changed."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

# Set before boto3/moto/jsii are imported by any test module.
os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
for _key, _value in {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
    "POWERTOOLS_TRACE_DISABLED": "1",
    "POWERTOOLS_METRICS_NAMESPACE": "MangaAssistTest",
    "POWERTOOLS_SERVICE_NAME": "test",
    # Code assets hold sources alone whatever interpreters this machine has, so every template and
    # asset is the same everywhere (constructs_lib.bytecode; its own tests turn bytecode on).
    "LAMBDA_BYTECODE_PYTHON": "none",
}.items():
    os.environ[_key] = _value
os.environ.pop("AWS_PROFILE", None)

from embedded import models, moto_responses, network  # noqa: E402 - after the settings above, before any test's imports
from embedded.heap import collect_less_often  # noqa: E402
from tests.support.environment import left_changed  # noqa: E402

network.install()
models.install()
moto_responses.install()
collect_less_often()  # before the test modules' imports build the heap


def pytest_configure(config: pytest.Config) -> None:
    """One directory per run where its processes share the stages they synthesized (``embedded.once_per_run``).

    Made by the run's first process, before pytest-xdist starts its workers, which inherit it.
    """
    from embedded.once_per_run import SHARED_DIR

    if not hasattr(config, "workerinput") and not os.environ.get(SHARED_DIR):
        shared = tempfile.mkdtemp(prefix="synth-shared-")
        os.environ[SHARED_DIR] = shared

        def remove() -> None:
            shutil.rmtree(shared, ignore_errors=True)
            os.environ.pop(SHARED_DIR, None)

        config.add_cleanup(remove)


def _work_unit(nodeid: str) -> str:
    """The unit of tests one xdist worker runs together, so that costly setup happens once.

    * ``tests/infra/`` and the onboarding workflow read ``default_stages()`` (dev and prod
      synthesized once per process, about 35 s of CPU): one unit, one synthesis.
    * Each other workflow module synthesizes its own stage per module: one unit per module.
    * Each ``tests/local/`` module starts one ``make local`` server for its tests: one unit per module.
    * The modules in :data:`MODULE_UNITS` stand a stage up (or build a wheel) once for all their
      tests, in a module-scoped fixture that each worker running one of their tests would repeat:
      one unit per module.
    * Everything else is balanced test by test.
    """
    path = nodeid.split("::", 1)[0]
    if path.startswith("tests/infra/") or path == "tests/workflows/test_onboarding.py":
        return "default-stages"
    if path.startswith(("tests/workflows/test_", "tests/local/test_")) or path in MODULE_UNITS:
        return path
    return nodeid


#: Modules whose module-scoped fixture is costly (an embedded stage, a built wheel).
MODULE_UNITS = frozenset(
    {
        "tests/e2e/test_faults.py",
        "tests/e2e/test_generated_requests.py",
        "tests/e2e/test_harness_api.py",
        "tests/e2e/test_trail.py",
        "tests/library/test_wheel.py",
    }
)


@pytest.hookimpl(optionalhook=True)  # the hook exists only when pytest-xdist is loaded
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """Schedule by :func:`_work_unit`. pytest-xdist's own ``loadgroup`` cannot do it here: with
    pytest 9 it renames ``item._nodeid``, which pytest no longer reads, so groups are ignored."""
    if config.getvalue("dist") != "loadscope":  # the project's default (pyproject.toml); -d other wins
        return None
    from xdist.scheduler import LoadScopeScheduling

    class WorkUnitScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _work_unit(nodeid)

    return WorkUnitScheduling(config, log)


@pytest.fixture
def clock() -> Any:
    """A settable clock (``embedded.clock.FakeClock``); pass it as ``clock=`` and move it with ``advance``."""
    from embedded.clock import FakeClock

    return FakeClock()


@pytest.fixture
def dynamodb_requests() -> contextlib.AbstractContextManager[Any]:
    """How moto's DynamoDB takes concurrent requests: as they come (a suite may make each atomic)."""
    return contextlib.nullcontext()


@pytest.fixture
def ddb_client(dynamodb_requests: contextlib.AbstractContextManager[Any]) -> Iterator[Any]:
    """A low-level DynamoDB client inside an active moto mock (fake credentials and region above)."""
    import boto3  # imported by a test, never before the settings above
    from moto import mock_aws

    with mock_aws(), dynamodb_requests:
        yield boto3.client("dynamodb", region_name="us-east-1")


@pytest.fixture(autouse=True)
def no_real_endpoint() -> Iterator[None]:
    """A test that tried to reach a real endpoint fails, even when the caller swallowed the refusal."""
    network.REACHED.clear()
    yield
    reached, network.REACHED[:] = list(network.REACHED), []
    if reached:
        pytest.fail(f"reached for real endpoints (embedded.network refused them): {sorted(set(reached))}")


def _between_invocations() -> contextlib.AbstractContextManager[object]:
    """The Lambda bridge's hold on invocations; none can be in flight before it is loaded."""
    runtime = sys.modules.get("embedded.runtime")
    return contextlib.nullcontext() if runtime is None else runtime.between_invocations()


@pytest.fixture(autouse=True)
def no_leaked_environment() -> Iterator[None]:
    """A test that leaves the process's environment changed fails, naming the variables, and the
    environment is put back: a function's settings left behind (``BEDROCK_MODEL_ID``, a table name)
    would send a later test on the same worker to another model or table, far from the cause.
    Module- and session-scoped fixtures set their variables before this snapshot and remove them
    after it, so only what a test itself (or what it started) left is reported. Both reads wait
    for the in-process invocation in flight, whose variables are its own while it runs."""
    with left_changed(_between_invocations) as changed:
        yield
    if changed:
        pytest.fail(f"the test left the environment changed (now put back): {changed}")
