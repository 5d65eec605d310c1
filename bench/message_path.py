"""Benchmark of the chat message path: round trips and AWS calls before the model is called, per message.

Run with ``python -m bench.message_path``. The message Lambda's own ``handle_message`` and the
one-call-after-another design it replaced (bench/baseline_message.py) answer the same messages
in the same run, on moto in this process, each on its own connection and customer.

Every AWS call of any botocore client is seen (``RoundTrips.everywhere`` in
embedded/round_trips.py: the store's DynamoDB client, the management API's, and any client a
library creates for itself), and each gets :data:`LATENCY` of simulated network time: on moto a call takes
microseconds, so without it calls made at once would seldom overlap. A call that starts after
another ended waited for it; calls made at once (the message path runs independent ones on a
thread pool) overlap, and count as one sequential round trip. Two cases, since the rate buckets
cost one write when idle and two in a burst: a person typing (messages a minute apart), and a
burst (the next message at once). Ours is measured twice: as the chat page sends a message (with a
``client_message_id``, which makes a resend harmless) and without one.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from unittest import mock

import boto3
from moto import mock_aws

from bench import baseline_message
from embedded.clock import FakeClock
from embedded.events import DEFAULT_API, authorizer_context, ws_event
from embedded.round_trips import RoundTrips
from embedded.services.dynamodb import atomic_requests, create_sessions_table
from lambdas.shared import connections, env
from lambdas.shared.records import Summary, Turn
from lambdas.shared.responder import ReplyEnd
from lambdas.shared.settings import settings
from lambdas.shared.store import DynamoSessionStore, Rate
from lambdas.ws import message
from lambdas.ws.frames import route_context

REGION = "us-east-1"
TABLE = "manga-assist-sessions-bench"
#: Messages per case and design; every figure is their median.
RUNS = 5
#: Simulated network time of one AWS call (DynamoDB in the same region answers in a few ms).
LATENCY = 0.010
#: Turns already in the session, and one rolling summary, so the context reads are real.
HISTORY = 30
TARGET_ROUND_TRIPS = 4
CASES = {"typing": 60.0, "burst": 0.0}  # seconds between two messages


class TimedEcho:
    """The echo responder that notes when it was called: the moment the model would be."""

    def __init__(self) -> None:
        self.called_at = 0.0

    def reply(self, turns: Sequence[Turn], *, summary: Summary | None = None) -> str:
        self.called_at = time.perf_counter()
        return f"You said: {turns[-1].content}"

    def stream(self, turns: Sequence[Turn], *, summary: Summary | None = None) -> Iterator[str | ReplyEnd]:
        yield self.reply(turns, summary=summary)
        yield ReplyEnd("end_turn")


@contextmanager
def _aws() -> Iterator[None]:
    values = {
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": REGION,
        "SESSION_TTL_HOURS": "24",
        "CLEANUP_SHARDS": "8",
        "POWERTOOLS_METRICS_NAMESPACE": "bench",
    }
    with mock.patch.dict(os.environ, {**values, **{k: os.environ[k] for k in values if k in os.environ}}):
        env.reset()
        with mock_aws(), atomic_requests():
            yield
        env.reset()


def _chatting(store: DynamoSessionStore, customer_id: str, connection_id: str) -> str:
    session_id = store.sessions.create_session(customer_id).session_id
    for n in range(1, HISTORY + 1):
        store.turns.add_turn(
            session_id, "user" if n % 2 else "assistant", f"turn {n} about Frieren volume {n % 12 + 1}"
        )
    store.turns.put_summary(
        session_id, 1, summary_text="Alice asks about Frieren.", window_start=1, window_end=20, turn_count_at_summary=20
    )
    store.connections.put_connection(
        connection_id, session_id=session_id, customer_id=customer_id, domain_name="bench", stage="dev"
    )
    return session_id


def _measure(answer: Callable[[str], str], model: TimedEcho, clock: FakeClock, gap: float) -> dict[str, float]:
    """Median round trips and calls before the model, calls in all, and ms to the model call (every client counted)."""
    rounds, before, total, millis = [], [], [], []
    for n in range(RUNS):
        clock.advance(gap)
        with RoundTrips.everywhere(latency=LATENCY) as trips:
            start = time.perf_counter()
            outcome = answer(f"message {n}: is volume 3 of Frieren out?")
        if outcome != "replied":
            raise RuntimeError(f"a bench message was not answered: {outcome}")
        rounds.append(trips.sequential(before=model.called_at))
        before.append(len(trips.operations(before=model.called_at)))
        total.append(len(trips.calls))
        millis.append((model.called_at - start) * 1000)
    return {
        "rounds": statistics.median(rounds),
        "calls_before_model": statistics.median(before),
        "calls": statistics.median(total),
        "ms_to_model": statistics.median(millis),
    }


@dataclass(frozen=True)
class ChatBench:
    """What both chat benchmarks drive, on moto inside :func:`_aws`: the table, the management
    API, a fake clock, the store on them and the stage's two message rates."""

    ddb: Any
    management: Any
    clock: FakeClock
    store: DynamoSessionStore
    per_connection: Rate
    per_customer: Rate
    context_turns: int

    @classmethod
    def create(cls) -> ChatBench:
        ddb = boto3.client("dynamodb", region_name=REGION)
        create_sessions_table(ddb, TABLE)
        management = boto3.client("apigatewaymanagementapi", region_name=REGION, endpoint_url=DEFAULT_API.endpoint)
        clock = FakeClock()
        config = settings()
        return cls(
            ddb=ddb,
            management=management,
            clock=clock,
            store=DynamoSessionStore(TABLE, client=ddb, clock=clock),
            per_connection=Rate(config.chat_connection_messages_per_minute, config.chat_connection_burst),
            per_customer=Rate(config.chat_customer_messages_per_minute, config.chat_customer_burst),
            context_turns=config.context_turns,
        )

    def send_to(self, connection_id: str) -> Callable[[Mapping[str, Any]], bool]:
        """Post a frame to ``connection_id`` through the management API, as the message function does."""
        return lambda frame: connections.post_to_connection(
            DEFAULT_API.endpoint, connection_id, frame, client=self.management
        )


