"""The dev stage on embedded AWS, kept running for real clients: one worker, a pump, demo users.

Every call into the stage (a REST request, a WebSocket connect, message or disconnect, a
sign-in, a pump step) runs on one worker thread, one at a time, in the order asked: the
handlers run in-process and share moto's backends and the process environment, which the
harness changes per invocation. The workflows run on moto's own Step Functions threads, as in
the tests; their Lambda invocations take the harness's invocation lock, so handlers never
overlap.

The pump does in the background what ``stage.settle()`` does in a test: it delivers the
table's stream and the queues to their functions, fires the one-time schedules that are due and
the stage's ``rate(...)`` rules when their period has passed, on the real clock.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from embedded import EmbeddedStage, embedded_stage
from embedded.cloudformation.intrinsics import Deployed
from embedded.services.bedrock import BedrockStub
from embedded.services.cognito import Directory, SignedIn, claims_of
from embedded.services.sns import published

T = TypeVar("T")
log = logging.getLogger("local")

#: The password of the demo users and of users created without one (meets the pool's policy).
DEMO_PASSWORD = "Local-Passw0rd!"  # noqa: S105 - printed at startup: a user pool on this machine only
ROLES = ("customer", "agent", "admin")
DEMO_USERS = (
    ("customer@example.com", "customer"),
    ("agent@example.com", "agent"),
    ("manager@example.com", "agent"),
    ("admin@example.com", "admin"),
)
#: The demo agent who may take over escalated requests; every other agent is not a manager.
DEMO_MANAGER = "manager@example.com"
#: Who registers the agents that ``create_user`` creates (made on first use).
REGISTRAR = "admin@example.com"
#: What the demo agent can take: the handoff reason the chat page asks with.
DEMO_AGENT_SKILLS = ("general",)
#: A reviewer message's decision links (the approval gate writes one approve and one reject link).
_REVIEW_LINK = re.compile(r"https?://\S+/reviews/(?P<id>[^/\s]+)/(?P<decision>approve|reject)\?\S+")
_RATE = re.compile(r"^rate\((\d+) (minute|minutes|hour|hours|day|days)\)$")
_UNIT_SECONDS = {"minute": 60, "hour": 3600, "day": 86400}


class StageError(Exception):
    """A local-only request the stage refused: ``status`` and a message for the client."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


#: The most ``POST /local/clock`` moves the stage's clock at once (a week, in seconds).
MAX_ADVANCE = 7 * 24 * 3600


@dataclass
class RateRule:
    """An EventBridge rule on a ``rate(...)`` schedule, fired each period after the server started."""

    rule: Deployed
    period: float
    next_at: float


@dataclass
class PumpStats:
    rounds: int = 0
    moved: int = 0
    schedules_fired: int = 0
    rules_fired: int = 0
    errors: list[str] = field(default_factory=list)


