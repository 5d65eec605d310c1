"""``python -m local``: serve the synthesized dev stage on localhost over embedded AWS (see docs/local.md)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any

from embedded.offline import go_offline

ROOT = Path(__file__).resolve().parents[1]


def process_age() -> float:
    """Seconds since this process started (from /proc where there is one, else since this module loaded)."""
    try:
        ticks = os.sysconf("SC_CLK_TCK")
        started = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19]) / ticks
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime - started)
    except (OSError, ValueError, IndexError):
        return time.monotonic() - _LOADED


_LOADED = time.monotonic()


def arguments(argv: list[str]) -> argparse.Namespace:
    env = os.environ.get
    parser = argparse.ArgumentParser(prog="python -m local", description=__doc__)
    # Not read from the environment: some shells export HOST as the machine's name.
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--rest-port", type=int, default=int(env("REST_PORT") or 8300), help="REST API and pages")
    parser.add_argument("--ws-port", type=int, default=int(env("WS_PORT") or 8301), help="WebSocket API")
    parser.add_argument(
        "--assembly",
        type=Path,
        default=Path(env("ASSEMBLY") or ROOT / "cdk.out" / "assembly-MangaAssist-dev"),
        help="cloud assembly of the stage (default: what `make synth` wrote for dev)",
    )
    parser.add_argument(
        "--bedrock",
        choices=("local", "aws"),
        default=env("BEDROCK") or "local",
        help="local: a stand-in that says it is one; aws: real Bedrock with your credentials",
    )
    parser.add_argument("--bedrock-region", default=env("BEDROCK_REGION") or "us-east-1")
    parser.add_argument(
        "--token-delay",
        type=float,
        default=float(env("TOKEN_DELAY") or 0.04),
        help="seconds between the local responder's streamed tokens (0: all at once)",
    )
    parser.add_argument("--password", default=env("LOCAL_PASSWORD") or None, help="the demo users' password")
    parser.add_argument("--no-demo-users", action="store_true", help="start with an empty user pool")
    parser.add_argument(
        "--lambda-log-level",
        default=env("LAMBDA_LOG_LEVEL") or "WARNING",
        help="log level of the handlers (their JSON log lines go to standard output)",
    )
    return parser.parse_args(argv)


def free(host: str, ports: tuple[int, ...]) -> None:
    """Raise OSError when one of ``ports`` (0: any) cannot be bound on ``host`` now."""
    for port in ports:
        if port:
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind((host, port))


def main(argv: list[str]) -> int:
    args = arguments(argv)
    bedrock_credentials: Any = None
    if args.bedrock == "aws":
        from local.responder import aws_bedrock

        bedrock_credentials = aws_bedrock(args.bedrock_region)  # the user's credentials, before moto's
    # What moto and the handlers need in place of an AWS account, before they are imported.
    go_offline()
    # Lambda's advanced logging controls name WARN, not WARNING; they win over the functions' own level.
    level = args.lambda_log_level.upper()
    os.environ["AWS_LAMBDA_LOG_LEVEL"] = "WARN" if level == "WARNING" else level
    warnings.filterwarnings("ignore")
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s", datefmt="%H:%M:%S", stream=sys.stdout)
    logging.getLogger("local").setLevel(logging.INFO)
    logging.getLogger("moto").setLevel(logging.CRITICAL)
    try:
        free(args.host, (args.rest_port, args.ws_port))  # before the stage takes seconds to stand up
        return asyncio.run(serve(args, bedrock_credentials))
    except FileNotFoundError as missing:
        print(f"make local: {missing}", file=sys.stderr)
        return 2
    except OSError as error:  # a port in use, an address that is not this machine's
        print(f"make local: cannot listen on {args.host}: {error}", file=sys.stderr)
        return 2


async def serve(args: argparse.Namespace, bedrock: Any) -> int:
    from embedded.services.bedrock_stream import Pacing
    from local.responder import BEDROCK_URLS, local_responder
    from local.server import LocalServer
    from local.stage import DEMO_PASSWORD, local_stage

    loop = asyncio.get_running_loop()
    stopped = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stopped.set)
    password = args.password or DEMO_PASSWORD
    if bedrock is None:
        delay = max(0.0, args.token_delay)
        bedrock = local_responder(Pacing(first=delay * 8, every=delay) if delay else None)
        urls: tuple[str, ...] = ()
        said = "local responder (replies start with [local responder]; BEDROCK=aws for the real model)"
    else:
        urls = BEDROCK_URLS
        said = f"real Bedrock in {args.bedrock_region} with your credentials (the model of the stage's config)"
    print(f"Standing up {args.assembly.name} on embedded AWS (moto) ...", flush=True)
    stage_cm = local_stage(
        args.assembly, bedrock=bedrock, passthrough_urls=urls, password=password, demo_users=not args.no_demo_users
    )
    # Deploying takes seconds of CPU: on a thread, so Ctrl-C is still heard.
    local = await asyncio.to_thread(stage_cm.__enter__)
    try:
        server = LocalServer(local, host=args.host, rest_port=args.rest_port, ws_port=args.ws_port)
        u = await server.start()
        pump = threading.Thread(target=local.pump_forever, name="pump", daemon=True)
        pump.start()
        print(banner(u, said, password, demo_users=not args.no_demo_users), flush=True)
        if local.unscheduled:
            print(f"Not fired locally (only rate(...) rules are): {', '.join(local.unscheduled)}", flush=True)
        print(f"serving after {process_age():.1f}s (Ctrl-C stops)", flush=True)
        await stopped.wait()
        print("stopping ...", flush=True)
        await server.stop()
    finally:
        with contextlib.suppress(Exception):
            await asyncio.to_thread(stage_cm.__exit__, None, None, None)
    print("stopped", flush=True)
    return 0


def banner(u: Any, bedrock: str, password: str, *, demo_users: bool) -> str:
    """What the server prints once it serves: its URLs, the demo users, curl lines to start with."""
    from local.stage import DEMO_USERS

    users = "  ".join(f"{email} ({role})" for email, role in DEMO_USERS) if demo_users else "(none: --no-demo-users)"
    customer = DEMO_USERS[0][0]
    id_token_of = "python3 -c 'import json,sys; print(json.load(sys.stdin)[\"id_token\"])'"  # noqa: S105 - a shell snippet, no secret
    read_sub = (
        'python3 -c \'import base64,json,sys; p=sys.argv[1].split(".")[1]; '
        'print(json.loads(base64.urlsafe_b64decode(p+"==="))["sub"])\' "$TOKEN"'
    )
    return f"""
