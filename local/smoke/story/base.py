"""What every step of the smoke story shares: the step records, the one way a step fails, the ledger of what
the story created, and ``SmokeParts``: the story's state and the plumbing every step calls (REST and polling
as a user, the customer's chat, what the step saw).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from local.smoke.client import ChatSocket, Reply, StageClient, StreamedReply, Tokens
from local.smoke.target import Target
from local.smoke.users import SmokeUser, UserDirectory


class SmokeFailure(Exception):
    """A step saw what the API does not promise; the message says what was expected and what came."""


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise SmokeFailure(message)


@dataclass(frozen=True)
class StepSpec:
    """One step: its method, what it proves, and when it is skipped (with the reason it gives)."""

    name: str
    title: str
    #: why a deployed stage's smoke skips it (an operator power); None: it runs there
    deployed_skip: str | None = None
    #: why the smoke of make local skips it too; None: it runs there
    local_skip: str | None = None

    def skip_reason(self, target: Target) -> str | None:
        return self.deployed_skip if target.deployed else self.local_skip


@dataclass
class StepResult:
    """What one step did: the calls it made, what it saw, how it ended."""

    index: int
    spec: StepSpec
    #: passed, failed, skipped or "not run" (after a failure)
    status: str = "not run"
    calls: list[str] = field(default_factory=list)
    saw: list[str] = field(default_factory=list)
    reason: str = ""
    seconds: float = 0.0


@dataclass
class SmokeReport:
    """The steps, what the cleanup removed, and whether everything passed and was removed."""

    results: list[StepResult]
    removed: list[str]
    left_behind: list[str]
    seconds: float
    #: what the story created (and the cleanup then removed): users, the agent's id, sessions
    created: Ledger = field(default_factory=lambda: Ledger())
    #: Ctrl-C stopped the story (the cleanup still ran)
    interrupted: bool = False

    def count(self, status: str) -> int:
        return sum(result.status == status for result in self.results)

    @property
    def ok(self) -> bool:
        return self.count("failed") == 0 and not self.left_behind and not self.interrupted

    @property
    def failure(self) -> StepResult | None:
        return next((result for result in self.results if result.status == "failed"), None)


@dataclass
class Ledger:
    """Everything the story created, for the cleanup: recorded before the call that creates it."""

    users: list[SmokeUser] = field(default_factory=list)
    agent_id: str | None = None
    sessions: list[str] = field(default_factory=list)
    deleted_sessions: set[str] = field(default_factory=set)
    handoffs: set[str] = field(default_factory=set)
    sockets: list[ChatSocket] = field(default_factory=list)


@dataclass
class Existing:
    """The user a read-only smoke signs in as (it creates nobody)."""

    email: str
    password: str = field(repr=False)


class SmokeParts:
    """The state of :class:`local.smoke.story.SmokeStory` and the plumbing its step mixins call.

    ``SmokeStory`` sets the state; a mixin inherits from this class and calls the plumbing.
    """

    target: Target
    client: StageClient
    directory: UserDirectory
    run_id: str
    timeout: float
    narrate: Callable[[StepResult, int], None]
    #: the users the story creates, by label (customer, other, agent, admin)
    users: dict[str, SmokeUser]
    existing: Existing | None
    steps: tuple[StepSpec, ...]
    tokens: dict[str, Tokens]
    ledger: Ledger
    session_id: str
    socket: ChatSocket | None
    values: dict[str, Any]
    _step: StepResult | None

    @property
    def skill(self) -> str:
        """The handoff reason and the agent's only skill: no other agent of the stage can take the handoff."""
        return f"smoke_{self.run_id}"

    @property
    def step(self) -> StepResult:
        if self._step is None:
            raise RuntimeError("no step is running")
        return self._step

    def saw(self, line: str) -> None:
        self.step.saw.append(line)

    def signed_in(self, label: str) -> Tokens:
        tokens = self.tokens.get(label)
        if tokens is None:
            raise SmokeFailure(f"{label} is not signed in (an earlier step failed)")
        return tokens

    def token(self, label: str) -> str:
        return self.signed_in(label).id_token

    async def rest(
        self,
        method: str,
        path: str,
        who: str | None,
        body: Any = None,
        *,
        query: dict[str, str] | None = None,
        token: str | None = None,
    ) -> Reply:
        """A REST call as ``who`` (a user's label; None: no token), noted in the step."""
        sent = token if token is not None else (self.token(who) if who is not None else None)
        reply = await self.client.rest(method, path, sent, body, query=query)
        self.step.calls.append(f"{reply}" + (f" (as {who})" if who else ""))
        return reply

    async def poll(self, path: str, who: str, until: Callable[[Reply], bool], what: str) -> Reply:
        reply = await self.client.poll("GET", path, self.token(who), until, what, timeout=self.timeout)
        self.step.calls.append(f"{reply} (as {who}, until {what})")
        return reply

    def open_chat(self) -> ChatSocket:
        if self.socket is None:
            raise SmokeFailure("the customer's chat is not open (an earlier step failed)")
        return self.socket

    async def converse(self, text: str) -> StreamedReply:
        """Send ``text`` and read the assistant's reply: at least one delta, then ``final``, no gaps."""
        socket = self.open_chat()
        before = len(socket.frames)
        await socket.send(text)
        self.step.calls.append(f"sendMessage {text!r}")
        reply = await socket.reply(after=before, timeout=self.timeout)
        expect(reply.kind == "final", f"the reply ended with {reply.end} instead of a final frame")
        expect(reply.deltas >= 1, f"a final frame came without any delta before it: {reply.end}")
        expect(reply.gaps == 0, f"{reply.gaps} delta(s) left a hole in the reply (an offset past its text)")
        expect(bool(reply.text.strip()), "the deltas joined are empty")
        self.saw(f"{reply.deltas} delta(s), then final (turn {reply.end.get('turn_number')}): {shorten(reply.text)}")
        return reply

    async def _local_status(self) -> dict[str, Any]:
        """``make local``'s operator view (``GET /local/status``): over HTTP, but no client's business."""
        url = f"{self.target.local_origin}/local/status"
        async with self.client.http.get(url) as response:
            status, body = response.status, await response.json()
        expect(status == 200 and isinstance(body, dict), f"GET {url} answered {status}")
        return dict(body)


def failure_reason(error: BaseException) -> str:
    """A failure as the report shows it: our own errors say what to fix; anything else names its type."""
    if type(error).__module__.startswith("local."):
        return str(error)
    return f"{type(error).__name__}: {error}"


def shorten(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def forged_token(token: str) -> str:
    """``token`` with another signature: what any client could send, and what no stage may accept."""
    head, _, signature = token.rpartition(".")
    first = "B" if signature[:1] != "B" else "C"  # the first character carries six bits of the signature
    return f"{head}.{first}{signature[1:]}"