def measure() -> dict[str, dict[str, dict[str, float]]]:
    """Both designs on both cases: {design: {case: figures}}."""
    results: dict[str, dict[str, dict[str, float]]] = {"ours": {}, "ours_id": {}, "baseline": {}}
    with _aws():
        bench = ChatBench.create()
        store, clock, send_to = bench.store, bench.clock, bench.send_to
        model = TimedEcho()

        for case, gap in CASES.items():
            ours_conn, id_conn, base_conn = f"ours-{case}", f"ours-id-{case}", f"base-{case}"
            _chatting(store, f"alice-{case}", ours_conn)
            _chatting(store, f"carol-{case}", id_conn)
            _chatting(store, f"bob-{case}", base_conn)

            def ours(text: str, customer: str = f"alice-{case}", connection_id: str = ours_conn) -> str:
                body = json.dumps({"action": "sendMessage", "text": text})
                return message.handle_message(
                    store, model, _context(customer, connection_id), body, send_to(connection_id)
                )

            def ours_id(text: str, customer: str = f"carol-{case}", connection_id: str = id_conn) -> str:
                client_message_id = "m-" + text.split(":")[0].replace(" ", "-")  # one per message of the run
                body = json.dumps({"action": "sendMessage", "text": text, "client_message_id": client_message_id})
                return message.handle_message(
                    store, model, _context(customer, connection_id), body, send_to(connection_id)
                )

            def baseline(text: str, case: str = case, connection_id: str = base_conn) -> str:
                return baseline_message.handle_message(
                    store,
                    model,
                    connection_id,
                    f"bob-{case}",
                    text,
                    send_to(connection_id),
                    per_connection=bench.per_connection,
                    per_customer=bench.per_customer,
                    context_turns=bench.context_turns,
                    clock=clock,
                )

            results["ours"][case] = _measure(ours, model, clock, gap)
            results["ours_id"][case] = _measure(ours_id, model, clock, gap)
            results["baseline"][case] = _measure(baseline, model, clock, gap)
    return results


def _context(customer_id: str, connection_id: str) -> Any:
    """The route context of a customer's ``sendMessage`` on ``connection_id``."""
    authorizer = authorizer_context(customer_id, customer_id=customer_id, role="customer")
    return route_context(ws_event("sendMessage", connection_id=connection_id, authorizer=authorizer))


def _pair(figures: Mapping[str, Mapping[str, float]], key: str, unit: str = "") -> str:
    return " / ".join(f"{figures[case][key]:.0f}{unit}" for case in CASES)


def run() -> list[dict[str, Any]]:
    """The rows `make bench` prints (keys of bench.__main__.Row)."""
    result = measure()
    ours, keyed, base = result["ours"], result["ours_id"], result["baseline"]
    cases = " / ".join(CASES)
    worst = max(figures[case]["rounds"] for figures in (ours, keyed) for case in CASES)
    return [
        {
            "what": f"chat message: sequential AWS round trips before the model call ({cases}; calls at once count 1; "
            "every client counted)",
            "this": f"{_pair(keyed, 'rounds')} ({_pair(keyed, 'calls_before_model')} calls) with client_message_id, "
            f"{_pair(ours, 'rounds')} ({_pair(ours, 'calls_before_model')} calls) without",
            "baseline": f"{_pair(base, 'rounds')} ({_pair(base, 'calls_before_model')} calls) (one call after another)",
            "target": f"<= {TARGET_ROUND_TRIPS}",
            "met": worst <= TARGET_ROUND_TRIPS,
            "runs": RUNS,
        },
        {
            "what": f"chat message: AWS calls in all, reply stored and posted ({cases})",
            "this": f"{_pair(keyed, 'calls')} with client_message_id, {_pair(ours, 'calls')} without",
            "baseline": _pair(base, "calls"),
            "target": "",
            "met": None,
            "runs": RUNS,
        },
        {
            "what": f"chat message: time to the model call, {LATENCY * 1000:g} ms per AWS call + moto's own ({cases})",
            "this": f"{_pair(keyed, 'ms_to_model', ' ms')} with client_message_id, "
            f"{_pair(ours, 'ms_to_model', ' ms')} without",
            "baseline": _pair(base, "ms_to_model", " ms"),
            "target": "",
            "met": None,
            "runs": RUNS,
        },
    ]


if __name__ == "__main__":
    for row in run():
        print(row)
