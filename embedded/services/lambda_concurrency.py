"""Reserved concurrency on the embedded stage: a function never runs more invocations at once than it reserves.

An invocation is in flight from the moment Lambda accepts it until its handler returns (here:
waiting for the runtime bridge's lock included, as a busy execution environment would make a
caller wait). One more than ``ReservedConcurrentExecutions`` is throttled, and what happens then
depends on how the function was invoked (Lambda developer guide, "Understanding Lambda function
scaling" and "How Lambda handles errors and retries with asynchronous invocation"):

* synchronous (``RequestResponse``): the caller gets ``TooManyRequestsException`` (429, reason
  ``ReservedFunctionConcurrentInvocationLimitExceeded``); API Gateway answers its client 500;
* asynchronous (``Event``): Lambda accepts the event (202) and keeps retrying it, for up to six
  hours, without counting the throttles as attempts; here it waits in :attr:`Concurrency.deferred`
  and runs at the next :meth:`Concurrency.retry_deferred` (the stage's ``settle`` calls it);
* an event source mapping's poller backs off: the pumps treat the batch as not delivered (a
  stream retries it from the same position, a queue's messages become visible again).

The account's unreserved pool (1,000 by default) is not emulated: the stage never runs that much.

When the stage closes, :meth:`Concurrency.close` refuses every new invocation and waits for those
in flight to return, so no handler (a workflow's task still running on moto's executor thread)
calls AWS after moto's mock is gone: such a call would leave the process for the real endpoint.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

from moto.awslambda.models import LambdaBackend
from moto.core.exceptions import JsonRESTError

THROTTLE_REASON = "ReservedFunctionConcurrentInvocationLimitExceeded"
#: How long (real seconds) a closing stage waits for the invocations in flight to return.
DRAIN_SECONDS = 120.0


class StageClosed(JsonRESTError):
    """An invocation that arrived after the stage began to close (a stopped workflow's next task)."""

    code = 503

    def __init__(self, function_name: str) -> None:
        super().__init__("ServiceException", f"the embedded stage is closing: {function_name} was not invoked")


class InvocationsStillRunning(RuntimeError):
    """The stage closed while a handler was still running after :data:`DRAIN_SECONDS`."""


class TooManyRequests(JsonRESTError):
    """Lambda's answer to a synchronous invocation over the function's reserved concurrency."""

    code = 429

    def __init__(self, function_name: str) -> None:
        super().__init__("TooManyRequestsException", "Rate Exceeded.")
        self.description = (
            f'{{"__type": "TooManyRequestsException", "message": "Rate Exceeded.", "Reason": "{THROTTLE_REASON}", '
            f'"Type": "User", "retryAfterSeconds": "1", "function": "{function_name}"}}'
        )


@dataclass
class Concurrency:
    """In-flight invocations per function, the throttles, and the deferred asynchronous events."""

    in_flight: dict[str, int] = field(default_factory=dict)
    #: every throttled invocation: (function name, invocation type)
    throttled: list[tuple[str, str]] = field(default_factory=list)
    #: asynchronous events accepted while throttled, waiting for their retry: (function name, body)
    deferred: list[tuple[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Condition()
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, timeout: float = DRAIN_SECONDS) -> None:
        """Refuse new invocations, then wait for those in flight (see the module docstring).

        Raises :class:`InvocationsStillRunning`, naming the functions, when some are still running
        after ``timeout`` real seconds.
        """
        deadline = time.monotonic() + timeout
        with self._lock:
            self._closed = True
            while running := sorted(name for name, count in self.in_flight.items() if count):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise InvocationsStillRunning(
                        f"the stage closed with invocations still running after {timeout:.0f} s: {running}"
                    )
                self._lock.wait(remaining)

    def retry_deferred(self, lambda_client: Any) -> int:
        """Hand each deferred asynchronous event to Lambda again; returns how many were retried."""
        with self._lock:
            waiting, self.deferred = self.deferred, []
        for function_name, body in waiting:
            lambda_client.invoke(FunctionName=function_name, InvocationType="Event", Payload=body)
        return len(waiting)

    @contextmanager
    def installed(self) -> Iterator[Concurrency]:
        """Count and bound invocations (see the module docstring) for the block's duration."""
        original = LambdaBackend.invoke
        concurrency = self

        def invoke(
            backend: LambdaBackend,
            function_name: str,
            qualifier: str | None,
            body: Any,
            headers: Any,
            response_headers: Any,
        ) -> Any:
            function = backend.get_function(function_name, qualifier)
            name = str(function.function_name)
            reserved = function.reserved_concurrency
            kind = headers.get("x-amz-invocation-type", "RequestResponse")
            with concurrency._lock:
                if concurrency._closed:
                    raise StageClosed(name)
                if reserved not in (None, "") and concurrency.in_flight.get(name, 0) >= int(reserved):
                    concurrency.throttled.append((name, kind))
                    if kind == "Event":
                        concurrency.deferred.append((name, body))
                        return b""
                    raise TooManyRequests(name)
                concurrency.in_flight[name] = concurrency.in_flight.get(name, 0) + 1
            try:
                return original(backend, function_name, qualifier, body, headers, response_headers)
            finally:
                with concurrency._lock:
                    concurrency.in_flight[name] -= 1
                    concurrency._lock.notify_all()

        with mock.patch.object(LambdaBackend, "invoke", invoke):
            yield self
