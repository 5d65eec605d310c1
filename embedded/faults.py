"""Transient AWS faults for the embedded stage: throttling, 5xx and timeouts, by service and operation.

Inside ``faults.installed()``, every AWS call a Lambda handler makes on the embedded stage passes
through this layer, which records it as an :class:`Attempt` and, when a :class:`Rule` asks for it,
fails it the way the service would:

* ``throttle``: the service's own throttling error (``ProvisionedThroughputExceededException``,
  ``ThrottlingException``, SNS ``Throttled``, API Gateway ``LimitExceededException``, ...; see
  :data:`ERRORS`, codes and statuses from the botocore service models);
* ``server_error``: its 5xx (``InternalServerError``, ``InternalException``, ...);
* ``connect_timeout``: botocore's ``ConnectTimeoutError``: the request never reached the service;
* ``read_timeout``: botocore's ``ReadTimeoutError`` *after the service has applied the request*:
  a read timeout means the request was sent and its answer lost, so a retry repeats a write the
  service already made (the case that tests idempotency).

A rule has a budget, so the fault is transient and the system's own retries and redelivery get
their chance: ``times`` (fail the next N matching calls; None: every one), ``after`` (let the
first K matching calls through first), ``probability`` with a seeded RNG. ``callers`` narrows it
to some handlers; by default any handler's calls match and the harness's own calls (the pumps'
reads, a test's checks, the routers' Lambda invokes) never do: the caller is
``lambda_bridge.CURRENT_HANDLER``. Calls moto makes while it serves a request (EventBridge invoking
a rule's target, SNS delivering to a queue) are AWS's, not the handler's: no handler is current
for them, unless a function they invoke runs (its own calls are its handler's).

Where the fault is injected, relative to the SDK's retries:

* Services moto serves (DynamoDB, SNS, SQS, EventBridge, Firehose, Step Functions, Lambda, API
  Gateway management, S3, SES, Scheduler): *beneath* botocore's retry handler, at ``before-send``
  (the hook through which moto answers every request). A throttle on a client in standard mode is
  retried by botocore itself, and every attempt, retries included, is an :class:`Attempt` here.
  The functions' clients are standard mode with 3 attempts, or single-attempt where the app's own
  retry policy retries (``lambdas.shared.aws``): both layers are exercised as configured.
* Bedrock Runtime (answered by ``BedrockStub`` at ``before-call``, moto has no Converse): the
  fault is raised where the stub would answer, above botocore's retry handler. The functions'
  Bedrock client is single-attempt (the app's own retry policy retries it), so each attempt is
  still one recorded call.

Back-off waits are not waited for (time compressed, like the pumps): botocore's retry sleep and
the shared retry policy's sleep are recorded in ``waits`` and return at once.

Usage::

    layer = FaultLayer()
    with embedded_stage(...) as stage, layer.installed():
        layer.inject("dynamodb", "throttle", operations={"UpdateItem"}, times=1)
        ... drive the stage ...
        assert layer.count("dynamodb", "UpdateItem") <= 3
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final
from unittest import mock

import botocore.endpoint
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ClientError, ConnectTimeoutError, ReadTimeoutError
from moto.core.botocore_stubber import BotocoreStubber, MockRawResponse

from embedded.runtime import CURRENT_HANDLER
from embedded.services.bedrock import BedrockStub
from lambdas.shared import retry as shared_retry

THROTTLE: Final = "throttle"
SERVER_ERROR: Final = "server_error"
CONNECT_TIMEOUT: Final = "connect_timeout"
READ_TIMEOUT: Final = "read_timeout"
KINDS: Final = (THROTTLE, SERVER_ERROR, CONNECT_TIMEOUT, READ_TIMEOUT)
#: The kinds a service answers with an error response (the others are botocore exceptions).
ANSWERED: Final = (THROTTLE, SERVER_ERROR)


@dataclass(frozen=True)
class ServiceErrors:
    """How a service answers a throttle and a 5xx: its wire protocol, (code, HTTP status) of each."""

    protocol: str
    throttle: tuple[str, int]
    server_error: tuple[str, int]


#: By botocore service id (hyphenized). Codes and statuses are the service models' where they
#: model one; otherwise AWS's common errors (``ThrottlingException`` 400, ``InternalFailure`` 500,
#: ``ServiceUnavailable`` 503). Firehose has no throttling error: it answers a stream over its
#: limits with ``ServiceUnavailableException``.
ERRORS: Final[dict[str, ServiceErrors]] = {
    "dynamodb": ServiceErrors("json", ("ProvisionedThroughputExceededException", 400), ("InternalServerError", 500)),
    "bedrock-runtime": ServiceErrors("rest-json", ("ThrottlingException", 429), ("InternalServerException", 500)),
    "apigatewaymanagementapi": ServiceErrors(
        "rest-json", ("LimitExceededException", 429), ("InternalServerError", 500)
    ),
    "sns": ServiceErrors("query", ("Throttled", 429), ("InternalError", 500)),
    "eventbridge": ServiceErrors("json", ("ThrottlingException", 400), ("InternalException", 500)),
    "firehose": ServiceErrors("json", ("ServiceUnavailableException", 503), ("InternalFailure", 500)),
    "sfn": ServiceErrors("json", ("ThrottlingException", 400), ("ServiceUnavailable", 503)),
    "lambda": ServiceErrors("rest-json", ("TooManyRequestsException", 429), ("ServiceException", 500)),
    "sqs": ServiceErrors("json", ("RequestThrottled", 400), ("InternalError", 500)),
    "sesv2": ServiceErrors("rest-json", ("TooManyRequestsException", 429), ("InternalServiceErrorException", 500)),
    "scheduler": ServiceErrors("rest-json", ("ThrottlingException", 429), ("InternalServerException", 500)),
    "s3": ServiceErrors("rest-xml", ("SlowDown", 503), ("InternalError", 500)),
}


@dataclass(frozen=True)
class Attempt:
    """One call that reached the layer: who made it, and the fault injected (None: it went through)."""

    service: str
    operation: str
    caller: str | None
    fault: str | None


@dataclass
class Rule:
    """Which calls to fail and how often (see the module docstring); counts what it did."""

    service: str
    kind: str
    operations: frozenset[str] | None = None
    callers: frozenset[str] | None = None
    times: int | None = 1
    after: int = 0
    probability: float = 1.0
    seed: int = 0
    matched: int = 0
    injected: int = 0
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS} (given {self.kind!r})")
        if self.service not in ERRORS:
            raise ValueError(f"no fault model for service {self.service!r}; known: {sorted(ERRORS)}")
        self._rng = random.Random(self.seed)  # noqa: S311 - a seeded draw of which calls fail, not a secret

    def matches(self, service: str, operation: str, caller: str | None) -> bool:
        if caller is None or service != self.service:
            return False
        if self.operations is not None and operation not in self.operations:
            return False
        return self.callers is None or caller in self.callers

    def fire(self) -> bool:
        """Called for a matching call: True when this one fails."""
        self.matched += 1
        if self.matched <= self.after or (self.times is not None and self.injected >= self.times):
            return False
        if self.probability < 1.0 and self._rng.random() >= self.probability:
            return False
        self.injected += 1
        return True


class _Sleepless:
    """The ``time`` module for the retry layers: ``sleep`` is recorded, not waited."""

    def __init__(self, waits: list[float]) -> None:
        self._waits = waits

    def sleep(self, seconds: float) -> None:
        self._waits.append(float(seconds))

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


@dataclass
class FaultLayer:
    """The rules in force and every call seen (see the module docstring)."""

    rules: list[Rule] = field(default_factory=list)
    attempts: list[Attempt] = field(default_factory=list)
    waits: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ rules

    def inject(
        self,
        service: str,
        kind: str,
        *,
        operations: Iterable[str] | None = None,
        callers: Iterable[str] | None = None,
        times: int | None = 1,
        after: int = 0,
        probability: float = 1.0,
        seed: int = 0,
    ) -> Rule:
        """Fail ``service``'s calls (of ``operations``, by ``callers``) with ``kind``, within the budget."""
        rule = Rule(
            service,
            kind,
            frozenset(operations) if operations is not None else None,
            frozenset(callers) if callers is not None else None,
            times,
            after,
            probability,
            seed,
        )
        with self._lock:
            self.rules.append(rule)
        return rule

    def clear(self) -> None:
        """Drop every rule and forget every call."""
        with self._lock:
            self.rules.clear()
            self.attempts.clear()
            self.waits.clear()

    # ------------------------------------------------------------------ what happened

    def calls(
        self, service: str, operation: str | None = None, *, caller: str | None = None, faulted: bool | None = None
    ) -> list[Attempt]:
        """The recorded calls of ``service`` (and ``operation``, ``caller``; ``faulted`` True/False filters)."""
        with self._lock:
            seen = list(self.attempts)
        return [
            a
            for a in seen
            if a.service == service
            and (operation is None or a.operation == operation)
            and (caller is None or a.caller == caller)
            and (faulted is None or (a.fault is not None) == faulted)
        ]

    def count(self, service: str, operation: str | None = None, *, caller: str | None = None) -> int:
        return len(self.calls(service, operation, caller=caller))

    # ------------------------------------------------------------------ the decision

    def _decide(self, service: str, operation: str) -> str | None:
        caller = CURRENT_HANDLER.get()
        with self._lock:
            fault = next(
                (r.kind for r in self.rules if r.matches(service, operation, caller) and r.fire()),
                None,
            )
            self.attempts.append(Attempt(service, operation, caller, fault))
        return fault

    # ------------------------------------------------------------------ installation

    @contextmanager
    def installed(self) -> Iterator[FaultLayer]:
        """Put the layer under every moto-served call and the Bedrock stub, and make retry waits instant."""
        layer = self
        answer_moto = BotocoreStubber.__call__

        def serve(stubber: BotocoreStubber, event_name: str, request: Any, **kwargs: Any) -> Any:
            # What AWS does while serving the request (EventBridge invoking a rule's target, SNS
            # delivering to a queue) is not the calling handler's call: no handler is current.
            serving = CURRENT_HANDLER.set(None)
            try:
                return answer_moto(stubber, event_name, request, **kwargs)
            finally:
                CURRENT_HANDLER.reset(serving)

        def before_send(stubber: BotocoreStubber, event_name: str, request: Any, **kwargs: Any) -> Any:
            if not stubber.enabled:
                return answer_moto(stubber, event_name, request, **kwargs)
            _, service, operation = ([*event_name.split("."), "", ""])[:3]
            fault = layer._decide(service, operation)
            if fault is None:
                return serve(stubber, event_name, request, **kwargs)
            if fault == CONNECT_TIMEOUT:
                raise ConnectTimeoutError(endpoint_url=request.url)
            if fault == READ_TIMEOUT:
                serve(stubber, event_name, request, **kwargs)  # applied; the answer is lost
                raise ReadTimeoutError(endpoint_url=request.url)
            return error_response(service, fault, request.url)

        respond, respond_stream = BedrockStub.respond, BedrockStub.respond_stream

        def bedrock(operation: str, answer: Callable[[], Any]) -> Any:
            fault = layer._decide("bedrock-runtime", operation)
            if fault is None:
                return answer()
            url = "https://bedrock-runtime.amazonaws.com"
            if fault == CONNECT_TIMEOUT:
                raise ConnectTimeoutError(endpoint_url=url)
            if fault == READ_TIMEOUT:
                answer()
                raise ReadTimeoutError(endpoint_url=url)
            raise client_error("bedrock-runtime", fault, operation)

        def converse(stub: BedrockStub, request: dict[str, Any]) -> dict[str, Any]:
            result: dict[str, Any] = bedrock("Converse", lambda: respond(stub, request))
            return result

        def converse_stream(stub: BedrockStub, client: Any, request: dict[str, Any]) -> dict[str, Any]:
            result: dict[str, Any] = bedrock("ConverseStream", lambda: respond_stream(stub, client, request))
            return result

        sleepless = _Sleepless(self.waits)
        with (
            mock.patch.object(BotocoreStubber, "__call__", before_send),
            mock.patch.object(BedrockStub, "respond", converse),
            mock.patch.object(BedrockStub, "respond_stream", converse_stream),
            mock.patch.object(botocore.endpoint, "time", sleepless),
            mock.patch.object(shared_retry, "time", sleepless),
        ):
            yield self


