"""Step Functions' timers on the stage's clock: Wait states, task timeouts and heartbeats.

moto's executor waits in real time: a ``Wait`` state or a task's ``TimeoutSeconds`` sleeps on a
``threading.Event`` for that many seconds of the machine's clock. A run on a slow or busy machine
then sees timeouts it never asked for (an agent reassigned by the idle limit while the test was
merely slow), and moving the stage's clock forward ("an hour passes") fires no timer at all.

Inside :func:`timers_on`, every such wait measures its timeout on the stage's clock instead: it
ends when the clock has moved ``timeout`` seconds (real time flowing, or ``Clock.advance``), never
merely because the machine was slow while the clock was frozen (``Clock.frozen``). Waiting is
woken at least every quarter second to look at the clock again, so an advance takes effect within
that. A ``Wait`` state with an absolute ``Timestamp`` is still measured against real time (no
template of this app uses one).

Inside :func:`definitions_parsed_once`, each state machine definition is parsed by ANTLR once,
not again at every execution.

Inside :func:`task_clients_reused`, a task's service integration calls AWS with a client of that
service made once for the block, not a new one for every task it runs.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from types import SimpleNamespace
from typing import Any, Final
from unittest import mock

from moto.core.models import botocore_stubber
from moto.stepfunctions.parser.asl.component.state.exec import execute_state
from moto.stepfunctions.parser.asl.eval import environment
from moto.stepfunctions.parser.asl.eval.callback import callback
from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser
from moto.stepfunctions.parser.asl.parse.preprocessor import Preprocessor
from moto.stepfunctions.parser.asl.utils import boto_client
from moto.stepfunctions.parser.models import StepFunctionsParserBackend

#: Each definition's ANTLR parse tree, by the definition's text (:func:`definitions_parsed_once`).
_TREES: dict[str, Any] = {}

#: The executor's modules that make a client for each task they run (``from ... import boto_client_for``).
TASK_CLIENT_MODULES: Final = tuple(
    f"moto.stepfunctions.parser.asl.component.state.exec.{name}"
    for name in (
        "state_task.lambda_eval_utils",
        *(
            f"state_task.service.state_task_service_{service}"
            for service in ("aws_sdk", "batch", "dynamodb", "ecs", "events", "glue", "sfn", "sns", "sqs", "unsupported")
        ),
        "state_map.item_reader.eval.resource_eval_s3",
        "state_map.result_writer.resource_eval.resource_eval_s3",
    )
)

#: How often a waiting timer looks at the clock again (seconds of real time).
RECHECK_SECONDS: Final = 0.25

#: Each timer waiting now: its clock and when it ends on that clock (:func:`waiting_deadlines`).
_DEADLINES: list[tuple[Callable[[], float], float]] = []
_DEADLINES_LOCK = threading.Lock()


def running_executions(client: Any, machines: Iterable[str]) -> list[str]:
    """The ARNs of the executions of ``machines`` (state machine ARNs) that still run."""
    running: list[str] = []
    for machine in machines:
        for page in client.get_paginator("list_executions").paginate(stateMachineArn=machine, statusFilter="RUNNING"):
            running.extend(e["executionArn"] for e in page["executions"])
    return running


def stop_running(client: Any, machines: Iterable[str]) -> None:
    """Stop every execution of ``machines`` that still runs; one that ends meanwhile is left as it ended.

    A task in flight (a function running on moto's executor thread) still returns: whoever stands
    the state machines up waits for it before moto's mock goes (``Concurrency.close``).
    """
    for arn in running_executions(client, machines):
        with contextlib.suppress(Exception):  # ended meanwhile: nothing to stop
            client.stop_execution(executionArn=arn)


def waiting_deadlines(clock: Callable[[], float]) -> list[float]:
    """When each Step Functions timer waiting now on ``clock`` ends, in that clock's seconds.

    A test that moves a frozen clock to make a timer fire first waits for that timer to start: an
    advance made before the workflow got there would be spent on nothing. (Timers of earlier
    stages, on other clocks, may still be waiting in their threads: they are not this clock's.)
    """
    with _DEADLINES_LOCK:
        return [deadline for owner, deadline in _DEADLINES if owner is clock]


class ClockEvent(threading.Event):
    """A ``threading.Event`` whose ``wait(timeout)`` counts ``timeout`` on a clock of epoch seconds."""

    def __init__(self, clock: Callable[[], float]) -> None:
        super().__init__()
        self._clock = clock

    def wait(self, timeout: float | None = None) -> bool:
        if timeout is None:
            return super().wait()
        deadline = self._clock() + timeout
        timer = (self._clock, deadline)
        with _DEADLINES_LOCK:
            _DEADLINES.append(timer)
        try:
            while True:
                remaining = deadline - self._clock()
                if remaining <= 0:
                    return self.is_set()
                if super().wait(min(remaining, RECHECK_SECONDS)):
                    return True
        finally:
            with _DEADLINES_LOCK:
                _DEADLINES.remove(timer)


@contextmanager
def timers_on(clock: Callable[[], float]) -> Iterator[None]:
    """Make moto's Step Functions timers measure time on ``clock`` (see the module docstring)."""

    def event() -> ClockEvent:
        return ClockEvent(clock)

    threads = SimpleNamespace(Event=event)
    with (
        mock.patch.object(execute_state, "threading", threads),
        mock.patch.object(environment, "threading", SimpleNamespace(Event=event, RLock=threading.RLock)),
        mock.patch.object(callback, "Event", event),
    ):
        yield


@contextmanager
def definitions_parsed_once() -> Iterator[None]:
    """Parse each state machine definition once, however many executions run it.

    moto parses a definition with ANTLR when the state machine is created and again when each of
    its executions starts: a second or more of CPU for every execution of the handoff workflow.
    The parse tree only describes the text, so it is kept per definition. The evaluation
    components are still built anew from it for every caller, as moto builds them, so no two
    executions share one.
    A definition that fails to parse is never kept: it fails again, as it does on moto. The trees
    are kept for the process, so stages stood up one after another share them.

    Creating a state machine parses its definition only to validate it, and discards what it
    built: a definition kept here has parsed and been built from without an error, so creating
    another state machine from the same text skips the check.
    """
    parse = AmazonStateLanguageParser.parse
    validate = StepFunctionsParserBackend._validate_definition

    def parsed_once(definition: str) -> tuple[Any, Any]:
        tree = _TREES.get(definition)
        if tree is None:
            program, tree = parse(definition)
            _TREES[definition] = tree
            return program, tree
        return Preprocessor().visit(tree), tree

    def validated_once(definition: str) -> None:
        if definition not in _TREES:
            validate(definition)

    with (
        mock.patch.object(AmazonStateLanguageParser, "parse", staticmethod(parsed_once)),
        mock.patch.object(StepFunctionsParserBackend, "_validate_definition", staticmethod(validated_once)),
    ):
        yield


@contextmanager
def task_clients_reused() -> Iterator[None]:
    """Let moto's executor make one client per service and region for the block, not one per task.

    moto builds a new boto3 client (its own copy of the session's event handlers, its own endpoint
    resolution) for every Lambda invoke, DynamoDB, SNS or SQS task it runs: three runs of the story
    made 173 of them. Its clients carry fixed credentials and options, and the credentials a task
    passes are not used, so one client serves every task of a service (clients are thread-safe).
    They are dropped when the block ends, so a later block's patches of ``boto3.client`` (the
    Bedrock stub's) apply to the clients it makes.
    """
    made: dict[tuple[str, str, bool], Any] = {}
    lock = threading.Lock()
    original = boto_client.boto_client_for

    def reused(region: str, service: str, state_credentials: Any = None) -> Any:
        key = (region, service, bool(botocore_stubber.enabled))
        with lock:
            client = made.get(key)
            if client is None:
                client = made[key] = original(region, service, state_credentials)
        return client

    with ExitStack() as patches:
        for name in TASK_CLIENT_MODULES:
            patches.enter_context(mock.patch.object(importlib.import_module(name), "boto_client_for", reused))
        yield
