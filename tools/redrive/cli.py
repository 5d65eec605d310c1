"""The command line: ``python -m tools.redrive`` (see the package's docstring for its usage)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from typing import Final

import boto3
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    NoCredentialsError,
    NoRegionError,
    PartialCredentialsError,
    ProfileNotFound,
)

from lambdas.shared.retry import Backoff, error_code
from tools.redrive.aws import Aws, NoMoveTasks, describe
from tools.redrive.move import ManualMove, print_report, show_move_tasks, start_task, task_line
from tools.redrive.plan import choose_destination, peek, show_queue, use_task
from tools.redrive.queues import BATCH, Refused, parse_queue
from tools.redrive.stage import list_stage, stage_home

#: Long polling: an empty answer then means the queue is empty, not that one server had nothing.
RECEIVE_WAIT_SECONDS: Final = 2
#: The task's MaxNumberOfMessagesPerSecond range.
RATE_RANGE: Final = (1, 500)
_BAD_CREDENTIALS = frozenset(
    {
        "InvalidClientTokenId",
        "UnrecognizedClientException",
        "ExpiredToken",
        "ExpiredTokenException",
        "SignatureDoesNotMatch",
        "InvalidSignatureException",
    }
)
_SUMMARY = "Move the messages of a dead-letter queue back to the queue they failed in; a dry run unless --apply."


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.redrive",
        description=_SUMMARY,
        epilog="Exit status: 0 done, 1 some messages not moved, 2 refused or could not start.",
    )
    parser.add_argument("queue", nargs="?", help="the dead-letter queue: name, URL or ARN")
    parser.add_argument("--stage", help="list the dead-letter queues of this stage (stacks MangaAssist-<stage>-*)")
    parser.add_argument("--apply", action="store_true", help="move the messages (without it: a dry run)")
    parser.add_argument("--to", help="the queue to move to: one of the DLQ's sources, or any queue when it has none")
    parser.add_argument("--max", type=int, dest="limit", metavar="N", help="move at most N messages (moves by hand)")
    parser.add_argument("--rate", type=int, metavar="N", help="at most N messages per second (1..500)")
    parser.add_argument(
        "--sample", type=int, default=5, metavar="N", help="messages a dry run shows (0..10, default 5)"
    )
    parser.add_argument(
        "--method",
        choices=("auto", "task", "manual"),
        default="auto",
        help="auto (default): SQS's message move task where it applies, else by hand",
    )
    parser.add_argument("--status", action="store_true", help="show the DLQ's recent message move tasks")
    parser.add_argument("--region", help="AWS region (default: the queue URL's or ARN's, else the profile's)")
    parser.add_argument("--profile", help="AWS profile (default: the environment's credentials)")
    return parser


def _check_usage(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if (args.queue is None) == (args.stage is None):
        parser.error("give a dead-letter queue (name, URL or ARN) or --stage STAGE, one of them")
    if args.stage is not None and (args.apply or args.to or args.limit or args.status):
        parser.error("--stage lists dead-letter queues; --apply, --to, --max and --status need a QUEUE")
    if args.status and (args.apply or args.to or args.limit):
        parser.error("--status only shows the move tasks; give --apply, --to or --max without it")
    if args.limit is not None and args.limit < 1:
        parser.error(f"--max must be at least 1 (given {args.limit})")
    if args.rate is not None and not RATE_RANGE[0] <= args.rate <= RATE_RANGE[1]:
        parser.error(f"--rate must be {RATE_RANGE[0]}..{RATE_RANGE[1]} messages per second (given {args.rate})")
    if not 0 <= args.sample <= BATCH:
        parser.error(f"--sample must be 0..{BATCH} (given {args.sample})")
    if args.method == "task" and args.limit is not None:
        parser.error("--max needs moving by hand: a message move task cannot be bounded")
    for name in ("queue", "to"):
        value = getattr(args, name)
        if value is not None:
            try:
                parse_queue(value)
            except ValueError as error:
                parser.error(str(error))


def redrive(aws: Aws, args: argparse.Namespace, *, sleep: Callable[[float], None], clock: Callable[[], float]) -> int:
    """Dry run, apply or status for one dead-letter queue; the exit status."""
    dlq = aws.queue(parse_queue(args.queue))
    if args.status:
        try:
            tasks = aws.move_tasks(dlq, most=10)
        except NoMoveTasks as error:
            raise Refused(f"no message move tasks here: {error}") from None
        print(
            f"Message move tasks of {dlq.name}, newest first:"
            if tasks
            else f"{dlq.name} has had no message move tasks."
        )
        for task in tasks:
            print(f"  {task_line(task)}" + (f"\n    handle {task['TaskHandle']}" if task.get("TaskHandle") else ""))
        return 0
    sources = aws.sources(dlq)
    consumers = [] if sources else aws.consumers().get(dlq.arn, [])
    to = aws.queue(parse_queue(args.to)) if args.to else None
    show_queue(dlq, sources, consumers, aws)
    sample = peek(aws, dlq, args.sample) if not args.apply else []
    destination = choose_destination(dlq, sources, to, consumers, {message.kind for message in sample})
    by_task, how = use_task(dlq, sources, destination, method=args.method, limit=args.limit)
    bound = f"up to {args.limit}" if args.limit else "all"
    print(f"\nPlan: move {bound} of its messages to {destination.name}, {how}.")
    if not args.apply:
        if by_task:
            show_move_tasks(aws, dlq)
        print("Dry run: nothing was moved. Add --apply to move them.")
        return 0
    if dlq.waiting == 0 and dlq.in_flight == 0:
        print("Nothing waiting in the DLQ (the counts are approximate, about a minute behind).")
        return 0
    if by_task:
        try:
            return start_task(aws, dlq, destination, args.rate)
        except NoMoveTasks as error:
            if args.method == "task":
                raise Refused(f"no message move tasks here: {error}") from None
            print(f"No message move task here ({error}): moving by hand instead.")
    move = ManualMove(
        aws,
        dlq,
        destination,
        limit=args.limit,
        rate=args.rate,
        skip_records=not sources,
        backoff=Backoff(sleep=sleep),
        clock=clock,
        sleep=sleep,
    )
    report = move.run()
    print_report(report, dlq, destination)
    try:
        remaining = aws.queue_at(dlq.url)
        print(f"{dlq.name} now holds about {remaining.waiting} waiting, {remaining.in_flight} in flight.")
    except (Refused, ClientError, BotoCoreError) as error:
        print(f"(could not read the DLQ's depth afterwards: {error})")
    return 0 if report.complete else 1


def main(
    argv: Sequence[str] | None = None,
    *,
    session: boto3.Session | None = None,
    receive_wait_seconds: int = RECEIVE_WAIT_SECONDS,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    _check_usage(parser, args)
    try:
        session = session or boto3.Session(profile_name=args.profile)
        region = args.region
        pinned_account = None
        if args.stage is not None:
            pinned_account, pinned_region = stage_home(args.stage)
            region = region or pinned_region
        else:
            for text in (args.queue, args.to):
                named = parse_queue(text).region if text else None
                if named and region and named != region:
                    raise Refused(f"{text} is in {named}, not {region}: a redrive stays within one region")
                region = region or named
        region = region or session.region_name
        if not region:
            raise Refused("no AWS region: give --region, a queue URL or ARN, or set AWS_REGION")
        aws = Aws(session, region, receive_wait_seconds=receive_wait_seconds)
        account = str(aws.client("sts").get_caller_identity()["Account"])
        if pinned_account and account != pinned_account:
            raise Refused(
                f"stage {args.stage} lives in account {pinned_account} (cdk.json); these credentials are for {account}"
            )
        if args.stage is not None:
            return list_stage(aws, args.stage, account)
        return redrive(aws, args, sleep=sleep, clock=clock)
    except Refused as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except (NoCredentialsError, PartialCredentialsError):
        print("error: no AWS credentials: set AWS_PROFILE (or --profile), or sign in (aws sso login)", file=sys.stderr)
        return 2
    except (ProfileNotFound, NoRegionError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except ClientError as error:
        if error_code(error) in _BAD_CREDENTIALS:
            print(f"error: AWS refused these credentials ({describe(error)}): renew them", file=sys.stderr)
        else:
            print(f"error: {describe(error)}", file=sys.stderr)
        return 2
    except BotoCoreError as error:
        print(f"error: {describe(error)}", file=sys.stderr)
        return 2
