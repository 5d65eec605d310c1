"""A discrete-event simulation (SimPy) of the message path at a stage's target load, and at twice it.

Run with ``python -m bench.capacity_sim`` (``make bench`` runs it too): it prints a table and writes
it into docs/capacity.md between :data:`START` and :data:`END`. Seeded: the same settings give the
same table.

What is simulated, from the customer's socket to the model and on to the stream router:

* Chats send messages as a Poisson process at ``concurrent_chats x messages_per_chat_per_minute``,
  connects arrive at ``connects_per_second``: at the target during the warm-up (the stage has been
  at its target a while), then times the load factor (a surge to twice the target).
* API Gateway's token buckets on ``$connect`` and ``sendMessage`` (the derived rates and bursts):
  a refused connect is answered 429 on the handshake, a refused message with a ``Too Many
  Requests`` frame. Nothing refused was stored: the customer sends it again.
* The message function: at most its reserved concurrency at once; new execution environments at
  Lambda's scaling rate (1,000 every 10 s per function) with a cold start each. An invocation over
  either limit is Lambda's 429, which the gateway answers with an error frame.
* Inside it, the turn's AWS calls (:data:`BEFORE_MODEL`, :data:`AFTER_MODEL`: the DynamoDB calls
  the cost run counts per turn), then the model: its requests-per-minute and tokens-per-minute
  quotas as buckets at the stage's derived need, retried as the stage does (``bedrock_attempts``),
  a time to first token and a rate of tokens, the frames posted as the reply is written. A call the
  quota still refuses after the retries gets a ``no reply`` frame; the customer's turn is stored.
* The stream: each turn's routed records on one of the derived shards, read by the router in
  batches of the derived size and window, as many at once per shard as the parallelization factor.

No time is asserted: the table reports, and tests run a small configuration for its outcome.
"""

from __future__ import annotations

import math
import random
import statistics
import sys
from collections import deque
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import simpy

from stacks.capacity import (
    OUTPUT_TOKEN_BURNDOWN,
    ROUTED_RECORDS_PER_TURN,
    CapacityConfig,
    CapacityLimits,
    capacity,
    router_batch_seconds,
)
from stacks.project import cdk_json_context

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "capacity.md"
START: Final = "<!-- capacity simulation: written by make bench (bench/capacity_sim.py) -->"
END: Final = "<!-- end of capacity simulation -->"
SEED: Final = 20261127
#: Seconds of arrivals; the first WARMUP_SECONDS are left out of the latency figures (cold starts).
ARRIVAL_SECONDS: Final = 120.0
WARMUP_SECONDS: Final = 30.0
#: The model's attempts a turn (the stage's bedrock_attempts) and the backoff before each retry (s).
MODEL_ATTEMPTS: Final = 3
MODEL_BACKOFF: Final = (0.25, 0.5)
#: Lambda's scaling rate per function: 1,000 new execution environments every 10 seconds.
SCALING_BURST: Final = 1000
SCALING_RATE: Final = 100.0
#: How often Lambda polls a stream shard (s).
POLL_SECONDS: Final = 0.25


@dataclass(frozen=True)
class LogNormal:
    """A duration (s) or a rate, log-normally distributed, by its median and its 95th percentile."""

    median: float
    p95: float

    def draw(self, rng: random.Random) -> float:
        sigma = math.log(self.p95 / self.median) / 1.645
        return rng.lognormvariate(math.log(self.median), sigma)


#: The turn's AWS calls before the model: the session, the connection's and the customer's message
#: buckets, the context, the customer's turn (the cost run's DynamoDB calls per turn).
BEFORE_MODEL: Final = (
    ("dynamodb GetItem session", LogNormal(0.006, 0.015)),
    ("dynamodb UpdateItem connection bucket", LogNormal(0.007, 0.018)),
    ("dynamodb UpdateItem customer bucket", LogNormal(0.007, 0.018)),
    ("dynamodb Query context", LogNormal(0.009, 0.025)),
    ("dynamodb PutItem customer turn", LogNormal(0.007, 0.018)),
)
#: After the model: the reply's turn and the session's last activity.
AFTER_MODEL: Final = (
    ("dynamodb PutItem reply turn", LogNormal(0.007, 0.018)),
    ("dynamodb UpdateItem session", LogNormal(0.007, 0.018)),
)
POST_TO_CONNECTION: Final = LogNormal(0.012, 0.035)
COLD_START: Final = LogNormal(0.35, 0.7)
#: Time to the model's first token and its tokens per second (the default model through its
#: cross-region profile; bench/usage.py's 0.6 s and 120 tokens/s as medians).
FIRST_TOKEN: Final = LogNormal(0.6, 1.1)
TOKENS_PER_SECOND: Final = LogNormal(120.0, 180.0)


