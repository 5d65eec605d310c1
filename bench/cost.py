"""The AWS cost of 1,000 chat turns, this design against the seed-shaped one, counted on the embedded stage.

Run with ``python -m bench.cost``. A turn is a customer message and the assistant's reply.

How: the dev stage is synthesized with the CDK CLI, as ``cdk synth -c stage=dev`` does, and stood
up twice on embedded AWS (tests/e2e/harness: moto, every function run in this process). On each,
``SESSIONS`` customers sign in, open a session and connect (not counted), then each sends
``TURNS_PER_SESSION`` messages over the WebSocket, ``THINK_SECONDS`` apart on the stage's clock,
the stage settling after each (the stream router gets each turn's records as one batch: the
low-traffic case, the worst for batching). bench/meter.py counts what the functions do in that
window; bench/cost.py prices it with bench/prices.py and scales it to 1,000 turns. The audit
trail's locker runs once per S3 object of the audit stream: the embedded stage writes an object
per put, Firehose one per buffering interval (60 s), so the locker is priced per object Firehose
would have written for the puts the stage saw, on the stage's clock (bench/usage.py).

* This design: the stage as synthesized.
* The seed-shaped design: the same stage with three handlers swapped for the seeds' obvious
  ones (bench/baseline_seed_message.py, bench/baseline_router.py, bench/baseline_summary.py): each
  item written by its own call, a router call per record and per effect, a summary invocation
  per turn insert.

Nothing per message is written down here: counts come from what the code does, so they follow
the message path when it changes. The model answers through the harness's Bedrock stub with
replies of a realistic length (:data:`REPLY`, :data:`SUMMARY_TEXT`). The chat replies' tokens are
the usage the message function stored on each assistant turn (what the model reported; the stub
reports as Bedrock does); the summaries' and the seed-shaped design's, which store none, are
counted from the requests and answers by the app's own rule (4 characters a token).

Left out, the same for both designs: what a session costs once (sign-in, creating it, $connect
and its authorizer, the onboarding workflow, $disconnect, cleanup), cold starts, DynamoDB storage
and stream reads (Lambda's reads of a stream are free), S3 requests and storage behind Firehose
and the archive, KMS (the services cache data keys: calls do not follow turns), CloudWatch custom
metrics (billed per metric and month, not per turn), data transfer, free tiers. EventBridge, SNS
and SQS are counted but no chat turn publishes to them (only status changes and handoffs do).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

from bench.prices import GB, MODEL_PRICES, price
from bench.usage import KB, Usage, chunks, firehose_objects

ROOT = Path(__file__).resolve().parents[1]
STAGE: Final = "dev"
PER_TURNS: Final = 1000
SESSIONS: Final = 5
TURNS_PER_SESSION: Final = 20
#: Seconds between a reply and the customer's next message (sets WebSocket connection minutes).
THINK_SECONDS: Final = 30
#: Assumed bytes of Lambda's own log lines per invocation (start and report records, JSON format).
PLATFORM_LOG_BYTES: Final = 600
WEBSOCKET_CHUNK: Final = 32 * KB

#: The function that answers the chat: its replies' tokens come from the turns it stores.
MESSAGE_HANDLER: Final = "lambdas.ws.message.handler"
#: The router names the audit stream; the locker runs once per object of it.
ROUTER_HANDLER: Final = "lambdas.events.router.handler"
AUDIT_LOCK_HANDLER: Final = "lambdas.events.audit_lock.handler"
#: The seed-shaped design: the app's handler -> the baseline that runs in its place.
SEED_SHAPED: Final = {
    MESSAGE_HANDLER: "bench.baseline_seed_message.handler",
    ROUTER_HANDLER: "bench.baseline_router.handler",
    "lambdas.events.summary.handler": "bench.baseline_summary.handler",
}
DESIGNS: Final = ("this design", "seed-shaped")

MESSAGES: Final = (
    "Hi! Is the third volume of Frieren: Beyond Journey's End available in the collector's edition?",
    "Does it ship to Osaka before the weekend, and can I pay on delivery?",
    "What else would you recommend if I liked Frieren? Something calm, not too much fighting.",
    "Is Mushishi finished, or is it still running? How many volumes are there in total?",
    "My nephew is twelve. Would Dungeon Meshi be fine for him, or is it too gory?",
)
#: What the stubbed model answers a customer: about 150 tokens, a typical chat reply.
REPLY: Final = (
    "Good news: the collector's edition of volume 3 is in stock, with the slipcase and the art "
    "card. Orders placed before 2 pm usually ship the same day, so Osaka by the weekend is likely "
    "but not guaranteed; the checkout page shows the delivery estimate for your address. If you "
    "enjoyed the quiet, reflective tone, you might also like Mushishi (episodic, gentle, complete "
    "in 10 volumes) or Yokohama Kaidashi Kikou. Would you like me to check which of those are in "
    "stock in a collector's or deluxe edition, or compare prices between the editions for you?"
)
#: What the stubbed model answers a summarisation request: about 100 tokens.
SUMMARY_TEXT: Final = (
    "The customer asked about the collector's edition of Frieren volume 3, its delivery to Osaka "
    "before the weekend and payment on delivery. The assistant confirmed stock and same-day "
    "shipping before 2 pm, and suggested Mushishi and Yokohama Kaidashi Kikou. Open questions: "
    "which recommended titles exist in a deluxe edition, and whether cash on delivery is possible."
)


# ----------------------------------------------------------------------------------- the bill

#: Component key -> label, in table order. Every key is priced by :func:`bill`.
COMPONENTS: Final = {
    "lambda_requests": "Lambda requests",
    "lambda_duration": "Lambda duration (arm64, configured memory)",
    "dynamodb_writes": "DynamoDB writes (on-demand WRU, table + GSIs)",
    "dynamodb_reads": "DynamoDB reads (on-demand RRU)",
    "firehose": "Firehose ingestion (analytics + audit)",
    "eventbridge": "EventBridge events + archive",
    "sns": "SNS publishes",
    "sqs": "SQS requests",
    "websocket_messages": "API Gateway WebSocket messages",
    "websocket_minutes": f"API Gateway WebSocket connection minutes ({THINK_SECONDS} s a turn)",
    "logs": "CloudWatch Logs ingestion",
    "xray": "X-Ray traces (one per invocation: an upper bound)",
}


def model_cost(usage: Usage) -> float:
    """USD of the model tokens of ``usage`` (unscaled); a model without a price is an error, not zero."""
    if usage.model_id not in MODEL_PRICES:
        if not usage.input_tokens and not usage.output_tokens:
            return 0.0
        raise KeyError(f"no price for model {usage.model_id!r}: add it to bench/prices.py MODEL_PRICES")
    input_price, output_price = MODEL_PRICES[usage.model_id]
    return usage.input_tokens * price(input_price) + usage.output_tokens * price(output_price)


def bill(usage: Usage, per_turns: int = PER_TURNS) -> dict[str, float]:
    """USD per ``per_turns`` turns of every component (and ``model``), from what ``usage`` counted."""
    if usage.turns < 1:
        raise ValueError(f"usage of {usage.design} counted no turns")
    invocations = len(usage.invocations)
    log_bytes = usage.log_bytes + PLATFORM_LOG_BYTES * invocations
    unscaled = {
        "lambda_requests": invocations * price("lambda.requests"),
        "lambda_duration": sum(i.billed_gb_seconds for i in usage.invocations) * price("lambda.arm64_gb_second"),
        "dynamodb_writes": (usage.write_units + usage.index_write_units) * price("dynamodb.write_request_unit"),
        "dynamodb_reads": usage.read_units * price("dynamodb.read_request_unit"),
        "firehose": usage.firehose_billed_bytes / GB * price("firehose.ingested_gb"),
        "eventbridge": usage.events * price("eventbridge.custom_events")
        + usage.event_bytes / GB * price("eventbridge.archive_gb"),
        "sns": usage.sns_requests * price("sns.requests"),
        "sqs": usage.sqs_requests * price("sqs.requests"),
        "websocket_messages": usage.ws_messages * price("apigateway.websocket_messages"),
        "websocket_minutes": usage.connection_seconds / 60 * price("apigateway.connection_minutes"),
        "logs": log_bytes / GB * price("cloudwatch.logs_ingested_gb"),
        "xray": invocations * price("xray.traces"),
        "model": model_cost(usage),
    }
    scale = per_turns / usage.turns
    return {key: value * scale for key, value in unscaled.items()}


# ----------------------------------------------------------------------------------- measuring


def synthesize(outdir: Path) -> Path:
    """The stage's cloud assembly, synthesized by the CDK CLI as ``make synth`` does."""
    env = {
        **os.environ,
        "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION": "1",
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
        "CDK_DISABLE_CLI_TELEMETRY": "true",
    }
    command = ["npx", "--no-install", "cdk", "synth", "--app", f"{sys.executable} app.py", "-q", "--no-notices"]
    subprocess.run(  # noqa: S603
        [*command, "-c", f"stage={STAGE}", "-o", str(outdir)], cwd=ROOT, env=env, check=True, capture_output=True
    )
    return outdir / f"assembly-MangaAssist-{STAGE}"


