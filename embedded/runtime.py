"""Run moto's Lambda invocations in this process, by the function's Handler string.

moto executes a Lambda function in Docker, which this project has nowhere. Inside
``in_process()``, every invocation that reaches moto's Lambda backend -- a boto3 ``invoke``
(RequestResponse or Event), a Step Functions Task on moto's executor
(``mock_aws(config={"stepfunctions": {"execute_state_machine": True}})``) -- imports the
handler named by the function's ``Handler`` (e.g. ``lambdas.events.summary.handler``) and calls
it with the event and a Lambda-like context, with the function's ``Environment`` variables set
for the duration of the call. Each function keeps its own cached settings and clients from one of
its invocations to the next (``lambdas.shared.env.container``), as a warm Lambda container does;
a changed configuration starts a new one, as in Lambda.

A handler that raises produces what Lambda produces: an ``x-amz-function-error`` response whose
payload is ``{"errorType": <exception class name>, "errorMessage": ..., "stackTrace": [...]}``,
so Step Functions Retry/Catch match on the exception's class name as they do in AWS.

Invocations run one at a time (a re-entrant lock), because environment variables are
process-wide; nested invocations (a handler invoking another function) work. While a handler
runs, :data:`CURRENT_HANDLER` holds its Handler string and ``embedded.iam.caller.CALLER`` its role
(context variables: the threads a handler starts with a copy of its context see them too), so a
test layer can tell the functions' AWS calls from the harness's own, and the embedded stage
authorizes each call as the function's role.

Usage::

    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}), in_process() as calls:
        arn = deploy_function("lambdas.orchestration.cleanup_worker.handler", {"TABLE_NAME": "t"})
        ... start an execution whose Task invokes `arn` ...
        assert calls.by_handler("lambdas.orchestration.cleanup_worker.handler")

``deploy_function`` creates a moto function (with a throwaway role and a tiny zip) for tests
that do not stand up a whole synthesized stage.
"""

from __future__ import annotations

import contextvars
import importlib
import io
import json
import logging
import os
import sys
import threading
import time
import traceback
import uuid
import weakref
import zipfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, redirect_stdout
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import boto3
from aws_lambda_powertools.logging.formatter import BasePowertoolsFormatter
from moto.awslambda.models import LambdaFunction

from embedded.iam.caller import CALLER, Caller
from lambdas.shared import env as lambda_env

_LOCK = threading.RLock()
#: The Handler string of the in-process invocation running in this context (None: the harness).
CURRENT_HANDLER: contextvars.ContextVar[str | None] = contextvars.ContextVar("current_handler", default=None)
#: Called with each function before its handler runs (the stage's checks of what Lambda does for it).
BEFORE_INVOKE: list[Callable[[LambdaFunction], None]] = []
#: Code assets other than ``lambdas``: the asset's top-level package -> where it is importable here.
#: Named, not imported: importing the approval gate's package loads the construct library and so
#: aws-cdk-lib and its Node process, seconds a stage that never runs the gate should not pay
#: (``tests/embedded/test_lambda_bridge.py`` holds the name to the library's own constant).
GATE_RUNTIME_PACKAGE = "constructs_lib.approval_gate.gate_runtime"
_ASSET_PACKAGES = {"gate_runtime": GATE_RUNTIME_PACKAGE}


@dataclass
class Invocation:
    """One in-process invocation: which function, with what, and how it ended."""

    function_name: str
    handler: str
    event: Any
    result: Any = None
    error: BaseException | None = None
    seconds: float = 0.0  # the handler's own run time, the bridge's lock wait excluded
    #: What the handler printed (Lambda sends it to the function's log group): its Powertools Logger
    #: lines and Powertools Metrics' EMF lines.
    output: str = ""

    def emf(self) -> list[dict[str, Any]]:
        """The CloudWatch embedded-metric-format documents the handler printed."""
        lines = (line.strip() for line in self.output.splitlines())
        documents = [json.loads(line) for line in lines if line.startswith("{") and '"_aws"' in line]
        return [d for d in documents if isinstance(d, dict) and "CloudWatchMetrics" in d.get("_aws", {})]


@dataclass
class Invocations:
    """Every invocation made inside one ``in_process()`` block, in order."""

    calls: list[Invocation] = field(default_factory=list)

    def by_handler(self, handler: str) -> list[Invocation]:
        return [c for c in self.calls if c.handler == handler]

    def by_function(self, function_name: str) -> list[Invocation]:
        return [c for c in self.calls if c.function_name == function_name]