def error_response(service: str, kind: str, url: str) -> AWSResponse:
    """The HTTP answer ``service`` gives for a throttle or a 5xx, in its protocol, for botocore to parse."""
    errors = ERRORS[service]
    code, status = errors.throttle if kind == THROTTLE else errors.server_error
    message = f"injected {kind} ({code})"
    headers: dict[str, str] = {"x-amzn-RequestId": "fault-layer"}
    if errors.protocol == "json":
        body = json.dumps({"__type": code, "message": message})
        headers["Content-Type"] = "application/x-amz-json-1.0"
    elif errors.protocol == "rest-json":
        body = json.dumps({"message": message})
        headers.update({"Content-Type": "application/json", "x-amzn-ErrorType": code})
    elif errors.protocol == "query":
        body = (
            f"<ErrorResponse><Error><Type>{'Sender' if status < 500 else 'Receiver'}</Type><Code>{code}</Code>"
            f"<Message>{message}</Message></Error><RequestId>fault-layer</RequestId></ErrorResponse>"
        )
        headers["Content-Type"] = "text/xml"
    else:
        body = f"<Error><Code>{code}</Code><Message>{message}</Message><RequestId>fault-layer</RequestId></Error>"
        headers["Content-Type"] = "application/xml"
    return AWSResponse(url, status, headers, MockRawResponse(body))


def client_error(service: str, kind: str, operation: str) -> ClientError:
    """The ClientError botocore raises for ``service``'s throttle or 5xx."""
    errors = ERRORS[service]
    code, status = errors.throttle if kind == THROTTLE else errors.server_error
    return ClientError(
        {
            "Error": {"Code": code, "Message": f"injected {kind} ({code})"},
            "ResponseMetadata": {"HTTPStatusCode": status, "RequestId": "fault-layer"},
        },
        operation,
    )