class LocalStage:
    """The running stage and the one worker every call goes through (see the module docstring)."""

    def __init__(self, stage: EmbeddedStage, *, password: str = DEMO_PASSWORD) -> None:
        self.stage = stage
        self.directory = Directory.of(stage, password=password)
        self.password = password
        self.demo_users = False  # whether the demo users were created (their password is then shown)
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="stage")
        self._stopping = threading.Event()
        self._activity = threading.Event()  # something was submitted: the pump looks again at once
        self.pump_stats = PumpStats()
        now = stage.clock()
        self.rate_rules: list[RateRule] = []
        self.unscheduled: list[str] = []  # schedule expressions the pump does not fire
        for rule in stage.all("AWS::Events::Rule", where=lambda r: "ScheduleExpression" in r.properties):
            expression = str(rule.properties["ScheduleExpression"])
            match = _RATE.match(expression)
            if match is None:
                self.unscheduled.append(expression)
                continue
            period = int(match.group(1)) * _UNIT_SECONDS[match.group(2).rstrip("s")]
            self.rate_rules.append(RateRule(rule, period, now + period))

    # ------------------------------------------------------------------ the worker

    def submit(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> Future[T]:
        """Run ``call`` on the stage's worker (after everything submitted before it); wakes the pump."""
        future = self._worker.submit(call, *args, **kwargs)
        self._activity.set()
        return future

    def run(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``submit`` and wait for the result (from any thread but the worker)."""
        return self.submit(call, *args, **kwargs).result()

    def stop(self) -> None:
        """Finish what was submitted, then stop the worker (the pump stops at its next round)."""
        self._stopping.set()
        self._activity.set()
        self._worker.shutdown(wait=True, cancel_futures=True)

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    # ------------------------------------------------------------------ the pump

    def pump_once(self) -> int:
        """One round of what ``settle()`` does, plus due schedules and rate rules (on the worker)."""
        stage, stats = self.stage, self.pump_stats
        stats.rounds += 1
        moved = 0
        try:
            moved += stage.streams.pump() + stage.queues.pump()
            fired = stage.fire_due_schedules()
            stats.schedules_fired += len(fired)
            moved += len(fired)
            now = stage.clock()
            for rate in self.rate_rules:
                if now >= rate.next_at:
                    stage.fire_schedule(rate.rule)
                    rate.next_at = now + rate.period
                    stats.rules_fired += 1
                    moved += 1
        except Exception as error:  # a broken record must not stop the stage; it is reported
            log.warning("pump: %s: %s", type(error).__name__, error)
            stats.errors.append(f"{type(error).__name__}: {error}")
            del stats.errors[:-20]
        stats.moved += moved
        return moved

    def pump_forever(self, fastest: float = 0.1, slowest: float = 1.0) -> None:
        """Pump on the worker until ``stop()``.

        Again at once while something moved; after a client's call (which may have written what
        the stream and queues carry on) after it; otherwise after a wait that doubles from
        ``fastest`` to ``slowest`` seconds, so an idle server costs little CPU and a workflow's
        own writes are picked up within ``slowest``.
        """
        interval = fastest
        while not self.stopping:
            try:
                moved = self._worker.submit(self.pump_once).result()
            except (RuntimeError, CancelledError):  # the worker stopped between the check and the submit
                return
            if moved:
                interval = fastest
                continue
            woken = self._activity.wait(interval)
            self._activity.clear()
            interval = fastest if woken else min(slowest, interval * 2)

    # ------------------------------------------------------------------ identity (on the worker)

    def create_user(
        self, email: str, role: str, password: str | None = None, *, register: bool = True, manager: bool = False
    ) -> bool:
        """Create ``email`` in ``role``'s group; an agent is also registered (offline) unless ``register`` is False.

        ``register=False`` leaves the registration to the caller's own admin (``POST /admin/agents``),
        as on a deployed stage, where no helper registers agents. ``manager`` registers the agent as
        one who may take over escalated requests; only an agent can be one.
        """
        if manager and role != "agent":
            raise StageError(400, "manager applies to agents only")
        if role not in ROLES:
            raise StageError(400, f"role must be one of {', '.join(ROLES)}")
        client = self.directory.client
        try:
            created = self.directory.ensure_user(email, role=role, password=password)
        except (client.exceptions.InvalidPasswordException, client.exceptions.InvalidParameterException) as error:
            raise StageError(400, error.response["Error"].get("Message", "invalid user")) from None
        if created and role == "agent" and register:
            self.register_agent(email, password, manager=manager)
        return created

    def delete_user(self, email: str) -> bool:
        """``AdminDeleteUser``: True when ``email`` was a user of the pool, False when it was not.

        Only the pool's user goes: an agent's registration stays in the registry, as on AWS
        (an admin retires it with ``POST /admin/agents/{id}/retire``).
        """
        client = self.directory.client
        try:
            client.admin_delete_user(UserPoolId=self.directory.pool_id, Username=email)
        except client.exceptions.UserNotFoundException:
            return False
        return True

    def register_agent(self, email: str, password: str | None = None, *, manager: bool = False) -> None:
        """Register ``email`` (an agent) through the REST API as the demo admin, as an admin onboards one."""
        agent = self.directory.sign_in(email, password)
        self.directory.ensure_user(REGISTRAR, role="admin")
        admin = self.directory.sign_in(REGISTRAR)
        body = {
            "agent_id": agent.sub,
            "display_name": email.split("@", 1)[0],
            "skills": list(DEMO_AGENT_SKILLS),
            "is_manager": manager,
        }
        response = self.stage.rest.request(
            "POST", "/admin/agents", headers={"Authorization": f"Bearer {admin.id_token}"}, body=body
        )
        if response.status not in (201, 409):
            raise StageError(500, f"registering agent {email} answered {response.status}: {response.body}")

    def sign_in(self, email: str, password: str) -> SignedIn:
        """``InitiateAuth`` (USER_PASSWORD_AUTH) on the stage's pool; 401 for a wrong email or password."""
        client = self.directory.client
        try:
            return self.directory.sign_in(email, password)
        except (client.exceptions.NotAuthorizedException, client.exceptions.UserNotFoundException):
            raise StageError(401, "Incorrect username or password.") from None

    def create_demo_users(self) -> None:
        for email, role in sorted(DEMO_USERS, key=lambda user: user[0] != REGISTRAR):
            self.create_user(email, role, manager=email == DEMO_MANAGER)

    def role_of(self, token: str) -> str:
        groups = claims_of(token).get("cognito:groups") or []
        return str(groups[0]) if groups else "customer"

    def serve_review_links_at(self, rest_url: str) -> None:
        """Point the approval gate's review links at ``rest_url`` (make local's REST port).

        The gate reads its links' base URL from an SSM parameter at run time, which the stage sets to
        the API's address; under ``make local`` that address is the local server, so a reviewer can
        open a link from ``/local/status`` and decide in the browser.
        """
        gate = self.stage.function("gate_runtime.request.handler")
        name = gate.environment["LINK_BASE_URL_PARAMETER"]
        self.stage.client("ssm").put_parameter(Name=name, Value=rest_url, Type="String", Overwrite=True)

    def reviews(self) -> list[dict[str, str]]:
        """The review requests sent to the reviewers so far, newest first: the review id and its links."""
        gate = self.stage.function("gate_runtime.request.handler")
        arn = gate.environment["REVIEWER_TOPIC_ARN"]
        topic = self.stage.only("AWS::SNS::Topic", where=lambda t: t.ref == arn)
        found = []
        for message in reversed(published(self.stage.cloud, topic, [])):
            links = {m["decision"]: m for m in _REVIEW_LINK.finditer(message.message)}
            if "approve" in links and "reject" in links:
                review = {"review_id": links["approve"]["id"]}
                found.append(review | {decision: link.group(0) for decision, link in sorted(links.items())})
        return found

    def advance_clock(self, seconds: float) -> float:
        """Let ``seconds`` pass on the stage's clock at once (on the worker); returns its time now.

        Everything that reads the stage's clock sees them pass: a workflow's ``Wait`` state and
        task timeouts, due schedules and rate rules (the pump looks at once), TTLs, rate limits,
        idle limits and the expiry of tokens already issued.
        """
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 < seconds <= MAX_ADVANCE:
            raise StageError(400, f"advance_seconds must be a number in (0, {MAX_ADVANCE}] (given {seconds!r})")
        self.stage.clock.advance(float(seconds))
        self._activity.set()
        return self.stage.clock()

    def status(self) -> dict[str, Any]:
        """What the stage holds now, for ``GET /local/status`` (on the worker)."""
        ws = self.stage.websocket
        stats = self.pump_stats
        table = self.stage.only("AWS::DynamoDB::Table").ref
        summaries = self.stage.client("dynamodb").scan(
            TableName=table,
            FilterExpression="begins_with(SK, :summary)",
            ExpressionAttributeValues={":summary": {"S": "SUMMARY#"}},
            Select="COUNT",
        )["Count"]
        calls = self.stage.bedrock.calls
        return {
            "connections_open": sum(1 for c in ws.connections.values() if c.open),
            "connections_total": len(ws.connections),
            "gone_posts": len(ws.gone),
            "rest_requests": len(self.stage.rest.log),
            "lambda_invocations": len(self.stage.calls.calls),
            "bedrock_calls": {
                "streamed": sum(c.streamed for c in calls),
                "not_streamed": sum(not c.streamed for c in calls),
            },
            "summaries_written": summaries,
            "running_executions": len(self.stage.running_executions()),
            "reviews": self.reviews(),
            "pump": {
                "rounds": stats.rounds,
                "moved": stats.moved,
                "schedules_fired": stats.schedules_fired,
                "rules_fired": stats.rules_fired,
                "errors": list(stats.errors),
            },
        }


def dev_assembly(root: Path, stage: str = "dev") -> Path:
    """The cloud assembly ``make synth`` writes for ``stage``."""
    return root / "cdk.out" / f"assembly-MangaAssist-{stage}"


@contextmanager
def local_stage(
    assembly: Path,
    *,
    bedrock: BedrockStub,
    passthrough_urls: Sequence[str] = (),
    password: str = DEMO_PASSWORD,
    demo_users: bool = True,
) -> Iterator[LocalStage]:
    """Stand the assembly's stage up on moto and yield it running; stops the worker on exit."""
    if not (assembly / "manifest.json").exists():
        raise FileNotFoundError(f"no cloud assembly at {assembly}: run `make synth` first")
    with embedded_stage(assembly, bedrock=bedrock, passthrough_urls=passthrough_urls) as stage:
        local = LocalStage(stage, password=password)
        try:
            if demo_users:
                local.run(local.create_demo_users)
                local.demo_users = True
            yield local
        finally:
            local.stop()