def _answer(request: dict[str, Any]) -> str:
    """The stubbed model: the summary text when asked to summarise, else the chat reply."""
    from lambdas.events import summary

    system = [str(block.get("text", "")) for block in request.get("system") or []]
    last: dict[str, Any] = next((m for m in reversed(request.get("messages") or []) if m.get("role") == "user"), {})
    asked = "".join(str(block.get("text", "")) for block in last.get("content") or [])
    summarising = system == [summary.SYSTEM_PROMPT] or "New conversation segment:" in asked
    return SUMMARY_TEXT if summarising else REPLY


@contextlib.contextmanager
def _handlers(design: str) -> Iterator[None]:
    """Run the seed-shaped handlers in place of the app's (the functions stay the stage's)."""
    from unittest import mock

    from embedded import runtime as lambda_bridge

    if design == DESIGNS[0]:
        yield
        return
    resolve = lambda_bridge.resolve_handler

    def seed_shaped(name: str) -> Any:
        return resolve(SEED_SHAPED.get(name) or name)

    with mock.patch.object(lambda_bridge, "resolve_handler", seed_shaped):
        yield


def measure_design(assembly: Path, design: str) -> Usage:
    """Stand the stage up, open the sessions, then count ``design`` answering the turns."""
    from bench.meter import Meter
    from embedded import embedded_stage
    from embedded.function_logs import Sink, function_logs
    from embedded.services.cognito import Directory
    from local.story.base import token_subject

    usage = Usage(design)
    meter = Meter(usage)
    with function_logs(Sink(meter.log)), embedded_stage(assembly) as stage, meter.installed():
        meter.clock = stage.clock
        stage.bedrock.answer = _message_tokens_from_turns(meter.answering(_answer), usage, design)
        usage.model_id = stage.function("lambdas.ws.message.handler").environment.get("BEDROCK_MODEL_ID", "")
        directory = Directory.of(stage)
        ws = stage.websocket
        for session in range(SESSIONS):
            email = f"reader{session}@example.com"
            directory.ensure_user(email, role="customer")
            token = directory.sign_in(email).id_token
            created = stage.rest.request(
                "POST",
                "/sessions",
                headers={"Authorization": f"Bearer {token}"},
                body={"customer_id": token_subject(token)},
            )
            if created.status != 201:
                raise RuntimeError(f"POST /sessions answered {created.status}: {created.body}")
            connection = ws.connect(query={"token": token, "session_id": str(created.json()["session_id"])})
            stage.settle(until=lambda: bool(ws.frames(connection)), timeout=30)  # noqa: B023
            stage.settle()
            before = len(ws.frames(connection))
            with _handlers(design), meter.measuring():
                for turn in range(TURNS_PER_SESSION):
                    stage.clock.advance(THINK_SECONDS)
                    body = json.dumps({"action": "sendMessage", "text": MESSAGES[turn % len(MESSAGES)]})
                    usage.ws_messages += chunks(len(body.encode()), WEBSOCKET_CHUNK)
                    answered = ws.send(connection, body)
                    if answered is not None:  # a route response is a message to the client too
                        usage.ws_messages += chunks(len(json.dumps(answered).encode()), WEBSOCKET_CHUNK)
                    stage.settle()
                    usage.turns += 1
                    usage.connection_seconds += THINK_SECONDS
            # A streamed reply ends in a "final" frame, a reply sent whole is one "message" frame.
            replies = [f for f in ws.frames(connection)[before:] if f.get("type") in ("final", "message")]
            failed = [f"{c.handler}: {c.error!r}" for c in stage.calls.calls if c.error is not None]
            if len(replies) != TURNS_PER_SESSION or failed:
                raise RuntimeError(
                    f"{design}: {len(replies)} replies to {TURNS_PER_SESSION} messages; failed calls: {failed[:3]}"
                )
            if design == DESIGNS[0]:
                _add_recorded_usage(usage, stage, created.json()["session_id"])
            ws.disconnect(connection)
            stage.settle()
        _audit_objects_as_firehose_writes_them(usage, stage)
    return usage


