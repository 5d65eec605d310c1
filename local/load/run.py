"""A bounded load run on the embedded stage: many sessions chatting at once, some handed to an agent.

``run_load(stage, sessions=50, messages=20)`` opens ``sessions`` customer sessions, then sends
``messages`` rounds: in each round every session sends one message, the sends spread over a pool
of threads (the function bridge runs one handler at a time, so "concurrent" means interleaved
sessions, as a warm container would serve them). The stage's clock stands still but for a step
between rounds, so the chat rate limits (per connection and per customer) admit every message and
no timer fires because the machine is slow. Every
``handoff_every``-th session asks for a human halfway through and a registered agent accepts;
its later messages are acknowledged for the agent instead of answered by the model. At the end
the stream, the queues and the bus are settled, and :func:`check` says what was lost.

Figures (:class:`LoadReport`): wall time, messages/s and turns/s, and per handler the count,
p50/p95/max of its run time, so the slowest step is named. They are reported, never asserted.

Larger runs: ``make load SESSIONS=200 MESSAGES=20`` (``local/load/__main__.py``; or ``LOAD_SESSIONS`` /
``LOAD_MESSAGES`` for the pytest run, ``tests/e2e/test_load.py``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import defaultdict
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from embedded import EmbeddedStage
from embedded.runtime import function_environment
from embedded.services.cognito import Directory
from lambdas.shared.settings import settings
from local.story.base import token_subject
from local.story.chat import SETTLE_LOCK, Chat, open_chat, sign_in, store_of, summary_items, wait_welcome

DEFAULT_SESSIONS = 50
DEFAULT_MESSAGES = 20
DEFAULT_HANDOFF_EVERY = 10
DEFAULT_THREADS = 8


@dataclass
class LoadReport:
    """What one load run did and how long it took."""

    sessions: int
    messages: int
    handoffs: int
    turns: int
    seconds: float
    phases: dict[str, float] = field(default_factory=dict)
    handlers: dict[str, dict[str, float]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def messages_per_second(self) -> float:
        return self.messages / self.seconds if self.seconds else 0.0

    @property
    def turns_per_second(self) -> float:
        return self.turns / self.seconds if self.seconds else 0.0

    def slowest(self) -> tuple[str, dict[str, float]]:
        """The handler that took the most time in all (its figures)."""
        return max(self.handlers.items(), key=lambda item: item[1]["total_s"])

    def lines(self) -> Iterator[str]:
        yield (
            f"{self.sessions} sessions x {self.messages // max(self.sessions, 1)} messages = {self.messages} messages, "
            f"{self.handoffs} handoffs, {self.turns} turns stored in {self.seconds:.1f} s: "
            f"{self.messages_per_second:.1f} messages/s, {self.turns_per_second:.1f} turns/s"
        )
        yield "phases: " + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in self.phases.items())
        ranked = sorted(self.handlers.items(), key=lambda item: -item[1]["total_s"])
        for handler, figures in ranked[:8]:
            yield (
                f"  {handler}: {int(figures['count'])} calls, total {figures['total_s']:.1f} s, "
                f"p50 {figures['p50_ms']:.1f} ms, p95 {figures['p95_ms']:.1f} ms, max {figures['max_ms']:.1f} ms"
            )
        name, figures = self.slowest()
        yield f"slowest step: {name} ({figures['total_s']:.1f} s in all, p95 {figures['p95_ms']:.1f} ms)"


def handler_figures(stage: EmbeddedStage, since: int) -> dict[str, dict[str, float]]:
    times: dict[str, list[float]] = defaultdict(list)
    for call in stage.calls.calls[since:]:
        times[call.handler].append(call.seconds)
    figures = {}
    for handler, seconds in times.items():
        ordered = sorted(seconds)
        figures[handler] = {
            "count": float(len(ordered)),
            "total_s": sum(ordered),
            "p50_ms": statistics.median(ordered) * 1000,
            "p95_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))] * 1000,
            "max_ms": ordered[-1] * 1000,
        }
    return figures


def _rate_gap(stage: EmbeddedStage) -> float:
    """Seconds between rounds that keep every connection and customer under its message rate."""
    with function_environment(stage.function("lambdas.ws.message.handler").environment):
        config = settings()
    per_minute = min(config.chat_connection_messages_per_minute, config.chat_customer_messages_per_minute)
    return 60.0 / per_minute + 0.1


@dataclass
class Handoffs:
    """An admin who registers agents, and the agent who takes each handoff."""

    stage: EmbeddedStage
    directory: Directory
    admin: str = ""
    taken: dict[str, str] = field(default_factory=dict)  # session id -> agent token
    replies: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))  # session id -> turn numbers

    def __post_init__(self) -> None:
        address = "load-admin@example.com"
        self.directory.ensure_user(address, role="admin", verified=True)
        self.admin = self.directory.sign_in(address).id_token

    def hand_over(self, chats: list[Chat]) -> None:
        """One new agent per chat comes online; then each chat's customer asks for a human at once.

        The agents are available before the requests (as agents on shift are), so the workflows
        reserve them at once: no step of the run races a workflow's wait for an agent, which is
        seconds on the e2e stage. Which agent takes which handoff is the workflows' choice; each
        must get its own. The story covers the other order (queued, then an agent accepts).
        """
        rest = self.stage.rest
        agents: dict[str, str] = {}  # agent id -> token
        for _ in chats:
            number = len(self.taken) + len(agents)
            agent = sign_in(self.stage, f"load-agent-{number}", "agent", self.directory)
            agent_id = token_subject(agent)
            body = {"agent_id": agent_id, "display_name": f"agent {number}", "skills": ["general"]}
            admin = {"Authorization": f"Bearer {self.admin}"}
            response = rest.request("POST", "/admin/agents", headers=admin, body=body)
            _expect(response.status == 201, f"registering agent {number}: {response.status} {response.body}")
            auth = {"Authorization": f"Bearer {agent}"}
            response = rest.request("POST", "/agents/me/presence", headers=auth, body={"status": "available"})
            _expect(response.status == 200, f"presence of agent {number}: {response.status} {response.body}")
            agents[agent_id] = agent
        for chat in chats:
            response = rest.request(
                "POST", f"/sessions/{chat.session_id}/handoff", headers=chat.auth(), body={"reason": "general"}
            )
            _expect(response.status == 202, f"handoff of {chat.who}: {response.status} {response.body}")
        store = store_of(self.stage)

        def current(chat: Chat) -> Any:
            return store.handoffs.current_handoff(chat.session_id)

        def all_assigned() -> bool:
            return all((h := current(c)) is not None and h.status == "assigned" for c in chats)

        with SETTLE_LOCK:
            self.stage.settle(until=all_assigned, timeout=120)
        holders = [current(chat).agent_id for chat in chats]
        _expect(len(set(holders)) == len(chats), f"handoffs shared agents: {holders}")
        for chat, agent_id in zip(chats, holders, strict=True):
            _expect(agent_id in agents, f"{chat.who}'s handoff went to {agent_id}, none of the agents on shift")
            self.taken[chat.session_id] = agents[agent_id]

    def reply(self, chat: Chat) -> None:
        """The agent of ``chat``'s handoff answers the customer."""
        agent = self.taken[chat.session_id]
        response = self.stage.rest.request(
            "POST",
            f"/handoffs/{chat.session_id}/messages",
            headers={"Authorization": f"Bearer {agent}"},
            body={"text": f"agent answer {len(self.replies[chat.session_id]) + 1}"},
        )
        _expect(response.status == 201, f"agent reply to {chat.who}: {response.status} {response.body}")
        self.replies[chat.session_id].append(response.json()["turn_number"])


