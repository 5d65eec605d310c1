"""Moving a DLQ's messages: by hand (receive, send, delete), or with SQS's own message move task."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final

from botocore.exceptions import BotoCoreError, ClientError

from lambdas.events.delivery import chunked
from lambdas.shared.retry import Backoff, Entry, call_with_retries, error_code, send_with_retries
from tools.redrive.aws import NO_MOVE_TASKS, Aws, NoMoveTasks, describe
from tools.redrive.plan import NOT_MOVABLE
from tools.redrive.queues import BATCH, Message, Queue, Refused

#: SendMessageBatch's limit on one request: every body and attribute together.
BATCH_BYTES: Final = 262_144
#: How long a message taken for moving stays hidden while it moves (a batch takes seconds).
MOVE_VISIBILITY_SECONDS: Final = 120


@dataclass
class MoveReport:
    """What a move did to each message it took from the DLQ."""

    moved: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # left in the DLQ: id -> why
    not_deleted: dict[str, str] = field(default_factory=dict)  # in the destination AND still in the DLQ
    left: dict[str, str] = field(default_factory=dict)  # not attempted, left in the DLQ: id -> why
    stopped: str | None = None  # why the move ended before the DLQ was empty or the bound reached

    @property
    def taken(self) -> int:
        return len(self.moved) + len(self.failed) + len(self.left) + len(self.not_deleted)

    @property
    def complete(self) -> bool:
        return not (self.failed or self.not_deleted or self.left or self.stopped)


@dataclass
class ManualMove:
    """Moves messages from ``dlq`` to ``destination`` by receive, send, then delete, at most ``limit``."""

    aws: Aws
    dlq: Queue
    destination: Queue
    limit: int | None = None
    rate: int | None = None
    skip_records: bool = False
    backoff: Backoff = field(default_factory=Backoff)
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    report: MoveReport = field(default_factory=MoveReport)
    _held: dict[str, str] = field(default_factory=dict)  # id -> receipt: left in the DLQ, released at the end
    _blocked_groups: dict[str, str] = field(default_factory=dict)  # FIFO group -> the message that failed

    def run(self) -> MoveReport:
        started = self.clock()
        try:
            while self.limit is None or self.report.taken < self.limit:
                if self.rate:  # pace before receiving, so no message waits hidden for its turn
                    ahead = len(self.report.moved) / self.rate - (self.clock() - started)
                    if ahead > 0:
                        self.sleep(ahead)
                want = BATCH if self.limit is None else min(BATCH, self.limit - self.report.taken)
                received = self.aws.receive(self.dlq, want, visibility=MOVE_VISIBILITY_SECONDS)
                fresh = [m for m in received if m.id not in self._held and m.id not in self.report.not_deleted]
                for message in received:
                    if message.id in self._held or message.id in self.report.not_deleted:
                        self._held[message.id] = message.receipt  # back after its visibility ran out
                if not fresh:
                    break  # empty, or only what this run has already left behind is visible
                self._move(fresh)
        except (ClientError, BotoCoreError) as error:
            self.report.stopped = describe(error)
        finally:
            hidden = self.aws.release(self.dlq, self._held) if self._held else []
            if hidden:
                print(
                    f"warning: {len(hidden)} message(s) left in the DLQ stay hidden up to {MOVE_VISIBILITY_SECONDS} s"
                )
        return self.report

    def _move(self, messages: list[Message]) -> None:
        movable: list[Message] = []
        for message in messages:
            if self.skip_records and message.kind in NOT_MOVABLE:
                self._leave(message, f"a {message.kind.value}, not a message (a dry run says what to do instead)")
            elif message.group is not None and message.group in self._blocked_groups:
                self._leave(message, f"its group {message.group} waits behind {self._blocked_groups[message.group]}")
            else:
                movable.append(message)
        sent = self._send_fifo(movable) if self.destination.fifo else self._send_standard(movable)
        self._delete(sent)

    def _leave(self, message: Message, why: str) -> None:
        self.report.left[message.id] = why
        self._held[message.id] = message.receipt

    def _fail(self, message: Message, why: str) -> None:
        self.report.failed[message.id] = why
        self._held[message.id] = message.receipt
        if message.group is not None:
            self._blocked_groups.setdefault(message.group, message.id)

    def _send_standard(self, messages: list[Message]) -> list[Message]:
        """Send in batches within SQS's size limit; a batch refused whole is retried message by message."""
        by_id = {str(n): message for n, message in enumerate(messages)}
        reasons: dict[str, str] = {}

        send = _batch_call(partial(self.aws.sqs_once.send_message_batch, QueueUrl=self.destination.url), reasons)
        pending = [Entry(key, {"Id": key, **m.outgoing(fifo=False)}, m.size) for key, m in by_id.items()]
        unsent: list[Entry[dict[str, Any]]] = []
        for chunk in chunked(pending, max_count=BATCH, max_bytes=BATCH_BYTES):
            left = send_with_retries(chunk, send, self.backoff)
            if len(left) == len(chunk) > 1:  # refused as a whole (too large, one bad entry): one by one
                left = [e for entry in left for e in send_with_retries([entry], send, self.backoff)]
            unsent += left
        failed = {entry.owner for entry in unsent}
        for key in failed:
            self._fail(by_id[key], f"not sent: {reasons.get(key, 'no answer')}")
        return [message for key, message in by_id.items() if key not in failed]

    def _send_fifo(self, messages: list[Message]) -> list[Message]:
        """Send one at a time in the order received; a failure holds back the rest of its group."""
        sent: list[Message] = []
        for message in messages:
            if message.group is not None and message.group in self._blocked_groups:
                self._leave(message, f"its group {message.group} waits behind {self._blocked_groups[message.group]}")
                continue
            request = {"QueueUrl": self.destination.url, **message.outgoing(fifo=True)}
            try:
                call_with_retries(partial(self.aws.sqs_once.send_message, **request), self.backoff)
            except (ClientError, BotoCoreError) as error:
                self._fail(message, f"not sent: {describe(error)}")
                continue
            sent.append(message)
        return sent

    def _delete(self, sent: list[Message]) -> None:
        """Delete from the DLQ what reached the destination; a delete that fails is reported as a copy."""
        by_id = {str(n): message for n, message in enumerate(sent)}
        reasons: dict[str, str] = {}

        delete = _batch_call(partial(self.aws.sqs_once.delete_message_batch, QueueUrl=self.dlq.url), reasons)
        entries = [Entry(key, {"Id": key, "ReceiptHandle": m.receipt}, 0) for key, m in by_id.items()]
        not_deleted = {entry.owner for entry in send_with_retries(entries, delete, self.backoff)} if entries else set()
        for key, message in by_id.items():
            if key in not_deleted:
                self.report.not_deleted[message.id] = reasons.get(key, "no answer")
            else:
                self.report.moved.append(message.id)


