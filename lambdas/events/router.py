"""Stream router: the sessions table's stream -> summaries, bus, handoff topic, analytics, audit.

Trigger: the table stream (event source mapping with ReportBatchItemFailures). Routing rules are
in :mod:`lambdas.events.routing`; the batched writers in :mod:`lambdas.events.delivery`.

How a batch is processed, and why the response is assembled here:

1. Powertools ``BatchProcessor(EventType.DynamoDBStreams)`` runs ``record_handler`` on each record
   (as ``DynamoDBRecord`` data classes). The handler only *classifies*: cheap, no AWS call, and it
   raises only for a malformed (poison) record, which Powertools then reports alone.
2. After the loop the outgoing entries of all good records are flushed together: ONE Firehose
   PutRecordBatch per 500 records / 4 MiB, PutEvents and SNS PublishBatch in chunks of 10, one
   async Invoke per summary trigger (every N-th turn only), and the audit lines the same way as
   analytics, to the audit trail's own delivery stream (into the Object Lock bucket). The
   analytics and audit lines are packed several to a Firehose record, which Firehose bills at
   5 KB at least (:mod:`lambdas.events.delivery`). Where the stage has a search collection
   (``SEARCH_STREAM_NAME`` set), the analytics lines also go, in one more PutRecordBatch, one
   line a record (a document each), to its delivery stream. Each writer retries only the
   entries the service reported failed, bounded and jittered.
3. A record whose entries finally failed is added to the processor's ``batchItemFailures``.
   Calling the services per record inside the handler would keep Powertools' response as is,
   but would cost one call per record per service (195 calls instead of 12 for a 100-record
   batch, see docs/performance.md). The response keeps Powertools' shape: ``{"batchItemFailures": [{"itemIdentifier":
   <SequenceNumber>}]}``, in stream order.

Idempotency: every entry carries ``event_id`` (the stream eventID) and summaries are
conditional writes; a replayed batch therefore changes nothing that is keyed. Firehose delivers
at least once, so a replay can repeat analytics and audit lines: they carry the same
``event_id`` (and the record's sequence number), and readers de-duplicate on it.
Every change is also logged: one structured JSON line per batch (``stream changes``, key
``audit``: the audit records the audit stream got, in stream order, at most
:data:`AUDIT_LOG_RECORDS` to a line), which says each change once without repeating a line's
fixed fields per change.

Analytics lines carry a customer's pseudonym, never the id: HMAC-SHA256 under the stage's
pseudonym key, the secret ``PSEUDONYM_SECRET_ARN`` names, read once per container.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from lambdas.events.delivery import (
    AsyncInvoker,
    Backoff,
    Entry,
    EventBusWriter,
    FirehoseWriter,
    TopicWriter,
)
from lambdas.events.routing import Actions, Pseudonymise, classify
from lambdas.shared import aws, env, pseudonyms
from lambdas.shared.logs import masked_formatter
from lambdas.shared.pseudonyms import Pseudonymiser
from lambdas.shared.settings import optional_resource, resource
from lambdas.shared.settings import settings as stage_settings
from lambdas.shared.tracing import tracer

logger = Logger(logger_formatter=masked_formatter())

#: Audit records per ``stream changes`` log line: about 500 bytes each, well under CloudWatch
#: Logs' 256 KB event size.
AUDIT_LOG_RECORDS = 100

#: The variable naming the stage's pseudonym secret (``stacks/pseudonyms.py``).
PSEUDONYM_KEY_VARIABLE = "PSEUDONYM_SECRET_ARN"


@dataclass(frozen=True)
class Settings:
    bus_name: str
    handoff_topic_arn: str
    analytics_stream: str
    audit_stream: str
    summary_function: str
    summary_interval: int
    # The search collection's delivery stream; None where the stage has none.
    search_stream: str | None = None


@env.once
def settings() -> Settings:
    return Settings(
        bus_name=resource("EVENT_BUS_NAME"),
        handoff_topic_arn=resource("HANDOFF_TOPIC_ARN"),
        analytics_stream=resource("ANALYTICS_STREAM_NAME"),
        audit_stream=resource("AUDIT_STREAM_NAME"),
        summary_function=resource("SUMMARY_FUNCTION_NAME"),
        summary_interval=stage_settings().summary_interval,
        search_stream=optional_resource("SEARCH_STREAM_NAME"),
    )


@dataclass
class Sinks:
    """The writers one invocation flushes into."""

    analytics: FirehoseWriter
    audit: FirehoseWriter
    bus: EventBusWriter
    topic: TopicWriter
    summaries: AsyncInvoker
    search: FirehoseWriter | None = None

    @classmethod
    def from_clients(cls, s: Settings, client: Callable[[str], Any], backoff: Backoff | None = None) -> Sinks:
        b = backoff or Backoff()
        firehose = client("firehose")
        return cls(
            analytics=FirehoseWriter(firehose, s.analytics_stream, b, pack=True),
            audit=FirehoseWriter(firehose, s.audit_stream, b, pack=True),
            bus=EventBusWriter(client("events"), b),
            topic=TopicWriter(client("sns"), s.handoff_topic_arn, b),
            summaries=AsyncInvoker(client("lambda"), s.summary_function, b),
            search=FirehoseWriter(firehose, s.search_stream, b) if s.search_stream else None,
        )


@env.once
def sinks() -> Sinks:
    """The writers on single-attempt clients: the writers' shared retry policy alone retries them."""
    return Sinks.from_clients(
        settings(),
        lambda service: aws.client(service, single_attempt=True, connect_timeout=5, read_timeout=10),
    )