class LambdaContext:
    """The attributes of the Lambda context object that Powertools and our handlers read."""

    def __init__(self, function: LambdaFunction) -> None:
        self.function_name: str = function.function_name
        self.function_version: str = str(function.version)
        self.invoked_function_arn: str = function.function_arn
        self.memory_limit_in_mb: int = int(function.memory_size or 128)
        self.aws_request_id: str = str(uuid.uuid4())
        self.log_group_name: str = f"/aws/lambda/{function.function_name}"
        self.log_stream_name: str = "in-process"
        self._timeout_ms = int(function.timeout or 3) * 1000

    def get_remaining_time_in_millis(self) -> int:
        return self._timeout_ms


def resolve_handler(handler: str) -> Callable[[Any, Any], Any]:
    """Import ``package.module.function`` and return the function.

    A handler of a library construct's own code asset (``gate_runtime.request.handler``) is
    imported from where that package lives inside the library.
    """
    module_name, _, function_name = handler.rpartition(".")
    if not module_name:
        raise ValueError(f"handler must be 'module.function' (given {handler!r})")
    top, _, rest = module_name.partition(".")
    if top in _ASSET_PACKAGES:
        module_name = f"{_ASSET_PACKAGES[top]}.{rest}" if rest else _ASSET_PACKAGES[top]
    module = importlib.import_module(module_name)
    function = getattr(module, function_name, None)
    if not callable(function):
        raise ValueError(f"handler {handler!r}: {module_name} has no callable {function_name!r}")
    return function


@contextmanager
def between_invocations() -> Iterator[None]:
    """Hold off every in-process invocation for the block, after waiting for the one in flight.

    While it holds, the process's environment is its own: no handler's variables are set. A
    test harness compares the environment inside it, so a workflow's task still running on
    moto's executor thread when a test ends is neither taken for a leak nor disturbed.
    """
    with _LOCK:
        yield


@contextmanager
def function_environment(variables: Mapping[str, str]) -> Iterator[None]:
    """Set a function's environment for one call and make cached settings re-read it.

    Never deletes a variable. ``dict(os.environ)`` and ``os.environ.copy()`` iterate the keys and
    then read each one, so a key removed by this thread in between makes another thread's copy
    fail with a KeyError (moto's Step Functions executor threads build boto3 clients while an
    invocation ends; seen as ``States.Runtime: 'POWERTOOLS_LOG_LEVEL'``). A variable that did
    not exist before the call is restored to ``""``, which ``lambdas.shared.env`` (and
    Powertools) read as unset. For the same reason ``mock.patch.dict`` is not used: its restore
    clears the whole mapping and refills it.

    It holds the bridge's lock, as an invocation does: a test reading a function's settings
    through it while a workflow's task runs on moto's executor thread would otherwise take that
    invocation's variables for the process's own and put them back after both ended (a
    ``BEDROCK_MODEL_ID`` left behind made later tests call the model instead of the echo).
    """
    with _LOCK, _variables(variables):
        _reset_settings()
        try:
            yield
        finally:
            _reset_settings()


@contextmanager
def _variables(variables: Mapping[str, str]) -> Iterator[None]:
    """``variables`` set in the process's environment for the block, none ever deleted (see above)."""
    values = {k: str(v) for k, v in variables.items()}
    before = dict(os.environ)
    os.environ.update(values)
    try:
        yield
    finally:
        for key in set(os.environ) - set(before):  # set by this call or by the handler
            os.environ[key] = ""
        for key in values:
            if key in before:
                os.environ[key] = before[key]


def _reset_settings() -> None:
    """Make the handlers' cached settings re-read the environment (the gate's only once it was loaded)."""
    lambda_env.reset()
    _reset_gate()


def _reset_gate() -> None:
    gate_runtime = sys.modules.get(GATE_RUNTIME_PACKAGE)
    if gate_runtime is not None:
        gate_runtime.reset()


@contextmanager
def _in_container(warm: lambda_env.Values) -> Iterator[None]:
    """The app's settings and clients from the function's warm container.

    The gate's runtime, which keeps one process-wide cache, starts cold. The caller's container (a
    nested invocation's) is left as it was.
    """
    _reset_gate()
    try:
        with lambda_env.container(warm):
            yield
    finally:
        _reset_gate()


def _error_payload(error: BaseException) -> dict[str, Any]:
    return {
        "errorType": type(error).__name__,
        "errorMessage": str(error),
        "stackTrace": traceback.format_tb(error.__traceback__),
    }


class _Tee(io.TextIOBase):
    """Keeps what a handler prints and still passes it on to the stream it would have reached."""

    def __init__(self, through: Any) -> None:
        super().__init__()
        self.captured = io.StringIO()
        self._through = through

    def write(self, text: str) -> int:
        self.captured.write(text)
        return int(self._through.write(text))

    def flush(self) -> None:
        self._through.flush()


