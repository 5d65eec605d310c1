"""The one retry policy of the functions: bounded, jittered retries, where botocore cannot retry.

botocore retries a whole call that fails (standard mode, set on every client by
:mod:`lambdas.shared.aws`). What it cannot retry is a partial failure reported inside a
successful answer: BatchWriteItem ``UnprocessedItems``, PutRecordBatch ``FailedPutCount``,
PutEvents ``FailedEntryCount``, PublishBatch ``Failed``. :func:`send_with_retries` resends only
those entries. A caller that needs a bound botocore does not have (a wall-clock deadline, a
typed outcome per attempt) uses :func:`call_with_retries`.

A client used under this policy makes one attempt per call (``aws.client(...,
single_attempt=True)``), so the two layers never multiply: a chunk that stays throttled costs
exactly ``Backoff.attempts`` calls (4 by default), not botocore's 3 times ours.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

from botocore.exceptions import BotoCoreError, ClientError

T = TypeVar("T")
P = TypeVar("P")

DEFAULT_ATTEMPTS: Final = 4

_RETRYABLE_CODES: Final = frozenset(
    {
        "ThrottlingException",
        "Throttling",
        "ThrottledException",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "RequestLimitExceeded",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "InternalFailure",
        "InternalError",
        "InternalException",
        "InternalServerError",
        "RequestTimeout",
        "RequestTimeoutException",
        "SlowDown",
        "KMSThrottlingException",
    }
)

_system_random = random.SystemRandom()


@dataclass(frozen=True)
class Backoff:
    """Bounded retries: at most ``attempts`` calls; before call n+1 wait rand() * min(cap, base * 2**n).

    ``sleep`` defaults to ``time.sleep`` looked up when waiting (so a test may patch it), ``rand``
    to a system random in [0, 1): full jitter.
    """

    attempts: int = DEFAULT_ATTEMPTS
    base_seconds: float = 0.05
    cap_seconds: float = 1.0
    sleep: Callable[[float], None] | None = None
    rand: Callable[[], float] = _system_random.random

    def __post_init__(self) -> None:
        if isinstance(self.attempts, bool) or not isinstance(self.attempts, int) or not 1 <= self.attempts <= 10:
            raise ValueError(f"attempts must be 1..10 (given {self.attempts!r})")
        if self.base_seconds < 0 or self.cap_seconds < self.base_seconds:
            raise ValueError(f"need 0 <= base <= cap (given {self.base_seconds}, {self.cap_seconds})")

    def delay(self, retry: int) -> float:
        """The jittered wait before retry ``retry`` (from 0)."""
        return float(self.rand() * min(self.cap_seconds, self.base_seconds * 2**retry))

    def wait(self, seconds: float) -> None:
        (self.sleep or time.sleep)(seconds)


@dataclass(frozen=True)
class Entry(Generic[T]):
    """One outgoing item: the request entry and the owner it is reported under (e.g. a record id)."""

    owner: str
    payload: T
    size: int


def error_code(error: Exception) -> str:
    """The AWS error code of a ClientError ('' for anything else)."""
    if isinstance(error, ClientError):
        return str(error.response.get("Error", {}).get("Code", ""))
    return ""


def is_retryable(error: Exception) -> bool:
    """True for errors a later call may not hit: throttling, 5xx, timeouts, connection errors."""
    if isinstance(error, BotoCoreError):
        return True
    if isinstance(error, ClientError):
        code = error_code(error)
        status = int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        return code in _RETRYABLE_CODES or status >= 500 or status == 429 or "Throttl" in code
    return False


def send_with_retries(
    chunk: Sequence[Entry[P]],
    send: Callable[[list[P]], list[bool]],
    backoff: Backoff,
) -> list[Entry[P]]:
    """Send a chunk; resend only the entries reported failed; return those still failed at the end.

    ``send`` makes ONE call with the given payloads and returns one ok-flag per payload, in order.
    A whole call failing with a retryable error counts as every entry failed; any other error
    fails the chunk at once.
    """
    pending = list(chunk)
    for attempt in range(backoff.attempts):
        try:
            flags = send([e.payload for e in pending])
        except (ClientError, BotoCoreError) as err:
            if not is_retryable(err):
                return pending
            flags = [False] * len(pending)
        pending = [entry for entry, ok in zip(pending, flags, strict=True) if not ok]
        if not pending:
            return []
        if attempt + 1 < backoff.attempts:
            backoff.wait(backoff.delay(attempt))
    return pending


def call_with_retries(
    call: Callable[[], T],
    backoff: Backoff,
    *,
    retryable: Callable[[Exception], bool] = is_retryable,
    deadline_seconds: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """The result of ``call``, retrying what ``retryable`` accepts; the last error when out of tries.

    No retry starts when its wait would end past ``deadline_seconds`` after the first call.
    """
    started = clock()
    attempt = 0
    while True:
        try:
            return call()
        except Exception as err:
            if not retryable(err):
                raise
            delay = backoff.delay(attempt)
            late = deadline_seconds is not None and clock() - started + delay > deadline_seconds
            if attempt + 1 >= backoff.attempts or late:
                raise
            backoff.wait(delay)
            attempt += 1
