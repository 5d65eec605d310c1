"""`make capacity`: each stage's target, the limits its synthesized templates set, and what the target needs.

For dev and prod (cdk.json), the stage is synthesized in-process and every limit on the message path
is read back from its templates: the WebSocket route throttles and the stage default, the REST
throttle, the message function's reserved concurrency, the stream router's batch size, window and
parallelization factor. Each is set beside what the stage's target needs, without headroom (a
limit below it fails: exit 1), and the quotas the stage needs from its account are listed after.
docs/capacity.md explains each line and the quota behind it.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from stacks.capacity import (
    ACCOUNT_API_RATE,
    MAX_BATCHING_WINDOW_SECONDS,
    MAX_MESSAGE_TIMEOUT_SECONDS,
    PARTITION_WRITE_UNITS,
    ROUTED_RECORDS_PER_TURN,
    WRITE_UNITS_PER_TURN,
    CapacityConfig,
    router_batch_seconds,
)

MESSAGE_HANDLER = "lambdas.ws.message.handler"
ROUTER_HANDLER = "lambdas.events.router.handler"
#: Lambda keeps this much of the account's concurrency unreserved (PutFunctionConcurrency).
LAMBDA_UNRESERVED_MINIMUM = 100
#: API Gateway's default of new WebSocket connections a second per account and region (adjustable).
WEBSOCKET_NEW_CONNECTIONS = 500
Templates = Mapping[str, Mapping[str, Any]]


@dataclass(frozen=True)
class Check:
    """One limit of a stage: its value in the template, what the target needs of it, and whether it holds."""

    limit: str
    value: float
    need: float
    #: "at least": the value must be >= the need; "at most": <=.
    rule: str = "at least"

    @property
    def ok(self) -> bool:
        return self.value >= self.need if self.rule == "at least" else self.value <= self.need


def _resources(templates: Templates, kind: str) -> list[tuple[str, Mapping[str, Any]]]:
    return [
        (lid, res.get("Properties", {}))
        for template in templates.values()
        for lid, res in template.get("Resources", {}).items()
        if res.get("Type") == kind
    ]


def _function(templates: Templates, handler: str) -> tuple[str, Mapping[str, Any]]:
    [found] = [(lid, p) for lid, p in _resources(templates, "AWS::Lambda::Function") if p.get("Handler") == handler]
    return found


def template_limits(templates: Templates) -> dict[str, float]:
    """Every limit of the message path as the synthesized templates set it."""
    [(_, ws)] = _resources(templates, "AWS::ApiGatewayV2::Stage")
    [(_, rest)] = _resources(templates, "AWS::ApiGateway::Stage")
    routes, default = ws.get("RouteSettings", {}), ws.get("DefaultRouteSettings", {})
    [every] = [
        m for m in rest.get("MethodSettings", []) if m.get("HttpMethod") == "*" and m.get("ResourcePath") == "/*"
    ]
    router_id, _ = _function(templates, ROUTER_HANDLER)
    [mapping] = [
        p
        for _, p in _resources(templates, "AWS::Lambda::EventSourceMapping")
        if p.get("FunctionName") == {"Ref": router_id}
    ]
    found: dict[str, float] = {
        "REST rate": every["ThrottlingRateLimit"],
        "REST burst": every["ThrottlingBurstLimit"],
        "WebSocket default rate": default["ThrottlingRateLimit"],
        "WebSocket default burst": default["ThrottlingBurstLimit"],
        "message function reserved concurrency": _function(templates, MESSAGE_HANDLER)[1][
            "ReservedConcurrentExecutions"
        ],
        "message function timeout (s)": _function(templates, MESSAGE_HANDLER)[1]["Timeout"],
        "stream router batch size": mapping.get("BatchSize", 100),
        "stream router batching window (s)": mapping.get("MaximumBatchingWindowInSeconds", 0),
        "stream router parallelization factor": mapping.get("ParallelizationFactor", 1),
    }
    for route in ("$connect", "sendMessage", "rewind", "continue"):
        found[f"{route} rate"] = routes[route]["ThrottlingRateLimit"]
        found[f"{route} burst"] = routes[route]["ThrottlingBurstLimit"]
    return found


def checks(target: CapacityConfig, found: Mapping[str, float]) -> list[Check]:
    """Each limit against what the target needs of it (no headroom: the target's own load)."""
    messages = target.concurrent_chats * target.messages_per_chat_per_minute / 60
    rest = target.concurrent_chats * target.rest_requests_per_chat_per_minute / 60
    shards = max(1, math.ceil(messages * WRITE_UNITS_PER_TURN / PARTITION_WRITE_UNITS))
    batch, parallel = int(found["stream router batch size"]), int(found["stream router parallelization factor"])
    routed = parallel * batch / router_batch_seconds(batch)  # records a second one shard's batches handle
    result = [
        Check("sendMessage rate", found["sendMessage rate"], messages),
        Check("sendMessage burst", found["sendMessage burst"], messages),
        Check("rewind rate", found["rewind rate"], found["sendMessage rate"], "at most"),
        Check("continue rate", found["continue rate"], found["sendMessage rate"], "at most"),
        Check("$connect rate", found["$connect rate"], target.connects_per_second),
        Check("$connect burst", found["$connect burst"], target.connects_per_second),
        Check("WebSocket default rate", found["WebSocket default rate"], max(messages, target.connects_per_second)),
        Check("REST rate", found["REST rate"], rest),
        Check("REST burst", found["REST burst"], rest),
        Check(
            "message function reserved concurrency",
            found["message function reserved concurrency"],
            math.ceil(messages * target.reply_p95_seconds),  # Little's law: the target's messages for their p95
        ),
        Check("stream router records/s per shard", routed, messages * ROUTED_RECORDS_PER_TURN / shards),
        # The longest reply (max_output_tokens at the model's tokens a second), within the route's 29 s.
        Check(
            "message function timeout (s)", found["message function timeout (s)"], target.needed_message_timeout_seconds
        ),
        Check(
            "message function timeout (s)",
            found["message function timeout (s)"],
            MAX_MESSAGE_TIMEOUT_SECONDS,
            "at most",
        ),
        Check(
            "stream router batching window (s)",
            found["stream router batching window (s)"],
            MAX_BATCHING_WINDOW_SECONDS,
            "at most",
        ),
    ]
    return result


def quotas(target: CapacityConfig) -> list[tuple[str, str]]:
    """What the stage needs from its account: reported, never set."""
    limits = target.limits
    return [
        ("Bedrock requests per minute (model)", f"{limits.bedrock_requests_per_minute:,}"),
        ("Bedrock tokens per minute (input + 5 x output)", f"{limits.bedrock_tokens_per_minute:,}"),
        (
            "Lambda concurrent executions (account)",
            f"at least {limits.message_reserved_concurrency + LAMBDA_UNRESERVED_MINIMUM:,} "
            f"(reserved {limits.message_reserved_concurrency:,} + {LAMBDA_UNRESERVED_MINIMUM} unreserved; "
            "default 1,000)",
        ),
        (
            "API Gateway requests per second (account, region)",
            f"{limits.api_gateway_requests_per_second:,} of {ACCOUNT_API_RATE:,}",
        ),
        (
            "WebSocket new connections per second (account, region)",
            f"{limits.ws_connect_rate:,} of {WEBSOCKET_NEW_CONNECTIONS:,}",
        ),
        ("DynamoDB stream shards assumed (one per partition)", f"{limits.stream_shards}"),
    ]


def _number(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"


def render(stage: str, target: CapacityConfig, found: Mapping[str, float]) -> tuple[str, bool]:
    """The stage's table, and whether every limit holds."""
    heading = (
        f"## {stage}: {target.concurrent_chats:,} chats, {target.messages_per_chat_per_minute:g} messages a minute "
        f"each, reply p95 {target.reply_p95_seconds:g} s, {target.connects_per_second:g} connects/s, "
        f"headroom {target.headroom:g}"
    )
    lines = [heading, "", "| limit | template | target needs | |", "|---|---|---|---|"]
    found_checks = checks(target, found)
    for check in found_checks:
        verdict = "ok" if check.ok else f"BELOW ({check.rule} {_number(check.need)})"
        lines.append(f"| {check.limit} | {_number(check.value)} | {check.rule} {_number(check.need)} | {verdict} |")
    lines += ["", "| account quota the stage needs | |", "|---|---|"]
    lines += [f"| {name} | {value} |" for name, value in quotas(target)]
    return "\n".join(lines), all(c.ok for c in found_checks)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.capacity", description=__doc__.splitlines()[0])
    parser.add_argument("--stage", action="append", help="a stage of cdk.json (default: dev and prod)")
    args = parser.parse_args(argv)
    from embedded.synth import default_stages, stage_config

    names = args.stage or ["dev", "prod"]
    stages = default_stages()
    holds = True
    for name in names:
        text, ok = render(name, stage_config(name).capacity, template_limits(stages[name].templates))
        print(text + "\n")
        holds = holds and ok
    if not holds:
        print("a limit is below what its stage's target needs", file=sys.stderr)
    return 0 if holds else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
