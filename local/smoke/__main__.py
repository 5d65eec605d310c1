"""``python -m local.smoke``: the customer's path over the wire against a deployed stage or ``make local``.

    python -m local.smoke --stage dev                    # the outputs make deploy wrote (.deploy/)
    python -m local.smoke --stage dev --outputs FILE     # another CDK outputs file
    python -m local.smoke --stage dev --base-url URL --ws-url URL --user-pool-id ID --client-id ID
    python -m local.smoke --local [http://127.0.0.1:8300]  # make local
    python -m local.smoke ... --dry-run                  # what it would do, without a network call
    python -m local.smoke ... --pause                    # wait for Enter after each step
    SMOKE_EMAIL=... SMOKE_PASSWORD=... python -m local.smoke --stage prod --read-only

Exit status: 0 when every step that ran passed and everything created was removed; 1 when a step
failed or something could not be removed (the report says what); 2 for a mistake in the call;
130 after Ctrl-C (what the smoke created is still removed; a second Ctrl-C abandons that).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import aiohttp

from local.smoke.client import StageClient, WireError
from local.smoke.pause import Pause
from local.smoke.story import READ_ONLY, STORY, Existing, SmokeReport, SmokeStory, StepResult, StepSpec
from local.smoke.target import LOCAL_ORIGIN, Target, TargetError, deployed_target, local_target, read_outputs
from local.smoke.users import CognitoUsers, LocalUsers, SmokeUser, UserDirectory, new_run_id, plan_users

#: The existing user a read-only smoke signs in as (never a flag: a password stays out of shell history).
EMAIL_VARIABLE: Final = "SMOKE_EMAIL"
PASSWORD_VARIABLE: Final = "SMOKE_PASSWORD"  # noqa: S105 - the variable's name


class UsageError(Exception):
    """The call cannot run as given; the message says what to change."""


@dataclass(frozen=True)
class Plan:
    """What a run does: where, as whom, which steps."""

    target: Target
    run_id: str
    read_only: bool
    sign_in: str
    users: tuple[SmokeUser, ...]
    existing: Existing | None
    timeout: float
    #: for a dry run of make local: the target's URLs are only known once its config is read
    local_origin: str | None = None
    #: wait for Enter after each step (local.smoke.pause)
    pause: bool = False


def arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m local.smoke", description=__doc__.splitlines()[0])
    parser.add_argument("--stage", default="dev", help="the stage in cdk.json (default dev)")
    parser.add_argument("--outputs", type=Path, help="a CDK outputs file (default: .deploy/outputs-<stage>.json)")
    parser.add_argument("--base-url", help="the REST API's base URL (instead of the RestApiBaseUrl output)")
    parser.add_argument("--ws-url", help="the WebSocket URL (instead of the WebSocketUrl output)")
    parser.add_argument("--user-pool-id", help="the user pool (instead of the UserPoolId output)")
    parser.add_argument("--client-id", help="the app client (instead of the UserPoolClientId output)")
    parser.add_argument("--region", help="the pool's region (default: the one its id starts with)")
    parser.add_argument("--cognito-endpoint", help="where InitiateAuth goes (default: the pool's regional endpoint)")
    parser.add_argument(
        "--local",
        nargs="?",
        const=LOCAL_ORIGIN,
        metavar="ORIGIN",
        help=f"run against make local at ORIGIN (default {LOCAL_ORIGIN}) instead of a deployed stage",
    )
    parser.add_argument(
        "--sign-in",
        choices=("public", "admin"),
        help="public: Cognito InitiateAuth over HTTPS, no credentials (default where the stage allows password "
        "sign-in, as dev does); admin: AdminInitiateAuth with your AWS credentials (default otherwise, as for prod)",
    )
    parser.add_argument(
        "--read-only",
        action="store_true",
        help=f"for production: sign in the existing user ${EMAIL_VARIABLE} (${PASSWORD_VARIABLE}), "
        "make a health read and an auth check, and write nothing",
    )
    parser.add_argument("--dry-run", action="store_true", help="print what it would do, without a network call")
    parser.add_argument("--timeout", type=float, default=60, help="seconds to wait for each answer (default 60)")
    parser.add_argument(
        "--pause",
        action="store_true",
        help="wait for Enter after each step, to look at the stage between steps (Ctrl-C still removes what it made)",
    )
    return parser.parse_args(argv)


def plan(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> Plan:
    """The target, the users and the sign-in the arguments ask for; UsageError or TargetError says what is wrong."""
    existing = None
    if args.read_only:
        email, password = environ.get(EMAIL_VARIABLE, ""), environ.get(PASSWORD_VARIABLE, "")
        if not email or not password:
            raise UsageError(
                f"--read-only signs in an existing user: set ${EMAIL_VARIABLE} and ${PASSWORD_VARIABLE} "
                "(a user the stage's admins created for this check)"
            )
        existing = Existing(email, password)
    if args.timeout <= 0:
        raise UsageError(f"--timeout must be a positive number of seconds (given {args.timeout})")
    run_id = new_run_id()
    users = () if args.read_only else plan_users(run_id)
    if args.local is not None:
        origin = str(args.local).rstrip("/")
        placeholder = Target("local", "dev", "", "", local_origin=origin, source=f"{origin}/local/config")
        return Plan(
            placeholder,
            run_id,
            args.read_only,
            "local",
            users,
            existing,
            args.timeout,
            local_origin=origin,
            pause=args.pause,
        )

    from stacks.config import ConfigError
    from tools.deploy import outputs_file, stage_config

    try:
        config = stage_config(args.stage)
    except (ConfigError, KeyError) as error:
        raise UsageError(f"stage {args.stage!r} is not a valid stage of cdk.json: {error}") from None
    if config.is_production and not args.read_only:
        raise UsageError(
            f"stage {args.stage} retains its data: its users are real people, so the smoke creates none there; "
            f"run it --read-only with ${EMAIL_VARIABLE} and ${PASSWORD_VARIABLE}"
        )
    if config.identity.provider != "cognito" and args.user_pool_id is None:
        raise UsageError(
            f"stage {args.stage} signs in with an external issuer ({config.identity.issuer}): the smoke creates "
            "and signs in users of the stage's Cognito pool only"
        )
    direct = args.base_url is not None or args.ws_url is not None
    outputs, source = None, "the arguments"
    if not direct or args.outputs is not None:
        path = args.outputs or outputs_file(args.stage)
        outputs, source = read_outputs(path, args.stage), str(path)
    target = deployed_target(
        args.stage,
        outputs=outputs,
        source=source,
        base_url=args.base_url,
        ws_url=args.ws_url,
        user_pool_id=args.user_pool_id,
        client_id=args.client_id,
        region=args.region,
        default_region=config.region,
        endpoint=args.cognito_endpoint,
    )
    missing = [
        flag
        for flag, value in (
            ("--user-pool-id (UserPoolId)", target.user_pool_id),
            ("--client-id (UserPoolClientId)", target.client_id),
            ("--region", target.region),
        )
        if not value
    ]
    if missing:
        raise TargetError(
            f"{source} gives no {', no '.join(missing)}: the smoke signs its users in to the stage's pool"
        )
    sign_in = args.sign_in or ("public" if config.identity.password_auth else "admin")
    return Plan(target, run_id, args.read_only, sign_in, users, existing, args.timeout, pause=args.pause)


def directory(plan: Plan, http: aiohttp.ClientSession) -> UserDirectory:
    target = plan.target
    if target.kind == "local":
        return LocalUsers(http, str(target.local_origin or plan.local_origin))
    return CognitoUsers(
        http,
        user_pool_id=str(target.user_pool_id),
        client_id=str(target.client_id),
        region=str(target.region),
        endpoint=str(target.cognito_endpoint),
        sign_in=plan.sign_in,
    )


# ---------------------------------------------------------------------- printing


def describe_step(result: StepResult, total: int) -> list[str]:
    """A step as the report prints it, like ``make demo``: what it called and what it saw."""
    head = f"[{result.index:2d}/{total}] {result.spec.title}"
    if result.status == "skipped":
        return [f"{head}  skipped: {result.reason}"]
    lines = [f"{head}  ({result.seconds:.1f}s)" + ("  FAILED" if result.status == "failed" else "")]
    lines += [f"        called  {call}" for call in result.calls]
    lines += [f"        saw     {seen}" for seen in result.saw]
    if result.status == "failed":
        lines.append(f"        failed  {result.reason}")
    return lines


def describe_plan(plan: Plan, users: UserDirectory) -> list[str]:
    """What a dry run prints: the URLs, the users it would create and delete, each step run or skipped."""
    target = plan.target
    where = "make local" if target.kind == "local" else f"stage {target.stage}, deployed"
    lines = [f"Smoke of {where} (from {target.source}), run {plan.run_id}: dry run, nothing is called."]
    if plan.local_origin is not None:
        lines.append(f"  REST API and WebSocket URLs: read from {target.source} when it runs")
    else:
        lines += [f"  REST API   {target.rest_url}", f"  WebSocket  {target.websocket_url}"]
    lines.append(f"  Sign-in    {users.sign_in_description}")
    if plan.existing is not None:
        lines.append(
            f"Signs in the existing user {plan.existing.email} (${EMAIL_VARIABLE}); creates and deletes nothing."
        )
    else:
        lines.append(f"Users it would create through {users.description}, and delete afterwards:")
        lines += [f"  {user.email:<46} {user.role}" for user in plan.users]
        lines += [
            f"It would register the agent (POST /admin/agents as its admin, skill smoke_{plan.run_id}) and retire it "
            "afterwards (POST /admin/agents/{id}/retire),",
            "and delete the session it creates (DELETE /sessions/{id}), also when a step fails.",
        ]
    specs: Sequence[StepSpec] = STORY if plan.existing is None else READ_ONLY
    lines.append("Steps:")
    for index, spec in enumerate(specs, 1):
        reason = spec.skip_reason(target)
        mark = "run " if reason is None else "skip"
        lines.append(f"  [{index:2d}/{len(specs)}] {mark}  {spec.title}" + (f": {reason}" if reason else ""))
    return lines


def describe_report(report: SmokeReport, run_id: str) -> list[str]:
    lines = [""]
    if report.removed:
        lines.append("Removed what the smoke created:")
        lines += [f"  {line}" for line in report.removed]
    if report.interrupted:
        lines.append("Interrupted (Ctrl-C): the story stopped, and the cleanup ran.")
    if report.left_behind:
        lines.append("COULD NOT REMOVE (remove by hand):")
        lines += [f"  {line}" for line in report.left_behind]
    not_run = [result.spec.title for result in report.results if result.status == "not run"]
    if not_run:
        lines.append(f"Not run after the failure: {'; '.join(not_run)}")
    counts = ", ".join(f"{report.count(status)} {status}" for status in ("passed", "skipped", "failed"))
    cleanup = "everything it created was removed" if not report.left_behind else "something was left behind"
    lines.append(f"Summary: {counts} in {report.seconds:.1f}s (run {run_id}); {cleanup}.")
    failure = report.failure
    if failure is not None:
        lines.append(f"FAILED at [{failure.index}] {failure.spec.title}: {failure.reason}")
    return lines


# ---------------------------------------------------------------------- running


async def execute(plan: Plan, *, dry_run: bool, say: Callable[[str], None] = print) -> SmokeReport | None:
    """Run the plan and report each step through ``say`` as it ends; a dry run only describes it (None)."""
    timeout = aiohttp.ClientTimeout(total=max(plan.timeout, 30))
    async with aiohttp.ClientSession(timeout=timeout) as http:
        if dry_run:
            for line in describe_plan(plan, directory(plan, http)):
                say(line)
            return None
        target = plan.target
        if plan.local_origin is not None:
            target = await local_target(http, plan.local_origin)
        plan = dataclasses.replace(plan, target=target, local_origin=None)
        where = "make local" if target.kind == "local" else f"stage {target.stage}"
        say(f"Smoke of {where}, run {plan.run_id}: {target.rest_url} and {target.websocket_url}")

        def narrate(result: StepResult, total: int) -> None:
            for line in ("", *describe_step(result, total)):
                say(line)

        story = SmokeStory(
            target,
            StageClient(http, target.rest_url, target.websocket_url),
            directory(plan, http),
            run_id=plan.run_id,
            users=plan.users,
            existing=plan.existing,
            timeout=plan.timeout,
            narrate=narrate,
            pause=Pause(say) if plan.pause else None,
        )
        report = await story.run()
        for line in describe_report(report, plan.run_id):
            say(line)
        return report


def main(argv: Sequence[str] | None = None) -> int:
    args = arguments(argv)
    try:
        chosen = plan(args)
        report = asyncio.run(execute(chosen, dry_run=args.dry_run, say=lambda line: print(line, flush=True)))
    except (UsageError, TargetError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except WireError as error:  # make local not running, before any step
        print(f"error: {error}", file=sys.stderr)
        return 1
    if report is not None and report.interrupted:
        return 130  # as a shell reports a command stopped by Ctrl-C
    return 0 if report is None or report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