def _batch_call(operation: Callable[..., Any], reasons: dict[str, str]) -> Callable[[list[dict[str, Any]]], list[bool]]:
    """A batch SQS operation (SendMessageBatch, DeleteMessageBatch) as :func:`send_with_retries` calls it.

    It answers which entries went through, and leaves in ``reasons`` why each one that did not
    failed (the entry's failure, or the error that refused the whole batch, which it re-raises).
    """

    def call(entries: list[dict[str, Any]]) -> list[bool]:
        try:
            answer = operation(Entries=entries)
        except (ClientError, BotoCoreError) as error:
            reasons.update({entry["Id"]: describe(error) for entry in entries})
            raise
        for failed in answer.get("Failed", []):
            reasons[failed["Id"]] = f"{failed.get('Code', '?')}: {failed.get('Message', '')}"
        failed_ids = {failed["Id"] for failed in answer.get("Failed", [])}
        return [entry["Id"] not in failed_ids for entry in entries]

    return call


def print_report(report: MoveReport, dlq: Queue, destination: Queue) -> None:
    print(f"\nMoved {len(report.moved)} message(s) from {dlq.name} to {destination.name}.")
    if report.stopped:
        print(f"  stopped early, the rest is still in the DLQ: {report.stopped}")
    for message_id, why in report.failed.items():
        print(f"  not moved, still in the DLQ: {message_id}: {why}")
    for message_id, why in report.left.items():
        print(f"  left in the DLQ: {message_id}: {why}")
    for message_id, why in report.not_deleted.items():
        print(
            f"  moved but NOT deleted from the DLQ, so it is in both queues: {message_id} ({why}); delete it from "
            "the DLQ by hand, or the next redrive sends it again"
        )


def start_task(aws: Aws, dlq: Queue, destination: Queue, rate: int | None) -> int:
    """Start SQS's message move task and report its handle and status; NoMoveTasks where there are none."""
    running = [task for task in aws.move_tasks(dlq) if task.get("Status") == "RUNNING"]
    if running:
        raise Refused(
            f"a message move task is already running on {dlq.name} ({running[0].get('TaskHandle', '?')}): "
            "follow it with --status, or cancel it (aws sqs cancel-message-move-task) before starting another"
        )
    request: dict[str, Any] = {"SourceArn": dlq.arn, "DestinationArn": destination.arn}
    if rate is not None:
        request["MaxNumberOfMessagesPerSecond"] = rate
    try:
        handle = aws.sqs.start_message_move_task(**request)["TaskHandle"]
    except ClientError as error:
        if error_code(error) in NO_MOVE_TASKS:
            raise NoMoveTasks(describe(error)) from error
        print(f"error: the message move task did not start: {describe(error)}", file=sys.stderr)
        return 1
    print(f"\nStarted an SQS message move task to {destination.name}: {handle}")
    try:
        for task in aws.move_tasks(dlq):
            print(f"  {task_line(task)}")
    except (NoMoveTasks, ClientError, BotoCoreError) as error:
        print(f"  (its status is not available yet: {error})")
    print(
        f"It runs on in SQS. Follow it: python -m tools.redrive {dlq.url} --status; "
        f"stop it: aws sqs cancel-message-move-task --task-handle {handle}"
    )
    return 0


def show_move_tasks(aws: Aws, dlq: Queue) -> None:
    """For a dry run: whether --apply could start a move task here (read only)."""
    try:
        running = [task for task in aws.move_tasks(dlq) if task.get("Status") == "RUNNING"]
    except NoMoveTasks as error:
        print(f"No message move task here ({error}): --apply would move by hand.")
        return
    except (ClientError, BotoCoreError) as error:
        print(f"Could not list the DLQ's message move tasks ({describe(error)}).")
        return
    for task in running:
        print(f"A message move task is already running, --apply would be refused: {task_line(task)}")


def task_line(task: Mapping[str, Any]) -> str:
    started = task.get("StartedTimestamp")
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started / 1000)) if started else "?"
    moved, total = task.get("ApproximateNumberOfMessagesMoved", "?"), task.get("ApproximateNumberOfMessagesToMove", "?")
    line = f"{task.get('Status', '?')}: {moved} of {total} moved, started {when}"
    if task.get("MaxNumberOfMessagesPerSecond"):
        line += f", {task['MaxNumberOfMessagesPerSecond']}/s"
    if task.get("DestinationArn"):
        line += f", to {task['DestinationArn'].rsplit(':', 1)[-1]}"
    if task.get("FailureReason"):
        line += f"; failed: {task['FailureReason']}"
    return line