class Bucket:
    """A token bucket on the simulation's clock: ``burst`` tokens, refilled at ``rate`` a second."""

    def __init__(self, env: simpy.Environment, rate: float, burst: float) -> None:
        self.env, self.rate, self.burst = env, rate, burst
        self.tokens, self.updated = float(burst), 0.0

    def take(self, amount: float = 1.0) -> bool:
        now = float(self.env.now)
        self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        if self.tokens < amount:
            return False
        self.tokens -= amount
        return True


@dataclass(frozen=True)
class Scenario:
    """One run: a stage's target and limits, and the load as a multiple of the target."""

    stage: str
    target: CapacityConfig
    limits: CapacityLimits
    load: float = 1.0
    arrival_seconds: float = ARRIVAL_SECONDS
    warmup_seconds: float = WARMUP_SECONDS
    seed: int = SEED


@dataclass
class Outcome:
    """What happened to every message and connect of a run."""

    scenario: Scenario
    offered: int = 0
    refused_gateway: int = 0
    refused_lambda: int = 0
    replied: int = 0
    no_reply: int = 0
    model_retries: int = 0
    connects: int = 0
    connects_refused: int = 0
    first_frames: list[float] = field(default_factory=list)
    durations: list[float] = field(default_factory=list)
    most_running: int = 0
    environments: int = 0
    most_backlog: int = 0
    oldest_record: float = 0.0
    records: int = 0
    records_routed: int = 0

    @property
    def lost(self) -> int:
        """Messages that got no frame at all (none may)."""
        return self.offered - self.refused_gateway - self.refused_lambda - self.replied - self.no_reply

    def p95(self, values: Sequence[float]) -> float:
        return statistics.quantiles(values, n=20)[-1] if len(values) >= 2 else (values[0] if values else 0.0)