def _audit_objects_as_firehose_writes_them(usage: Usage, stage: Any) -> None:
    """Price the audit locker per object Firehose would write for the audit stream's puts (bench/usage.py)."""
    stream = stage.function(ROUTER_HANDLER).environment.get("AUDIT_STREAM_NAME")
    if not stream:
        return
    description = stage.client("firehose").describe_delivery_stream(DeliveryStreamName=stream)
    hints = description["DeliveryStreamDescription"]["Destinations"][0]["ExtendedS3DestinationDescription"][
        "BufferingHints"
    ]
    objects = firehose_objects(
        [put for put in usage.firehose_puts if put.stream == stream],
        interval_seconds=int(hints["IntervalInSeconds"]),
        size_bytes=int(hints["SizeInMBs"]) * KB * KB,
    )
    usage.reprice_per_object(AUDIT_LOCK_HANDLER, objects)


def _message_tokens_from_turns(counted: Any, usage: Usage, design: str) -> Any:
    """The meter's answer function, leaving this design's chat replies' tokens to :func:`_add_recorded_usage`."""

    def answer(request: dict[str, Any]) -> str:
        tokens, calls = (usage.input_tokens, usage.output_tokens), usage.model_calls[MESSAGE_HANDLER]
        reply: str = counted(request)
        if design == DESIGNS[0] and usage.model_calls[MESSAGE_HANDLER] > calls:
            usage.input_tokens, usage.output_tokens = tokens
        return reply

    return answer


