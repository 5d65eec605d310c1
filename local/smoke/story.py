"""The smoke story: the customer's path as a client sees it, over the wire, and everything it made removed.

Every step calls the stage only as a client can (``local.smoke.client``) and asserts only what a
client can observe: status codes, bodies, frames. The steps that need an operator's powers
(moving the clock, an admin action that touches every session of the stage, reading the
stage's internals) run against ``make local`` where they can and are skipped against a deployed
stage, each with its reason. The first failed step ends the story; whatever it created (users,
the agent's registration, the session, open sockets) is removed in a ``finally`` all the same,
and the report lists what was removed and anything that could not be.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from local.smoke.client import ChatSocket, Reply, StageClient, StreamedReply, Tokens, UserExists
from local.smoke.target import Target
from local.smoke.users import SmokeUser, UserDirectory

#: A deployed stage's smoke skips this step: the reason it gives.
_SWEEP_IS_STAGE_WIDE: Final = (
    "POST /admin/cleanup sweeps every ended session of the stage, not only the smoke's; on a deployed "
    "stage the session's own cleanup and the hourly sweep archive the deleted session later"
)
_STATUS_IS_INTERNAL: Final = (
    "reads the stage's internals (make local's /local/status); on a deployed stage read the "
    "dashboard (DashboardUrl) and its alarms instead"
)
_ESCALATION_NEEDS_THE_CLOCK: Final = (
    "needs the clock moved past handoff_agent_wait_seconds (300 s on dev), and it pages the managers; "
    "make demo and tests/e2e/test_story.py move the embedded stage's clock"
)
_LOCAL_CLOCK_IS_REAL: Final = (
    "make local runs on the real clock (handoff_agent_wait_seconds, 300 s on dev); make demo and "
    "tests/e2e/test_story.py move the embedded stage's clock"
)


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


#: The full story: the happy path, then the bad paths, then what needs an operator.
STORY: Final[tuple[StepSpec, ...]] = (
    StepSpec("create_users", "Create the smoke's users: two customers, an agent and an admin"),
    StepSpec("sign_in", "Sign each user in; each token carries its role"),
    StepSpec("register_agent", "The admin registers the agent (POST /admin/agents)"),
    StepSpec("create_session", "The customer creates a session (REST)"),
    StepSpec("connect", "The customer opens the chat (WebSocket): the welcome frame"),
    StepSpec("chat", "The customer asks: the reply streams as deltas, then a final frame"),
    StepSpec("read_back", "The customer reads the session and its turns back: the stored reply is the deltas joined"),
    StepSpec("request_handoff", "The customer asks for a human: the request is acknowledged"),
    StepSpec("agent_sees_the_request", "The agent sees the request in its inbox"),
    StepSpec("agent_accepts", "The agent goes available and accepts: the customer is told"),
    StepSpec("agent_replies", "The customer writes (ack), the agent reads it and replies: the customer receives it"),
    StepSpec("agent_closes", "The agent closes the handoff: the customer is told, the agent loses access"),
    StepSpec("assistant_answers_again", "The assistant answers again"),
    StepSpec("malformed_requests", "Bad path: a malformed body or parameter is a 400 that names the field"),
    StepSpec("other_customer_refused", "Bad path: another customer cannot read, list or delete the session"),
    StepSpec("no_token_refused", "Bad path: no token or a forged one is refused, an agent cannot open the chat"),
    StepSpec("disconnect", "The customer disconnects: the session is disconnected"),
    StepSpec("delete_session", "The customer deletes the session"),
    StepSpec(
        "cleanup_sweep", "An admin's cleanup sweep archives the deleted session", deployed_skip=_SWEEP_IS_STAGE_WIDE
    ),
    StepSpec(
        "no_background_errors",
        "The stage's background delivery reported no new error",
        deployed_skip=_STATUS_IS_INTERNAL,
    ),
    StepSpec(
        "handoff_escalates",
        "A handoff no agent accepts in time escalates to the managers",
        deployed_skip=_ESCALATION_NEEDS_THE_CLOCK,
        local_skip=_LOCAL_CLOCK_IS_REAL,
    ),
)

#: For production: nothing that leaves data behind, with an existing user.
READ_ONLY: Final[tuple[StepSpec, ...]] = (
    StepSpec("sign_in_existing", "Sign in the existing user (SMOKE_EMAIL)"),
    StepSpec("health_read", "A read the user's role may make answers 200"),
    StepSpec("auth_refused", "No token or a forged one is refused (REST), and no token is 401 on the WebSocket"),
)


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


class SmokeStory:
    """The story's state and steps (see the module docstring); ``run()`` runs it and cleans up."""

    def __init__(
        self,
        target: Target,
        client: StageClient,
        directory: UserDirectory,
        *,
        run_id: str,
        users: Sequence[SmokeUser] = (),
        existing: Existing | None = None,
        timeout: float = 60,
        narrate: Callable[[StepResult, int], None] = lambda result, total: None,
    ) -> None:
        self.target, self.client, self.directory = target, client, directory
        self.run_id, self.timeout, self.narrate = run_id, timeout, narrate
        self.users = {user.label: user for user in users}
        self.existing = existing
        self.steps = READ_ONLY if existing is not None else STORY
        self.tokens: dict[str, Tokens] = {}
        self.ledger = Ledger()
        self.session_id = ""
        self.socket: ChatSocket | None = None
        self.values: dict[str, Any] = {}
        self._step: StepResult | None = None

    # ------------------------------------------------------------------ running

    @property
    def skill(self) -> str:
        """The handoff reason and the agent's only skill: no other agent of the stage can take the handoff."""
        return f"smoke_{self.run_id}"

    async def run(self) -> SmokeReport:
        """Every step in order until one fails; then the cleanup, whatever happened.

        Ctrl-C (``asyncio.run`` cancels this task) ends the story like a failed step: the cleanup
        still runs and the report says the run was interrupted. A second Ctrl-C abandons the cleanup.
        """
        started = time.monotonic()
        results = [StepResult(index, spec) for index, spec in enumerate(self.steps, 1)]
        interrupted = False
        try:
            await self._before()
            for result in results:
                skip = result.spec.skip_reason(self.target)
                if skip is not None:
                    result.status, result.reason = "skipped", skip
                    self.narrate(result, len(results))
                    continue
                self._step = result
                step_started = time.monotonic()
                try:
                    await getattr(self, result.spec.name)()
                    result.status = "passed"
                except asyncio.CancelledError:
                    result.status, result.reason, interrupted = "failed", "interrupted (Ctrl-C)", True
                except Exception as error:  # any failure ends the story; the cleanup still runs
                    result.status, result.reason = "failed", _reason(error)
                result.seconds = time.monotonic() - step_started
                self.narrate(result, len(results))
                if result.status == "failed":
                    break
        except asyncio.CancelledError:  # between steps
            interrupted = True
        removed, left_behind = await self.clean_up()
        seconds = time.monotonic() - started
        return SmokeReport(results, removed, left_behind, seconds, self.ledger, interrupted=interrupted)

    async def _before(self) -> None:
        """What the local-only steps compare with later: make local's background errors before the run."""
        if self.target.deployed or self.existing is not None:
            return
        try:
            self.values["errors_before"] = list((await self._local_status())["pump"]["errors"])
        except Exception:  # the step that needs it says so
            self.values["errors_before"] = None

    # ------------------------------------------------------------------ plumbing

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
        self.saw(f"{reply.deltas} delta(s), then final (turn {reply.end.get('turn_number')}): {_short(reply.text)}")
        return reply

    async def _local_status(self) -> dict[str, Any]:
        """``make local``'s operator view (``GET /local/status``): over HTTP, but no client's business."""
        url = f"{self.target.local_origin}/local/status"
        async with self.client.http.get(url) as response:
            status, body = response.status, await response.json()
        expect(status == 200 and isinstance(body, dict), f"GET {url} answered {status}")
        return dict(body)

    # ------------------------------------------------------------------ the story

    async def create_users(self) -> None:
        self.step.calls.append(self.directory.description)
        for user in self.users.values():
            try:
                await self.directory.create(user)
            except UserExists as error:  # not ours: it is left alone
                raise SmokeFailure(f"{error}; it is not the smoke's, so it was left alone (run again)") from None
            except BaseException:
                self.ledger.users.append(user)  # a create that failed midway may have left the user
                raise
            self.ledger.users.append(user)
            self.saw(f"{user.email} ({user.role}, unverified address, a random password)")

    async def sign_in(self) -> None:
        self.step.calls.append(self.directory.sign_in_description)
        for user in self.users.values():
            tokens = await self.directory.sign_in(user.email, user.password)
            expect(tokens.role == user.role, f"{user.email}'s token carries role {tokens.role}, not {user.role}")
            self.tokens[user.label] = tokens
            self.saw(f"{user.label}: {user.role} {tokens.sub}")

    async def register_agent(self) -> None:
        agent_id = self.signed_in("agent").sub
        body = {
            "agent_id": agent_id,
            "display_name": f"Smoke agent {self.run_id}",
            "skills": [self.skill],
            "is_manager": False,
        }
        self.ledger.agent_id = agent_id  # before the call: an answer lost on the way still gets it retired
        reply = await self.rest("POST", "/admin/agents", "admin", body)
        expect(reply.status == 201, f"registering the agent: {reply.detail()}")
        expect(reply.json.get("status") == "offline", f"a new agent is not offline: {reply.detail()}")
        self.saw(f"agent {agent_id}, skill {self.skill}, offline")

    async def create_session(self) -> None:
        customer = self.signed_in("customer").sub
        body = {"customer_id": customer, "metadata": {"source": "web", "language": "en"}}
        reply = await self.rest("POST", "/sessions", "customer", body)
        expect(reply.status == 201, f"creating a session: {reply.detail()}")
        session = reply.json
        self.session_id = str(session.get("session_id", ""))
        expect(bool(self.session_id), f"the new session has no id: {reply.detail()}")
        self.ledger.sessions.append(self.session_id)
        expect(session.get("customer_id") == customer, f"the session names customer {session.get('customer_id')}")
        expect(session.get("status") == "active", f"a new session is {session.get('status')}, not active")
        self.saw(f"session {self.session_id}, active")

    async def connect(self) -> None:
        socket = await self.client.connect(self.token("customer"), self.session_id)
        self.ledger.sockets.append(socket)
        self.socket = socket
        self.step.calls.append(f"connect {socket.description} -> 101")
        welcome = await socket.wait_for(
            lambda frame: frame.get("type") == "welcome", "welcome frame", timeout=self.timeout
        )
        expect(welcome.get("session_id") == self.session_id, f"welcome names another session: {welcome}")
        expect(welcome.get("status") == "active", f"welcome says the session is {welcome.get('status')}")
        self.saw(f"welcome: {_short(str(welcome.get('message', '')))}")

    async def chat(self) -> None:
        question = f"Smoke test {self.run_id}: is volume 3 of Frieren out?"
        reply = await self.converse(question)
        self.values["question"], self.values["reply"] = question, reply

    async def read_back(self) -> None:
        customer = self.signed_in("customer").sub
        session = await self.rest("GET", f"/sessions/{self.session_id}", "customer")
        expect(session.status == 200, f"reading the session: {session.detail()}")
        expect(session.json.get("status") == "active", f"the session is {session.json.get('status')}, not active")
        turns = await self.rest("GET", f"/sessions/{self.session_id}/turns", "customer", query={"limit": "100"})
        expect(turns.status == 200, f"reading the turns: {turns.detail()}")
        stored = {int(t["turn_number"]): t for t in turns.json.get("turns", [])}
        reply: StreamedReply = self.values["reply"]
        number = int(reply.end["turn_number"])
        expect(number in stored, f"the reply's turn {number} is not among the turns read back: {sorted(stored)}")
        expect(
            stored[number].get("role") == "assistant" and stored[number].get("content") == reply.text,
            f"turn {number} holds {stored[number]!r}, not the deltas joined {reply.text!r}",
        )
        asked = [t for t in stored.values() if t.get("role") == "user" and t.get("content") == self.values["question"]]
        expect(len(asked) == 1, f"the question is stored {len(asked)} time(s)")
        listing = await self.rest("GET", f"/customers/{customer}/sessions", "customer")
        expect(listing.status == 200, f"listing the customer's sessions: {listing.detail()}")
        listed = [s.get("session_id") for s in listing.json.get("sessions", [])]
        expect(self.session_id in listed, f"the customer's sessions do not list {self.session_id}: {listed}")
        self.saw(f"{len(stored)} turns; turn {number} is the streamed reply, word for word; the session is listed")

    async def request_handoff(self) -> None:
        reply = await self.rest("POST", f"/sessions/{self.session_id}/handoff", "customer", {"reason": self.skill})
        expect(reply.status == 202, f"asking for a human: {reply.detail()}")
        arn = str(reply.json.get("execution_arn", ""))
        expect(bool(arn), f"the handoff answer names no execution: {reply.detail()}")
        self.ledger.handoffs.add(self.session_id)
        execution = await self.rest("GET", f"/executions/{urllib.parse.quote(arn, safe='')}", "customer")
        expect(execution.status == 200, f"reading the handoff's execution: {execution.detail()}")
        expect(execution.json.get("status") == "RUNNING", f"the handoff is {execution.json.get('status')}, not waiting")
        self.saw("202; the customer reads its handoff's execution: RUNNING (waiting for an agent)")

    async def agent_sees_the_request(self) -> None:
        def listed(reply: Reply) -> bool:
            return any(item.get("session_id") == self.session_id for item in reply.json.get("items", []))

        inbox = await self.poll("/agents/me/inbox", "agent", listed, "the request in the agent's inbox")
        items = [item for item in inbox.json.get("items", []) if item.get("session_id") == self.session_id]
        expect(items[0].get("inbox") == "waiting", f"the request is in the {items[0].get('inbox')} inbox")
        expect(items[0].get("reason") == self.skill, f"the request's reason is {items[0].get('reason')}")
        self.saw(f"waiting inbox: reason {self.skill}, priority {items[0].get('priority')}")

    async def agent_accepts(self) -> None:
        presence = await self.rest("POST", "/agents/me/presence", "agent", {"status": "available"})
        expect(presence.status == 200, f"going available: {presence.detail()}")
        socket = self.open_chat()
        before = len(socket.frames)
        accepted = await self.rest("POST", f"/handoffs/{self.session_id}/accept", "agent")
        expect(accepted.status == 200, f"accepting the handoff: {accepted.detail()}")
        told = await socket.wait_for(
            lambda f: f.get("type") == "notification" and f.get("event_type") == "handoff_started",
            "handoff_started notification",
            after=before,
            timeout=self.timeout,
        )

        def own(reply: Reply) -> bool:
            return any(
                i.get("session_id") == self.session_id and i.get("inbox") == "own" for i in reply.json.get("items", [])
            )

        await self.poll("/agents/me/inbox", "agent", own, "the handoff in the agent's own inbox")
        await self.poll(
            f"/sessions/{self.session_id}",
            "customer",
            lambda r: r.json.get("status") == "handoff",
            "session in handoff",
        )
        self.saw(f"accepted; the customer was told: {_short(str(told.get('text', '')))}")
        self.saw("the handoff is in the agent's own inbox; the session is in handoff")

    async def agent_replies(self) -> None:
        socket = self.open_chat()
        before = len(socket.frames)
        waiting = f"Smoke test {self.run_id}: hello, is someone there?"
        await socket.send(waiting)
        self.step.calls.append(f"sendMessage {waiting!r}")
        ack = await socket.wait_for(lambda f: f.get("type") == "ack", "ack frame", after=before, timeout=self.timeout)
        expect(ack.get("status") == "handoff", f"the ack says {ack.get('status')}, not handoff")
        turns = await self.rest("GET", f"/sessions/{self.session_id}/turns", "agent", query={"limit": "100"})
        expect(turns.status == 200, f"the agent reading the conversation: {turns.detail()}")
        stored = turns.json.get("turns", [])
        expect(
            bool(stored) and stored[-1].get("content") == waiting,
            f"the agent's last turn is {stored[-1] if stored else None}, not the customer's message",
        )
        before = len(socket.frames)
        text = f"Hello, this is the smoke agent of run {self.run_id}."
        sent = await self.rest("POST", f"/handoffs/{self.session_id}/messages", "agent", {"text": text})
        expect(sent.status == 201, f"the agent's reply: {sent.detail()}")
        expect(sent.json.get("delivered") is True, f"the agent's reply was not delivered: {sent.detail()}")
        message = await socket.wait_for(
            lambda f: f.get("type") == "message" and f.get("role") == "agent",
            "agent's message frame",
            after=before,
            timeout=self.timeout,
        )
        expect(message.get("text") == text, f"the customer received {message.get('text')!r}, not {text!r}")
        self.saw(f"the customer's message was acked (turn {ack.get('turn_number')}) and the agent read it")
        self.saw(f"the customer received the agent's reply (turn {message.get('turn_number')})")

    async def agent_closes(self) -> None:
        socket = self.open_chat()
        before = len(socket.frames)
        body = {"resolution": f"smoke test {self.run_id}", "outcome": "resume"}
        closed = await self.rest("POST", f"/handoffs/{self.session_id}/close", "agent", body)
        expect(closed.status == 200, f"closing the handoff: {closed.detail()}")
        expect(closed.json.get("session_status") == "active", f"after the close the session is {closed.json}")
        self.ledger.handoffs.discard(self.session_id)
        told = await socket.wait_for(
            lambda f: f.get("type") == "handoff_closed", "handoff_closed frame", after=before, timeout=self.timeout
        )
        expect(told.get("outcome") == "resume", f"the customer was told outcome {told.get('outcome')}, not resume")
        away = await self.rest("POST", "/agents/me/presence", "agent", {"status": "away"})
        expect(away.status == 200, f"going away: {away.detail()}")
        after = await self.rest("GET", f"/sessions/{self.session_id}", "agent")
        expect(after.status in (403, 404), f"the agent still reads the session after the close: {after.detail()}")
        self.saw(f"closed (resume); the customer was told; the agent is away and now gets {after.status}")

    async def assistant_answers_again(self) -> None:
        await self.converse(f"Smoke test {self.run_id}: thanks, and volume 4?")

    async def malformed_requests(self) -> None:
        # The gateway's request model refuses it first: its own message is generic, its code is the field's kind.
        body = await self.rest("POST", "/sessions", "customer", {"customer_id": 42})
        expect((body.status, body.code) == (400, "BAD_REQUEST_BODY"), f"a number as customer_id: {body.detail()}")
        # What the model cannot check, the handler does, and its message names the field.
        text = await self.rest("POST", f"/handoffs/{self.session_id}/messages", "agent", {"text": " "})
        expect(text.status == 400 and "text" in text.message, f"an empty agent message: {text.detail()}")
        limit = await self.rest("GET", f"/sessions/{self.session_id}/turns", "customer", query={"limit": "500"})
        expect(limit.status == 400 and "limit" in limit.message, f"limit=500: {limit.detail()}")
        self.saw(f"400 {body.code}; 400 {text.message!r}; 400 {limit.message!r}")

    async def other_customer_refused(self) -> None:
        owner = self.signed_in("customer").sub
        statuses = []
        # What names only the session must not tell who owns it.
        for method, path in (
            ("GET", f"/sessions/{self.session_id}"),
            ("GET", f"/sessions/{self.session_id}/turns"),
            ("DELETE", f"/sessions/{self.session_id}"),
        ):
            reply = await self.rest(method, path, "other")
            expect(reply.status in (403, 404), f"the other customer got {reply.detail()}")
            expect(owner not in json.dumps(reply.body), f"the refusal names the session's owner: {reply.detail()}")
            statuses.append(reply.status)
        # Naming the owner does not help either.
        for method, path, body in (
            ("GET", f"/customers/{owner}/sessions", None),
            ("POST", "/sessions", {"customer_id": owner}),
        ):
            reply = await self.rest(method, path, "other", body)
            expect(reply.status in (403, 404), f"the other customer got {reply.detail()}")
            statuses.append(reply.status)
        self.saw(f"refused with {', '.join(map(str, statuses))}; no refusal names the session's owner")

    async def no_token_refused(self) -> None:
        bare = await self.rest("GET", f"/sessions/{self.session_id}", None)
        expect(bare.status == 401, f"no token: {bare.detail()}")
        forged = await self.rest("GET", f"/sessions/{self.session_id}", None, token=_forged(self.token("customer")))
        expect(forged.status in (401, 403), f"a token with a forged signature: {forged.detail()}")
        anonymous = await self.client.handshake_status(None)
        self.step.calls.append(f"connect without a token -> {anonymous}")
        expect(anonymous == 401, f"the chat opened without a token ({anonymous})")
        agent = await self.client.handshake_status(self.token("agent"))
        self.step.calls.append(f"connect with the agent's token -> {agent}")
        expect(agent == 403, f"the chat answered an agent's handshake with {agent}, not 403")
        self.saw(
            f"REST: {bare.status} without a token, {forged.status} forged; WebSocket: 401 without, 403 for an agent"
        )

    async def disconnect(self) -> None:
        socket = self.open_chat()
        await socket.close()
        self.ledger.sockets.remove(socket)
        self.socket = None
        self.step.calls.append(f"close the chat -> {socket.close_code}")
        await self.poll(
            f"/sessions/{self.session_id}",
            "customer",
            lambda r: r.json.get("status") == "disconnected",
            "session disconnected",
        )
        self.saw("session disconnected")

    async def delete_session(self) -> None:
        deleted = await self.rest("DELETE", f"/sessions/{self.session_id}", "customer")
        expect(deleted.status == 202, f"deleting the session: {deleted.detail()}")
        expect(deleted.json.get("status") == "deleted", f"the deletion answered {deleted.detail()}")
        self.ledger.deleted_sessions.add(self.session_id)
        read = await self.rest("GET", f"/sessions/{self.session_id}", "customer")
        expect(read.json.get("status") == "deleted", f"after the deletion the session reads {read.detail()}")
        self.values["deleted_at"] = int(read.json.get("deleted_at") or time.time())
        self.saw("session deleted")

    # ------------------------------------------------------------------ operator steps (make local)

    async def cleanup_sweep(self) -> None:
        # "Older than 0 s" is exclusive on epoch seconds: the sweep sees the session from the next second.
        while time.time() < self.values["deleted_at"] + 1:
            await asyncio.sleep(0.1)
        started = await self.rest("POST", "/admin/cleanup", "admin", {"older_than_seconds": 0})
        expect(started.status == 202, f"starting the cleanup: {started.detail()}")
        arn = urllib.parse.quote(str(started.json.get("execution_arn", "")), safe="")
        done = await self.poll(
            f"/executions/{arn}", "admin", lambda r: r.json.get("status") != "RUNNING", "the cleanup's end"
        )
        expect(done.json.get("status") == "SUCCEEDED", f"the cleanup ended {done.detail()}")
        session = await self.rest("GET", f"/sessions/{self.session_id}", "admin")
        expect(session.json.get("status") == "archived", f"after the sweep the session reads {session.detail()}")
        self.saw(f"cleanup SUCCEEDED; session archived ({session.json.get('archive_key', 'no archive key shown')})")

    async def no_background_errors(self) -> None:
        before = self.values.get("errors_before")
        if not isinstance(before, list):
            raise SmokeFailure("make local's /local/status could not be read before the run")
        status = await self._local_status()
        self.step.calls.append(f"GET {self.target.local_origin}/local/status -> 200")
        new = [error for error in status["pump"]["errors"] if error not in before]
        expect(not new, f"make local's stream and queue delivery failed during the run: {new}")
        self.saw(f"no new delivery error; {status['pump']['moved']} records moved so far")

    async def handoff_escalates(self) -> None:
        raise SmokeFailure("runs only where the clock can be moved: make demo and tests/e2e/test_story.py")

    # ------------------------------------------------------------------ read-only (production)

    async def sign_in_existing(self) -> None:
        existing = self.existing
        if existing is None:
            raise SmokeFailure("no existing user was given (SMOKE_EMAIL, SMOKE_PASSWORD)")
        self.step.calls.append(self.directory.sign_in_description)
        tokens = await self.directory.sign_in(existing.email, existing.password)
        self.tokens["user"] = tokens
        self.saw(f"{existing.email}: {tokens.role} {tokens.sub}")

    def _health_path(self) -> str:
        tokens = self.signed_in("user")
        return {
            "agent": "/agents/me/inbox",
            "admin": "/admin/agents",
        }.get(tokens.role, f"/customers/{tokens.sub}/sessions")

    async def health_read(self) -> None:
        reply = await self.rest("GET", self._health_path(), "user", query={"limit": "1"})
        expect(reply.status == 200, f"a read the user may make: {reply.detail()}")
        self.saw(f"200 in {self.step.calls[-1]}")

    async def auth_refused(self) -> None:
        path = self._health_path()
        bare = await self.rest("GET", path, None, query={"limit": "1"})
        expect(bare.status == 401, f"no token: {bare.detail()}")
        forged = await self.rest("GET", path, None, query={"limit": "1"}, token=_forged(self.token("user")))
        expect(forged.status in (401, 403), f"a token with a forged signature: {forged.detail()}")
        anonymous = await self.client.handshake_status(None)
        self.step.calls.append(f"connect without a token -> {anonymous}")
        expect(anonymous == 401, f"the chat opened without a token ({anonymous})")
        self.saw(f"REST {bare.status} without a token, {forged.status} forged; WebSocket 401 without a token")

    # ------------------------------------------------------------------ cleanup

    async def clean_up(self) -> tuple[list[str], list[str]]:
        """Remove everything in the ledger, in an order that lets each removal succeed; never raises.

        Open sockets first (the stage runs ``$disconnect``, which ends a handoff still waiting),
        then a handoff still open (closed by the admin), the session (deleted), the agent's
        registration (retired: the registry keeps retired agents by design, their handoffs name
        them), and the users last, the admin after everyone else.
        """
        removed: list[str] = []
        left: list[str] = []

        async def attempt(what: str, action: Callable[[], Awaitable[str]]) -> None:
            try:
                removed.append(f"{what}: {await action()}")
            except Exception as error:
                left.append(f"{what}: {_reason(error)}")

        ledger = self.ledger
        for socket in list(ledger.sockets):

            async def close(socket: ChatSocket = socket) -> str:
                await socket.close()
                ledger.sockets.remove(socket)
                return f"closed (code {socket.close_code}; the stage ran $disconnect)"

            await attempt("chat connection", close)
        for session_id in sorted(ledger.handoffs):
            await attempt(f"handoff of session {session_id}", functools.partial(self._close_handoff, session_id))
        for session_id in ledger.sessions:
            await attempt(f"session {session_id}", functools.partial(self._delete_session, session_id))
        if ledger.agent_id is not None:
            await attempt(f"agent {ledger.agent_id}", functools.partial(self._retire, ledger.agent_id))
        for user in sorted(ledger.users, key=lambda u: u.role == "admin"):

            async def delete(user: SmokeUser = user) -> str:
                return "deleted" if await self.directory.delete(user) else "was not there (never created)"

            await attempt(f"user {user.email} ({user.role})", delete)
        return removed, left

    def _operator(self) -> str | None:
        """Who may remove what a customer cannot: the smoke's admin when it signed in."""
        return "admin" if "admin" in self.tokens else None

    async def _close_handoff(self, session_id: str) -> str:
        if self._operator() is None:
            return "left to the customer's disconnect (the admin never signed in)"
        body = {"resolution": f"smoke test {self.run_id} cleanup", "outcome": "end"}
        reply = await self.client.rest("POST", f"/handoffs/{session_id}/close", self.token("admin"), body)
        if reply.status == 200:
            return "closed by the admin"
        if reply.status in (404, 409):
            return f"already ended ({reply.status} {reply.code})"
        raise SmokeFailure(f"closing it as the admin: {reply.detail()}")

    async def _delete_session(self, session_id: str) -> str:
        if session_id in self.ledger.deleted_sessions:
            return "deleted by the story (the stage's cleanup archives it and removes its turns)"
        who = self._operator() or ("customer" if "customer" in self.tokens else None)
        if who is None:
            raise SmokeFailure("nobody signed in may delete it")
        reply = await self.client.rest("DELETE", f"/sessions/{session_id}", self.token(who))
        if reply.status == 202:
            return f"deleted by the {who} (the stage's cleanup archives it and removes its turns)"
        raise SmokeFailure(f"deleting it as the {who}: {reply.detail()}")

    async def _retire(self, agent_id: str) -> str:
        if self._operator() is None:
            raise SmokeFailure("the admin never signed in, so nobody may retire it")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = await self.client.rest("POST", f"/admin/agents/{agent_id}/retire", self.token("admin"))
            if reply.status == 200:
                return "retired (the registry keeps retired agents: their handoffs name them)"
            if reply.status == 404:
                return "was not registered"
            if reply.code == "AgentRetired":
                return "retired already"
            # AgentBusy: the handoff it held is still being released (the customer's $disconnect)
            if reply.code != "AgentBusy" or time.monotonic() > deadline:
                raise SmokeFailure(f"retiring it: {reply.detail()}")
            await asyncio.sleep(0.5)


def _reason(error: BaseException) -> str:
    """A failure as the report shows it: our own errors say what to fix; anything else names its type."""
    if type(error).__module__.startswith("local."):
        return str(error)
    return f"{type(error).__name__}: {error}"


def _short(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _forged(token: str) -> str:
    """``token`` with another signature: what any client could send, and what no stage may accept."""
    head, _, signature = token.rpartition(".")
    first = "B" if signature[:1] != "B" else "C"  # the first character carries six bits of the signature
    return f"{head}.{first}{signature[1:]}"