class MessagePath:
    """The simulated stage: its buckets, the message function's environments and the stream's shards."""

    def __init__(self, env: simpy.Environment, scenario: Scenario) -> None:
        limits, target = scenario.limits, scenario.target
        self.env, self.scenario, self.rng = env, scenario, random.Random(scenario.seed)
        self.out = Outcome(scenario)
        self.message_bucket = Bucket(env, limits.ws_message_rate, limits.ws_message_burst)
        self.connect_bucket = Bucket(env, limits.ws_connect_rate, limits.ws_connect_burst)
        self.scaling = Bucket(env, SCALING_RATE, SCALING_BURST)
        rpm, tpm = limits.bedrock_requests_per_minute, limits.bedrock_tokens_per_minute
        self.model_requests = Bucket(env, rpm / 60, rpm)
        self.model_tokens = Bucket(env, tpm / 60, tpm)
        self.tokens_per_call = (
            target.input_tokens_per_message + OUTPUT_TOKEN_BURNDOWN * target.output_tokens_per_message
        )
        self.running, self.idle = 0, 0
        self.shards: list[deque[float]] = [deque() for _ in range(limits.stream_shards)]
        self.batches = [0 for _ in self.shards]  # batches of each shard being routed

    # ------------------------------------------------------------------ arrivals

    def arrivals(self, rate: float, arrive: Callable[[float], Any]) -> Generator[simpy.Event, Any, None]:
        """Poisson arrivals at ``rate`` during the warm-up (the stage at its target), then at ``rate x load``."""
        while True:
            now = float(self.env.now)
            yield self.env.timeout(
                self.rng.expovariate(rate * (1.0 if now < self.scenario.warmup_seconds else self.scenario.load))
            )
            if self.env.now >= self.scenario.arrival_seconds:
                return
            arrive(float(self.env.now))

    def connect(self, _at: float) -> None:
        self.out.connects += 1
        if not self.connect_bucket.take():
            self.out.connects_refused += 1  # 429 on the handshake: the client connects again later

    def message(self, at: float) -> None:
        self.out.offered += 1
        if not self.message_bucket.take():
            self.out.refused_gateway += 1  # a "Too Many Requests" frame; nothing was stored
            return
        cold = self.idle == 0
        if self.running >= self.scenario.limits.message_reserved_concurrency or (cold and not self.scaling.take()):
            self.out.refused_lambda += 1  # Lambda's 429: the gateway answers with an error frame
            return
        if cold:
            self.out.environments += 1
        else:
            self.idle -= 1
        self.running += 1
        self.out.most_running = max(self.out.most_running, self.running)
        self.env.process(self.turn(at, cold))

    # ------------------------------------------------------------------ the message function

    def calls(self, calls: Iterable[tuple[str, LogNormal]]) -> Generator[simpy.Event, Any, None]:
        for _name, latency in calls:
            yield self.env.timeout(latency.draw(self.rng))

    def turn(self, at: float, cold: bool) -> Generator[simpy.Event, Any, None]:
        start = float(self.env.now)
        if cold:
            yield self.env.timeout(COLD_START.draw(self.rng))
        yield from self.calls(BEFORE_MODEL)
        self.records(2)  # the customer's turn and the session's update reach the stream
        answered = yield from self.model(at)
        if answered:
            yield from self.calls(AFTER_MODEL)
            self.records(ROUTED_RECORDS_PER_TURN - 2)
            self.out.replied += 1
        else:
            yield self.env.timeout(POST_TO_CONNECTION.draw(self.rng))  # the "no reply" frame
            self.out.no_reply += 1
        if at >= self.scenario.warmup_seconds:
            self.out.durations.append(float(self.env.now) - start)
        self.running -= 1
        self.idle += 1

    def model(self, at: float) -> Generator[simpy.Event, Any, bool]:
        for attempt in range(MODEL_ATTEMPTS):
            if self.model_requests.take() and self.model_tokens.take(self.tokens_per_call):
                break
            self.out.model_retries += 1
            if attempt == MODEL_ATTEMPTS - 1:
                return False
            yield self.env.timeout(MODEL_BACKOFF[attempt] * (0.5 + self.rng.random()))
        yield self.env.timeout(FIRST_TOKEN.draw(self.rng) + POST_TO_CONNECTION.draw(self.rng))
        if at >= self.scenario.warmup_seconds:
            self.out.first_frames.append(float(self.env.now) - at)
        tokens = self.scenario.target.output_tokens_per_message
        yield self.env.timeout(tokens / TOKENS_PER_SECOND.draw(self.rng))
        yield self.env.timeout(POST_TO_CONNECTION.draw(self.rng) * 2)  # the last delta and the final frame
        return True

    # ------------------------------------------------------------------ the stream

    def records(self, count: float) -> None:
        whole = int(count) + (1 if self.rng.random() < count - int(count) else 0)
        shard = self.shards[self.rng.randrange(len(self.shards))]  # one session's records share a shard
        for _ in range(whole):
            shard.append(float(self.env.now))
        self.out.records += whole
        self.out.most_backlog = max(self.out.most_backlog, len(shard))

    def poller(self, index: int) -> Generator[simpy.Event, Any, None]:
        limits, shard = self.scenario.limits, self.shards[index]
        while True:
            yield self.env.timeout(POLL_SECONDS)
            while shard and self.batches[index] < limits.stream_parallelization_factor:
                oldest = float(self.env.now) - shard[0]
                if len(shard) < limits.stream_batch_size and oldest < limits.stream_batching_window_seconds:
                    break
                self.out.oldest_record = max(self.out.oldest_record, oldest)
                taken = [shard.popleft() for _ in range(min(limits.stream_batch_size, len(shard)))]
                self.batches[index] += 1
                self.env.process(self.batch(index, len(taken)))
            if (
                self.env.now > self.scenario.arrival_seconds
                and not shard
                and not self.batches[index]
                and not self.running
            ):
                return

    def batch(self, index: int, size: int) -> Generator[simpy.Event, Any, None]:
        yield self.env.timeout(router_batch_seconds(size))
        self.out.records_routed += size
        self.batches[index] -= 1


