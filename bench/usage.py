"""What one design consumed over the measured chat turns: the quantities the cost model prices.

bench/meter.py fills a :class:`Usage` by counting what the code did on the embedded stage;
bench/cost.py multiplies it by bench/prices.py. The billing rules of each service (units, rounding,
minimum sizes) are the small functions here, so the unit tests check them without AWS.

Lambda duration is the one figure that is modelled rather than counted: moto answers in
microseconds and this machine's core is not a Lambda's slice of one. Each invocation's duration is

* its compute: the CPU time the handler used here, without moto's side of each call and without
  creating boto3 clients (a warm container has them), scaled to the function's share of a vCPU
  (Lambda gives 1,769 MB one vCPU, less memory a proportional slice), plus
* its waits: an assumed latency for each AWS call it made (:data:`CALL_LATENCY`) and, for a
  model call, an assumed time to the first token plus the output tokens at an assumed rate.

Cold starts (billed INIT) are left out: how often they happen depends on the traffic, not on
the turn.

Firehose's S3 objects are modelled too: the embedded stage writes an object for every put, while
Firehose buffers a stream's records and writes one object when its buffering interval has passed
since the first of them or its buffering size is reached (:func:`firehose_objects`). What runs
once per object (the audit trail's locker) is priced per object Firehose would have written.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Final

KB: Final = 1024
#: Lambda gives a function one full vCPU at this memory size, a proportional share below it.
FULL_VCPU_MB: Final = 1769
#: Characters per token: the app's own budget rule (lambdas/shared/responder.py, CHARS_PER_TOKEN).
CHARS_PER_TOKEN: Final = 4

#: Assumed latency of one call from a Lambda in the same region (p50, warm connection), seconds.
#: Assumptions, not measurements: they only matter for the Lambda duration line, and the same
#: values apply to both designs.
CALL_LATENCY: Final[dict[str, float]] = {
    "dynamodb.GetItem": 0.005,
    "dynamodb.PutItem": 0.007,
    "dynamodb.UpdateItem": 0.007,
    "dynamodb.DeleteItem": 0.007,
    "dynamodb.Query": 0.008,
    "dynamodb.BatchWriteItem": 0.015,
    "dynamodb.TransactWriteItems": 0.015,
    "firehose.PutRecord": 0.015,
    "firehose.PutRecordBatch": 0.025,
    "events.PutEvents": 0.025,
    "sns.Publish": 0.020,
    "sns.PublishBatch": 0.025,
    "lambda.Invoke": 0.020,
    "apigatewaymanagementapi.PostToConnection": 0.020,
}
DEFAULT_CALL_LATENCY: Final = 0.010
#: Assumed Claude 3 Haiku on Bedrock: time to the first token and output tokens per second.
MODEL_FIRST_TOKEN_SECONDS: Final = 0.6
MODEL_TOKENS_PER_SECOND: Final = 120.0


def chunks(size_bytes: int, chunk_bytes: int) -> int:
    """How many ``chunk_bytes`` units a payload bills as (at least one)."""
    return max(1, math.ceil(size_bytes / chunk_bytes))


def write_units(size_bytes: int, *, transactional: bool = False) -> int:
    """DynamoDB write request units for writing one item of ``size_bytes``: 1 per started KB."""
    return chunks(size_bytes, KB) * (2 if transactional else 1)


def read_units(size_bytes: int, *, consistent: bool, transactional: bool = False) -> float:
    """DynamoDB read request units for ``size_bytes`` read: 1 per started 4 KB, half when eventually consistent."""
    units = float(chunks(size_bytes, 4 * KB))
    if transactional:
        return units * 2
    return units if consistent else units / 2


def firehose_billed_bytes(record_bytes: int) -> int:
    """Firehose bills each record rounded up to the next 5 KB."""
    return chunks(record_bytes, 5 * KB) * 5 * KB


@dataclass(frozen=True)
class FirehosePut:
    """One put to a delivery stream: when (the stage's clock, seconds) and how many bytes of records."""

    stream: str
    at: float
    size_bytes: int


def firehose_objects(puts: list[FirehosePut], *, interval_seconds: float, size_bytes: int) -> int:
    """How many S3 objects Firehose writes for ``puts`` to one stream, buffering as configured.

    A buffer opens with the first record that finds none open and is written out when
    ``interval_seconds`` have passed since then or when it holds ``size_bytes``, whichever comes
    first (Firehose's buffering hints; a put arriving after the interval opens the next buffer).
    """
    if interval_seconds < 0 or size_bytes < 1:
        raise ValueError(f"need interval_seconds >= 0 and size_bytes >= 1 (given {interval_seconds}, {size_bytes})")
    objects, opened, held = 0, None, 0
    for put in sorted(puts, key=lambda p: p.at):
        if opened is None or put.at >= opened + interval_seconds:
            objects, opened, held = objects + 1, put.at, 0
        held += put.size_bytes
        if held >= size_bytes:
            opened = None
    return objects


def tokens(chars: int) -> int:
    """Tokens of ``chars`` characters of text, by the app's own rule (an estimate: no tokenizer here)."""
    return math.ceil(chars / CHARS_PER_TOKEN) if chars > 0 else 0


def model_seconds(output_tokens: int) -> float:
    """How long a function waits for one model answer of ``output_tokens`` (assumed rates)."""
    return MODEL_FIRST_TOKEN_SECONDS + output_tokens / MODEL_TOKENS_PER_SECOND


def lambda_compute_seconds(local_cpu_seconds: float, memory_mb: int) -> float:
    """CPU seconds measured here as a Lambda of ``memory_mb`` spends them (its share of a vCPU)."""
    return local_cpu_seconds * max(1.0, FULL_VCPU_MB / memory_mb)


def billed_ms(seconds: float) -> int:
    """Lambda bills duration in whole milliseconds, rounded up."""
    return max(1, math.ceil(seconds * 1000 - 1e-9))


def gb_seconds(memory_mb: int, milliseconds: int) -> float:
    return memory_mb / 1024 * milliseconds / 1000


@dataclass
class Invocation:
    """One Lambda invocation during the measured turns."""

    handler: str
    memory_mb: int
    #: CPU seconds used here by the handler (see the module docstring for what is left out).
    local_cpu: float
    #: Seconds the handler waited on AWS calls and the model (assumed latencies).
    waiting: float = 0.0
    log_bytes: int = 0

    @property
    def seconds(self) -> float:
        return lambda_compute_seconds(self.local_cpu, self.memory_mb) + self.waiting

    @property
    def billed_gb_seconds(self) -> float:
        return gb_seconds(self.memory_mb, billed_ms(self.seconds))


@dataclass
class Usage:
    """The quantities one design consumed over ``turns`` chat turns (customer message + reply)."""

    design: str
    model_id: str = ""
    turns: int = 0
    invocations: list[Invocation] = field(default_factory=list)
    #: AWS API calls the functions made, by ``service.Operation``.
    calls: Counter[str] = field(default_factory=Counter)
    read_units: float = 0.0
    #: Table writes and index (GSI) writes, in write request units.
    write_units: float = 0.0
    index_write_units: float = 0.0
    firehose_records: int = 0
    firehose_billed_bytes: int = 0
    #: EventBridge events (64 KB chunks) and their bytes (what the bus archives).
    events: int = 0
    event_bytes: int = 0
    sns_requests: int = 0
    sqs_requests: int = 0
    #: WebSocket messages both ways (32 KB increments) and the seconds the connections were open.
    ws_messages: int = 0
    connection_seconds: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    #: Model calls by the handler that made them.
    model_calls: Counter[str] = field(default_factory=Counter)
    #: Every put to a delivery stream, for :func:`firehose_objects`.
    firehose_puts: list[FirehosePut] = field(default_factory=list)

    def invocations_by_handler(self) -> Counter[str]:
        return Counter(i.handler for i in self.invocations)

    @property
    def log_bytes(self) -> int:
        return sum(i.log_bytes for i in self.invocations)

    def reprice_per_object(self, handler: str, objects: int) -> None:
        """Make ``handler``, which runs once per S3 object, run ``objects`` times at its measured average.

        The embedded stage invoked it once per object it wrote (one per put); Firehose writes fewer
        (see the module docstring). Each kept invocation is the mean of the measured ones.
        """
        measured = [i for i in self.invocations if i.handler == handler]
        if not measured or objects == len(measured):
            return
        n = len(measured)
        mean = Invocation(
            handler,
            measured[0].memory_mb,
            sum(i.local_cpu for i in measured) / n,
            sum(i.waiting for i in measured) / n,
            round(sum(i.log_bytes for i in measured) / n),
        )
        self.invocations = [i for i in self.invocations if i.handler != handler] + [mean] * objects
