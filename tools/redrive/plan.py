"""Where a DLQ's messages go, and what a dry run shows of it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from tools.redrive.aws import Aws
from tools.redrive.queues import Consumer, Kind, Message, Queue, Refused

#: How long a sampled message would stay hidden if making it visible again failed.
PEEK_VISIBILITY_SECONDS: Final = 30
BODY_PREVIEW: Final = 200

ADVICE: Final[Mapping[Kind, str]] = {
    Kind.STREAM_FAILURE: (
        "These are failure records of a stream consumer (an event source mapping's on-failure destination): "
        "each names a shard and a range of sequence numbers the function gave up on (DDBStreamBatchInfo), "
        "not the stream records themselves, so there is nothing to send back to a queue. Instead read that "
        "range from the stream while it still holds it (a DynamoDB stream keeps records for 24 hours), fix "
        "the cause, have the function process those records again, then delete the failure record."
    ),
    Kind.INVOCATION_RECORD: (
        "These are Lambda's records of asynchronous invocations that failed after their retries: "
        "requestContext.functionArn names the function and requestPayload holds its event. Once the cause is "
        "fixed, invoke that function again with the requestPayload (aws lambda invoke --invocation-type Event), "
        "then delete the record."
    ),
    Kind.EVENTBRIDGE: (
        "These are what an EventBridge rule or schedule could not deliver to its target after its retries: the "
        "body is the event (or the schedule's input); the RULE_ARN or SCHEDULE_ARN, TARGET_ARN and "
        "ERROR_CODE attributes say where it was going and why it failed. Once the cause is fixed, start that "
        "target again with the body as its input, then delete the message."
    ),
}
#: Kinds --to never moves: they describe a failure, they are not the failed message.
NOT_MOVABLE: Final = frozenset({Kind.STREAM_FAILURE, Kind.INVOCATION_RECORD})


def choose_destination(
    dlq: Queue,
    sources: Sequence[Queue],
    to: Queue | None,
    consumers: Sequence[Consumer],
    kinds: Iterable[Kind],
) -> Queue:
    """Where the DLQ's messages go: its one source queue, or the ``--to`` queue when that is allowed.

    Refused, with what to do instead, for several sources and no ``--to``; a ``--to`` that is not
    one of the sources; a DLQ no SQS queue feeds, unless ``--to`` names a queue (never for a stream
    consumer's DLQ: failure records are not messages); and a FIFO/standard mismatch.
    """
    names = ", ".join(source.name for source in sources)
    if to is not None and to.arn == dlq.arn:
        raise Refused(f"--to names the dead-letter queue itself ({dlq.name})")
    if consumers:
        mappings = "; ".join(f"{c.function} reading {c.source_arn}" for c in consumers)
        raise Refused(
            f"{dlq.name} is the on-failure destination of {mappings}. {ADVICE[Kind.STREAM_FAILURE]}"
            + (" --to cannot help: a failure record moved to a queue is still no stream record." if to else "")
        )
    if to is not None:
        if sources and to.arn not in {source.arn for source in sources}:
            raise Refused(f"--to {to.name} is not a source of {dlq.name}; its sources are: {names}")
        destination = to
    elif len(sources) == 1:
        destination = sources[0]
    elif sources:
        raise Refused(
            f"{dlq.name} is the dead-letter queue of {len(sources)} queues: {names}. Its messages do not say "
            "which one they came from; give --to with the one to move them all to"
        )
    else:
        raise Refused(_no_source(dlq, set(kinds)))
    if destination.fifo != dlq.fifo:
        kind = "a FIFO queue" if destination.fifo else "a standard queue"
        raise Refused(
            f"{destination.name} is {kind} and {dlq.name} is not: messages keep their order and group only FIFO to FIFO"
        )
    return destination


def _no_source(dlq: Queue, kinds: set[Kind]) -> str:
    lines = [f"{dlq.name} has no source queue: no SQS queue's redrive policy names it."]
    lines += [ADVICE[kind] for kind in (Kind.STREAM_FAILURE, Kind.INVOCATION_RECORD, Kind.EVENTBRIDGE) if kind in kinds]
    if sns := [sender for sender in dlq.senders if sender.startswith("SNS")]:
        lines.append(f"Its queue policy lets {', '.join(sns)} send to it: it is an SNS subscription's DLQ.")
    if not kinds:
        lines.append("A dry run (without --apply) shows what its messages are and what to do with them.")
    if not kinds or kinds - NOT_MOVABLE:
        lines.append(
            "To move its messages to a queue of your choice, give --to QUEUE (failure records stay where they are)."
        )
    return "\n".join(lines)


def use_task(
    dlq: Queue, sources: Sequence[Queue], destination: Queue, *, method: str, limit: int | None
) -> tuple[bool, str]:
    """Whether to move with SQS's message move task, and why (or why not)."""
    if method == "manual":
        return False, "moving by hand (--method manual)"
    reasons = []
    if dlq.fifo:
        reasons.append("SQS's message move task has not supported FIFO queues")
    if limit is not None:
        reasons.append("--max bounds the move, which a message move task cannot")
    if destination.arn not in {source.arn for source in sources}:
        reasons.append("a message move task only redrives a DLQ of SQS queues")
    if method == "task" and reasons:
        raise Refused(f"--method task: {'; '.join(reasons)}")
    if reasons:
        return False, f"moving by hand: {'; '.join(reasons)}"
    return True, "with an SQS message move task"


# --- Dry run ------------------------------------------------------------------------------------


def show_queue(dlq: Queue, sources: Sequence[Queue], consumers: Sequence[Consumer], aws: Aws) -> None:
    kind = "FIFO" if dlq.fifo else "standard"
    print(f"Dead-letter queue {dlq.name} ({kind}, {aws.region})")
    print(f"  {dlq.url}")
    print(f"  {dlq.waiting} waiting, {dlq.in_flight} in flight, {dlq.delayed} delayed (approximate)")
    for source in sources:
        print(f"  source: {source.name} (moves a message here after {source.max_receive_count} receives)")
    for consumer in consumers:
        print(f"  failure records of: {consumer.function} reading {consumer.source_arn}")
    for sender in dlq.senders:
        print(f"  its policy lets send: {sender}")
    if not sources and not consumers and aws.consumers_unknown:
        print(f"  (could not list Lambda event source mappings: {aws.consumers_unknown})")
    if dlq.dead_letter_target:
        print(
            f"  warning: this queue has a dead-letter queue of its own ({dlq.dead_letter_target.rsplit(':', 1)[-1]}): "
            f"after {dlq.max_receive_count} receives, peeking or a failed move sends a message on to it"
        )


def peek(aws: Aws, dlq: Queue, count: int) -> list[Message]:
    """Up to ``count`` messages, made visible again at once; nothing else about them changes."""
    if count == 0:
        return []
    sample = aws.receive(dlq, count, visibility=PEEK_VISIBILITY_SECONDS)
    hidden = aws.release(dlq, {message.id: message.receipt for message in sample})
    print(f"\nSample: {len(sample)} message(s), visible again at once (peeking counts as one receive of each):")
    for n, message in enumerate(sample, 1):
        names = ", ".join(sorted(message.message_attributes)) or "none"
        group = f", group {message.group}" if message.group else ""
        print(f"  {n}. {message.id}: received {message.receive_count} time(s){group}, attributes: {names}")
        if message.kind is not Kind.MESSAGE:
            print(f"     a {message.kind.value}")
        preview = message.body[:BODY_PREVIEW].replace("\n", " ")
        print(f"     {preview}{' ...' if len(message.body) > BODY_PREVIEW else ''}")
    if hidden:
        print(f"  could not make {', '.join(hidden)} visible again: hidden for up to {PEEK_VISIBILITY_SECONDS} s")
    return sample