def simulate(scenario: Scenario) -> Outcome:
    """Run one scenario to the end: arrivals stop, every turn finishes, the stream drains."""
    env = simpy.Environment()
    path = MessagePath(env, scenario)
    target = scenario.target
    messages = target.concurrent_chats * target.messages_per_chat_per_minute / 60
    env.process(path.arrivals(messages, path.message))
    env.process(path.arrivals(target.connects_per_second, path.connect))
    pollers = [env.process(path.poller(i)) for i in range(len(path.shards))]
    env.run(until=simpy.AllOf(env, pollers))
    return path.out


def scenarios(stages: Iterable[tuple[str, CapacityConfig]], loads: Sequence[float] = (1.0, 2.0)) -> list[Scenario]:
    return [Scenario(name, target, target.limits, load) for name, target in stages for load in loads]


HEADER: Final = (
    "stage",
    "load",
    "messages offered",
    "refused: Too Many Requests frame",
    "refused: Lambda 429",
    "replied",
    "no reply (model quota)",
    "lost",
    "first frame p50 / p95 (target)",
    "function p95 (target)",
    "most running / reserved",
    "connects refused (429)",
    "stream: most backlog, oldest record, left",
)


def row(out: Outcome) -> list[str]:
    s, frames = out.scenario, out.first_frames
    p50 = statistics.median(frames) if frames else 0.0
    return [
        s.stage,
        f"{s.load:g}x ({s.target.concurrent_chats * s.load:,.0f} chats)",
        f"{out.offered:,}",
        f"{out.refused_gateway:,}",
        f"{out.refused_lambda:,}",
        f"{out.replied:,}",
        f"{out.no_reply:,}",
        f"{out.lost:,}",
        f"{p50:.2f} / {out.p95(frames):.2f} s ({s.target.first_frame_p95_seconds:g} s)",
        f"{out.p95(out.durations):.2f} s ({s.target.reply_p95_seconds:g} s)",
        f"{out.most_running:,} / {s.limits.message_reserved_concurrency:,}",
        f"{out.connects_refused:,} of {out.connects:,}",
        f"{out.most_backlog:,}, {out.oldest_record:.1f} s, {out.records - out.records_routed:,}",
    ]


def table(outcomes: Sequence[Outcome]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(row(out)) + " |" for out in outcomes]
    return "\n".join(lines)


def write_section(text: str, page: Path = DOC) -> None:
    """Replace what lies between START and END in ``page`` (both must be there)."""
    current = page.read_text()
    head, start, rest = current.partition(START)
    _, end, tail = rest.partition(END)
    if not start or not end:
        raise ValueError(f"{page} has no section marked {START!r} ... {END!r}")
    page.write_text(f"{head}{START}\n{text}\n{END}{tail}")


def stage_targets() -> list[tuple[str, CapacityConfig]]:
    """dev's and prod's targets, from their ``capacity`` blocks in cdk.json (validated as the stage does)."""
    stages = cdk_json_context()["stages"]
    return [(name, capacity(name, stages[name]["capacity"])) for name in ("dev", "prod")]


def section(outcomes: Sequence[Outcome]) -> str:
    seconds = outcomes[0].scenario.arrival_seconds if outcomes else ARRIVAL_SECONDS
    return (
        f"Seed {SEED}; {seconds:g} s of arrivals, latencies from the {WARMUP_SECONDS:g}th second on; "
        "`make bench` rewrites this table.\n\n" + table(outcomes)
    )


def run() -> list[dict[str, Any]]:
    """The rows `make bench` prints (keys of bench.__main__.Row), after writing docs/capacity.md's table."""
    outcomes = [simulate(s) for s in scenarios(stage_targets())]
    write_section(section(outcomes))
    rows = []
    for out in outcomes:
        s = out.scenario
        p95 = out.p95(out.first_frames)
        within = p95 <= s.target.first_frame_p95_seconds and out.lost == 0
        rows.append(
            {
                "what": f"capacity simulation: {s.stage} at {s.load:g}x its target, first frame p95 and messages lost",
                "this": f"{p95:.2f} s, {out.lost} lost, {out.refused_gateway:,} refused with a frame",
                "baseline": "(absolute)",
                "target": f"<= {s.target.first_frame_p95_seconds:g} s, 0 lost",
                "met": within if s.load <= 1 else out.lost == 0,
            }
        )
    return rows


def main(argv: Sequence[str]) -> int:
    outcomes = [simulate(s) for s in scenarios(stage_targets())]
    text = section(outcomes)
    print(text)
    if "--write" in argv:
        write_section(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