class LoadError(AssertionError):
    """The product lost or repeated something under load."""


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise LoadError(message)


def run_load(
    stage: EmbeddedStage,
    *,
    sessions: int = DEFAULT_SESSIONS,
    messages: int = DEFAULT_MESSAGES,
    handoff_every: int = DEFAULT_HANDOFF_EVERY,
    threads: int = DEFAULT_THREADS,
) -> LoadReport:
    """Run the load (see the module docstring); the report, with ``problems`` from :func:`check`.

    The stage's clock is frozen for the run: it moves only by the gap between rounds, so no timer
    of the stage (an agent's idle limit, a workflow's wait) fires because the machine was slow.
    """
    with stage.clock.frozen():
        return _run_load(stage, sessions, messages, handoff_every, threads)


def _run_load(stage: EmbeddedStage, sessions: int, messages: int, handoff_every: int, threads: int) -> LoadReport:
    directory = Directory.of(stage)
    first_call = len(stage.calls.calls)
    phases: dict[str, float] = {}
    started = time.perf_counter()
    chats = [open_chat(stage, f"load-{i}", directory=directory, settle=False) for i in range(sessions)]
    wait_welcome(stage, chats, timeout=120)
    phases["open sessions"] = time.perf_counter() - started
    handoffs = Handoffs(stage, directory)
    gap = _rate_gap(stage)
    handed = [c for i, c in enumerate(chats) if handoff_every and (i + 1) % handoff_every == 0]
    sending = handing = 0.0
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for round_number in range(1, messages + 1):
            if round_number == messages // 2 + 1:
                mark = time.perf_counter()
                # What the rounds wrote is delivered first: the handoffs' workflows run on their own.
                with SETTLE_LOCK:
                    stage.settle(timeout=300, wait_executions=False)
                if handed:
                    handoffs.hand_over(handed)
                handing += time.perf_counter() - mark
            mark = time.perf_counter()
            texts = [f"{chat.who} message {round_number}" for chat in chats]
            list(pool.map(Chat.say, chats, texts))
            # Each agent answers its customer's message, as an agent on shift does (an agent who
            # stays silent is reassigned after the stage's idle limit).
            list(pool.map(handoffs.reply, [c for c in handed if c.session_id in handoffs.taken]))
            sending += time.perf_counter() - mark
            stage.clock.advance(gap)
    phases["send messages"] = sending
    phases["handoffs"] = handing
    mark = time.perf_counter()
    with SETTLE_LOCK:
        stage.settle(timeout=300, wait_executions=False)
    phases["settle streams and queues"] = time.perf_counter() - mark
    seconds = time.perf_counter() - started
    turns = sum(len(store_of(stage).turns.turns_between(c.session_id, 1, max(1, _turn_count(stage, c)))) for c in chats)
    report = LoadReport(
        sessions, sessions * messages, len(handed), turns, seconds, phases, handler_figures(stage, first_call)
    )
    report.problems = check(stage, chats, set(handoffs.taken), handoffs.replies)
    return report