MangaAssist {u.rest_stage} on embedded AWS: in-process handlers on moto, one process, no AWS account.
  REST API      {u.rest}
  WebSocket     {u.websocket}?token=<ID token>[&session_id=...]
  Chat page     {u.chat_page}
  Agent console {u.agent_page}
  Sign-in       POST {u.origin}/local/sign-in {{"email","password"}} -> tokens   (local only)
  New user      POST {u.origin}/local/users {{"email","role","password"?}}         (local only)
  Bedrock       {bedrock}
Demo users, password {password}:
  {users}
Try:
  TOKEN=$(curl -s -X POST {u.origin}/local/sign-in -H 'Content-Type: application/json' \\
    -d '{{"email":"{customer}","password":"{password}"}}' | {id_token_of})
  SUB=$({read_sub})
  curl -s -X POST {u.rest}/sessions -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \\
    -d "{{\\"customer_id\\": \\"$SUB\\"}}"
More to try (SID: the session's id):
  ask for a human     POST {u.rest}/sessions/$SID/handoff {{"reason","priority"}}: a "queued" frame at once
  edit or ask again   POST {u.rest}/sessions/$SID/rewind {{"turn_number","text"?}} (or the chat action "rewind")
  the rest of a reply the chat action {{"action": "continue"}} after a final frame with "can_continue": true
  sessions by status  GET {u.rest}/admin/sessions?status=handoff (an admin's token; agents may list handoff)
  workflows, reviews  GET {u.origin}/local/status (export reviews and their approval links)
  let time pass       POST {u.origin}/local/clock {{"advance_seconds": 3600}} (timers, schedules, limits)
"""


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