@env.once
def pseudonymiser() -> Pseudonymiser:
    """The stage's customer pseudonyms, keyed with its secret (read once per container)."""
    return pseudonyms.from_secret(aws.client("secretsmanager"), resource(PSEUDONYM_KEY_VARIABLE))


@dataclass
class RouterBatch:
    """Classifies the records of one batch, then flushes their entries together."""

    summary_interval: int
    bus_name: str
    pseudonymise: Pseudonymise | None = None
    routed: list[Actions] = field(default_factory=list)

    def record_handler(self, record: DynamoDBRecord) -> str:
        actions = classify(
            record, summary_interval=self.summary_interval, bus_name=self.bus_name, pseudonymise=self.pseudonymise
        )
        self.routed.append(actions)
        return actions.change.sequence_number

    def log_changes(self) -> None:
        """The batch's audit records as ``stream changes`` log lines, :data:`AUDIT_LOG_RECORDS` at most to a line."""
        for start in range(0, len(self.routed), AUDIT_LOG_RECORDS):
            chunk = self.routed[start : start + AUDIT_LOG_RECORDS]
            logger.info("stream changes", extra={"audit": [a.audit for a in chunk]})

    def flush(self, out: Sinks) -> set[str]:
        """Send everything; the sequence numbers of records with a finally failed entry."""
        if not self.routed:
            return set()
        failed: set[str] = set()
        analytics = [Entry(a.change.sequence_number, a.analytics, 0) for a in self.routed]
        failed |= out.analytics.write(analytics)
        if out.search is not None:
            failed |= out.search.write(analytics)
        failed |= out.audit.write([Entry(a.change.sequence_number, a.audit, 0) for a in self.routed])
        failed |= out.bus.write([Entry(a.change.sequence_number, a.bus_event, 0) for a in self.routed if a.bus_event])
        failed |= out.topic.write([Entry(a.change.sequence_number, a.handoff, 0) for a in self.routed if a.handoff])
        failed |= out.summaries.write([Entry(a.change.sequence_number, a.summary, 0) for a in self.routed if a.summary])
        return failed


def route(
    event: dict[str, Any],
    context: LambdaContext | None,
    *,
    cfg: Settings,
    out: Sinks,
    pseudonymise: Pseudonymise | None = None,
) -> dict[str, Any]:
    """Process one stream batch; returns the partial batch response (analytics pseudonymised by ``pseudonymise``)."""
    batch = RouterBatch(summary_interval=cfg.summary_interval, bus_name=cfg.bus_name, pseudonymise=pseudonymise)
    processor = BatchProcessor(event_type=EventType.DynamoDBStreams, raise_on_entire_batch_failure=False)
    response = process_partial_response(
        event=event, record_handler=batch.record_handler, processor=processor, context=context
    )
    failed = {f["itemIdentifier"] for f in response.get("batchItemFailures", [])}
    batch.log_changes()
    delivery_failed = batch.flush(out)
    if delivery_failed:
        logger.warning("downstream delivery failed", extra={"sequence_numbers": sorted(delivery_failed)})
    failed |= delivery_failed
    order = [str(r.get("dynamodb", {}).get("SequenceNumber")) for r in event.get("Records", [])]
    return {"batchItemFailures": [{"itemIdentifier": seq} for seq in order if seq in failed]}


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return route(event, context, cfg=settings(), out=sinks(), pseudonymise=pseudonymiser())