def _add_recorded_usage(usage: Usage, stage: Any, session_id: str) -> None:
    """Add the tokens the session's stored replies record (the model's reported usage) to ``usage``."""
    from local.story.chat import store_of

    for turn in store_of(stage).turns.list_turns(session_id, limit=100).items:
        if turn.usage is not None:
            usage.input_tokens += turn.usage.input_tokens
            usage.output_tokens += turn.usage.output_tokens


#: What the functions find in a Lambda's environment and moto needs: fake credentials, the region.
AWS_ENVIRONMENT: Final = {
    "AWS_ACCESS_KEY_ID": "bench",
    "AWS_SECRET_ACCESS_KEY": "bench",
    "AWS_SESSION_TOKEN": "bench",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
    "POWERTOOLS_TRACE_DISABLED": "1",
    # The harness imports the construct library (the approval gate's runtime), which starts jsii.
    "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION": "1",
    "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
}


def measure() -> dict[str, Usage]:
    """Both designs, on one synthesis of the stage."""
    for name, value in AWS_ENVIRONMENT.items():
        os.environ.setdefault(name, value)
    scratch = Path(tempfile.mkdtemp(prefix="bench-cost-"))
    try:
        assembly = synthesize(scratch)
        return {design: measure_design(assembly, design) for design in DESIGNS}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# ----------------------------------------------------------------------------------- the table


def _short(handler: str) -> str:
    """``lambdas.events.router.handler`` -> ``router``."""
    parts = handler.split(".")
    return parts[-2] if parts[-1] == "handler" and len(parts) > 1 else ".".join(parts[-2:])


def usd(value: float) -> str:
    return f"${value:.6f}" if value < 1 else f"${value:,.4f}"


def _per(usage: Usage, count: float) -> float:
    return count * PER_TURNS / usage.turns


def _ops(usage: Usage, service: str) -> str:
    found = {op.split(".", 1)[1]: n for op, n in sorted(usage.calls.items()) if op.startswith(f"{service}.")}
    return ", ".join(f"{op} {_per(usage, n):,.0f}" for op, n in found.items()) or "no calls"