def _turn_count(stage: EmbeddedStage, chat: Chat) -> int:
    session = store_of(stage).sessions.get_session(chat.session_id)
    return session.turn_count if session is not None else 0


def check(
    stage: EmbeddedStage, chats: list[Chat], handed: set[str], agent_replies: Mapping[str, list[int]]
) -> list[str]:
    """What was lost or repeated: turn numbers, the customer's messages, replies, summaries, bus events."""
    store = store_of(stage)
    with function_environment(stage.function("lambdas.events.router.handler").environment):
        interval = settings().summary_interval
    problems: list[str] = []
    statuses = _status_deliveries(stage)
    for chat in chats:
        count = _turn_count(stage, chat)
        turns = store.turns.turns_between(chat.session_id, 1, max(1, count))
        numbers = [t.turn_number for t in turns]
        if numbers != list(range(1, count + 1)):
            problems.append(f"{chat.who}: turn numbers {numbers[:5]}... are not 1..{count}")
        said = [t.content for t in turns if str(t.role) == "user"]
        if said != chat.sent:
            problems.append(f"{chat.who}: stored {len(said)} of its {len(chat.sent)} messages, or out of order")
        replies = [t.content for t in turns if str(t.role) == "assistant"][1:]  # the welcome is the first
        answered = [text for text in chat.sent if f"You said: {text}" in replies]
        if chat.session_id not in handed and len(answered) != len(chat.sent):
            problems.append(f"{chat.who}: {len(answered)} of {len(chat.sent)} messages got their reply stored")
        numbers = sorted(int(i["summary_number"]["N"]) for i in summary_items(stage, chat.session_id))
        if numbers != list(range(1, count // interval + 1)):
            problems.append(f"{chat.who}: summaries {numbers} for {count} turns (every {interval})")
        mine = {key: n for key, n in statuses.items() if key[0] == chat.session_id}
        if not mine or any(n != 1 for n in mine.values()):
            problems.append(f"{chat.who}: status changes reached the bus's targets {sorted(mine.values())} times")
        agent_turns = [t.turn_number for t in turns if str(t.role) == "agent"]
        if agent_turns != agent_replies.get(chat.session_id, []):
            problems.append(
                f"{chat.who}: agent turns {agent_turns}, the agent's answers were {agent_replies.get(chat.session_id)}"
            )
        session = store.sessions.get_session(chat.session_id)
        if chat.session_id in handed and (session is None or session.status != "handoff"):
            problems.append(f"{chat.who}: handed to an agent, but the session is {session and session.status}")
    summaries = [c for c in stage.bedrock.calls if c.caller and "ummar" in c.caller]
    expected = sum(_turn_count(stage, c) // interval for c in chats)
    if summaries and len(summaries) != expected:
        problems.append(f"{len(summaries)} summarisation calls for {expected} summaries: one was made twice")
    return problems


def _status_deliveries(stage: EmbeddedStage) -> dict[tuple[str, str, str, str], int]:
    """(session, target, event_id, new status) -> how often the bus delivered that SessionStatusChanged."""
    seen: dict[tuple[str, str, str, str], int] = defaultdict(int)
    for delivery in stage.events.deliveries:
        payload = delivery.payload if isinstance(delivery.payload, dict) else {}
        detail = payload.get("detail")
        if isinstance(detail, dict) and "session_id" in detail and "event_id" in detail and "new_status" in detail:
            key = (str(detail["session_id"]), delivery.target_arn, str(detail["event_id"]), str(detail["new_status"]))
            seen[key] += 1
    return dict(seen)


def main(argv: list[str] | None = None) -> int:
    """The command line (``make load``, which sets the offline environment first)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    parser.add_argument("--sessions", type=int, default=DEFAULT_SESSIONS)
    parser.add_argument("--messages", type=int, default=DEFAULT_MESSAGES)
    parser.add_argument("--handoff-every", type=int, default=DEFAULT_HANDOFF_EVERY)
    parser.add_argument("--threads", type=int, default=DEFAULT_THREADS)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    from embedded import embedded_stage
    from embedded.function_logs import function_logs
    from local.story.stage import story_stage

    # The handlers log a JSON line per request to standard output: the output is the report.
    with function_logs(), embedded_stage(story_stage().assembly_dir) as stage:
        report = run_load(
            stage,
            sessions=args.sessions,
            messages=args.messages,
            handoff_every=args.handoff_every,
            threads=args.threads,
        )
    if args.json:
        print(json.dumps(report.__dict__, indent=2, default=str))
    else:
        for line in report.lines():
            print(line)
        for problem in report.problems:
            print("PROBLEM:", problem)
    return 1 if report.problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