@contextmanager
def _powertools_logs_to(stream: Any) -> Iterator[None]:
    """Point every Powertools Logger's handler at ``stream`` for the block (a function's log is its stdout).

    A Powertools ``Logger`` keeps the ``sys.stdout`` of the moment it was created, in Lambda the
    function's log for good; in this process, the stdout of whichever invocation imported its module.
    """
    handlers = [
        handler
        for logger in list(logging.Logger.manager.loggerDict.values())
        if isinstance(logger, logging.Logger)
        for handler in logger.handlers
        if isinstance(handler, logging.StreamHandler) and isinstance(handler.formatter, BasePowertoolsFormatter)
    ]
    before = [handler.stream for handler in handlers]
    for handler in handlers:
        handler.stream = stream
    try:
        yield
    finally:
        for handler, previous in zip(handlers, before, strict=True):
            handler.stream = previous


@contextmanager
def in_process() -> Iterator[Invocations]:
    """Route moto Lambda invocations to our handlers, in this process, for the block's duration."""
    record = Invocations()
    # A function's container per configuration: its cached settings and clients stay warm between
    # its invocations, as in Lambda, where a changed configuration starts new containers.
    containers: dict[tuple[str, tuple[tuple[str, str], ...]], lambda_env.Values] = {}

    def invoke(function: LambdaFunction, event: Any = None) -> tuple[str, bool, str]:
        payload = json.loads(event) if isinstance(event, (str, bytes)) else (event if event is not None else {})
        handler = str(function.handler)
        call = Invocation(function.function_name, handler, payload)
        record.calls.append(call)
        for check in list(BEFORE_INVOKE):
            check(function)
        variables = {key: str(value) for key, value in (function.environment_vars or {}).items()}
        warm = containers.setdefault((str(function.function_arn), tuple(sorted(variables.items()))), {})
        with _LOCK, _variables(variables), _in_container(warm):
            running, started = CURRENT_HANDLER.set(handler), time.perf_counter()
            role = CALLER.set(Caller(str(function.role), f"function {function.function_name}"))
            printed = _Tee(sys.stdout)
            try:
                with redirect_stdout(printed), _powertools_logs_to(printed):
                    call.result = resolve_handler(handler)(payload, LambdaContext(function))
            except Exception as error:  # every handler error becomes Lambda's error payload
                call.error = error
                return json.dumps(_error_payload(error)), True, traceback.format_exc()
            finally:
                call.output = printed.captured.getvalue()
                call.seconds = time.perf_counter() - started
                CALLER.reset(role)
                CURRENT_HANDLER.reset(running)
        return json.dumps(call.result, default=str), False, ""

    with mock.patch.object(LambdaFunction, "_invoke_lambda", invoke):
        yield record


def _zip_placeholder() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("placeholder.py", "# code runs in-process from the lambdas package\n")
    return buffer.getvalue()


_SESSION_CLIENTS: weakref.WeakKeyDictionary[Any, dict[tuple[str, str | None], Any]] = weakref.WeakKeyDictionary()
_CLIENTS_LOCK = threading.Lock()


def mock_client(service: str, region: str | None = None) -> Any:
    """The running mock's client of ``service``, made once (call inside mock_aws).

    A client of the default session, which moto starts anew with each mock, so a client made here
    never outlives its mock. Deployers that made a client per function or per poll paid 8 ms of CPU
    for each.
    """
    session = boto3._get_default_session()
    with _CLIENTS_LOCK:
        clients = _SESSION_CLIENTS.setdefault(session, {})
        made = clients.get((service, region))
        if made is None:
            made = clients[(service, region)] = session.client(service, region_name=region)
        return made


def deploy_function(
    handler: str,
    environment: Mapping[str, str] | None = None,
    *,
    name: str | None = None,
    timeout: int = 30,
    region: str | None = None,
) -> str:
    """Create a moto Lambda function for ``handler`` and return its ARN (call inside mock_aws)."""
    resolve_handler(handler)  # fail now, not at invocation, on a typo
    iam = mock_client("iam", region)
    role_name = "in-process-lambda-role"
    try:
        role_arn = iam.get_role(RoleName=role_name)["Role"]["Arn"]
    except iam.exceptions.NoSuchEntityException:
        role_arn = iam.create_role(
            RoleName=role_name,
            AssumeRolePolicyDocument=json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"Service": "lambda.amazonaws.com"},
                            "Action": "sts:AssumeRole",
                        }
                    ],
                }
            ),
        )["Role"]["Arn"]
    function_name = name or handler.replace(".", "-")[-64:]
    response = mock_client("lambda", region).create_function(
        FunctionName=function_name,
        Runtime="python3.11",
        Role=role_arn,
        Handler=handler,
        Code={"ZipFile": _zip_placeholder()},
        Timeout=timeout,
        Environment={"Variables": dict(environment or {})},
    )
    return str(response["FunctionArn"])