def details(usage: Usage) -> dict[str, str]:
    """What each component of ``usage`` counted, per 1,000 turns, for the table."""
    invocations = usage.invocations_by_handler()
    by_handler = ", ".join(f"{_short(h)} {_per(usage, n):,.0f}" for h, n in invocations.most_common())
    durations: dict[str, list[float]] = {}
    for inv in usage.invocations:
        durations.setdefault(_short(inv.handler), []).append(inv.seconds)
    average = ", ".join(f"{h} {sum(d) / len(d) * 1000:,.0f} ms" for h, d in durations.items())
    gb_s = _per(usage, sum(i.billed_gb_seconds for i in usage.invocations))
    log_kb = _per(usage, usage.log_bytes) / KB
    platform_kb = _per(usage, PLATFORM_LOG_BYTES * len(usage.invocations)) / KB
    calls = Counter({_short(h): n for h, n in usage.model_calls.items()})
    return {
        "lambda_requests": f"{_per(usage, len(usage.invocations)):,.0f} invocations ({by_handler})",
        "lambda_duration": f"{gb_s:,.1f} GB-s (average {average})",
        "dynamodb_writes": f"{_per(usage, usage.write_units):,.0f} WRU table + "
        f"{_per(usage, usage.index_write_units):,.0f} GSI; {_ops(usage, 'dynamodb')}",
        "dynamodb_reads": f"{_per(usage, usage.read_units):,.0f} RRU",
        "firehose": f"{_per(usage, usage.firehose_records):,.0f} records, "
        f"{_per(usage, usage.firehose_billed_bytes) / KB:,.0f} KB billed; {_ops(usage, 'firehose')}",
        "eventbridge": f"{_per(usage, usage.events):,.0f} events; {_ops(usage, 'events')}",
        "sns": f"{_per(usage, usage.sns_requests):,.0f} requests; {_ops(usage, 'sns')}",
        "sqs": f"{_per(usage, usage.sqs_requests):,.0f} requests; {_ops(usage, 'sqs')}",
        "websocket_messages": f"{_per(usage, usage.ws_messages):,.0f} messages (in + out)",
        "websocket_minutes": f"{_per(usage, usage.connection_seconds) / 60:,.0f} minutes",
        "logs": f"{log_kb + platform_kb:,.0f} KB (app {log_kb:,.0f} KB + Lambda's {platform_kb:,.0f} KB, assumed)",
        "xray": f"{_per(usage, len(usage.invocations)):,.0f} traces",
        "model": f"{_per(usage, usage.input_tokens):,.0f} input + {_per(usage, usage.output_tokens):,.0f} output "
        f"tokens on {usage.model_id or 'no model'}; calls: "
        + ", ".join(f"{h} {_per(usage, n):,.0f}" for h, n in calls.most_common()),
    }


def rows(measured: Mapping[str, Usage]) -> list[dict[str, Any]]:
    """The rows `make bench` prints (keys of bench.__main__.Row): one per component, totals, model."""
    ours, base = measured[DESIGNS[0]], measured[DESIGNS[1]]
    our_bill, base_bill = bill(ours), bill(base)
    our_details, base_details = details(ours), details(base)

    def row(key: str, label: str, **extra: Any) -> dict[str, Any]:
        return {
            "what": f"cost per {PER_TURNS:,} turns: {label}",
            "this": f"{usd(our_bill[key])}: {our_details[key]}",
            "baseline": f"{usd(base_bill[key])}: {base_details[key]}",
            **extra,
        }

    table = [row(key, label) for key, label in COMPONENTS.items()]
    our_total = sum(our_bill[k] for k in COMPONENTS)
    base_total = sum(base_bill[k] for k in COMPONENTS)
    table.append(
        {
            "what": f"cost per {PER_TURNS:,} turns: total AWS, without model tokens",
            "this": f"{usd(our_total)} ({our_total / base_total:.2f}x)",
            "baseline": f"{usd(base_total)} (seed-shaped design, same run)",
            "target": "<= the seed-shaped design",
            "met": our_total <= base_total,
        }
    )
    table.append(row("model", "model tokens (separate line)"))
    table.append(
        {
            "what": f"cost per {PER_TURNS:,} turns: total with model tokens",
            "this": usd(our_total + our_bill["model"]),
            "baseline": usd(base_total + base_bill["model"]),
        }
    )
    return table


def run() -> list[dict[str, Any]]:
    return rows(measure())


def main(argv: list[str]) -> int:
    from embedded.function_logs import function_logs

    with function_logs():
        measured = measure()
    for item in rows(measured):
        print(f"{item['what']}\n  this:     {item['this']}\n  baseline: {item['baseline']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
