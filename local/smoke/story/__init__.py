"""The smoke story: the customer's path as a client sees it, over the wire, and everything it made removed.

Every step calls the stage only as a client can (``local.smoke.client``) and asserts only what a
client can observe: status codes, bodies, frames. The steps that need an operator's powers
(moving the clock, an admin action that touches every session of the stage, reading the
stage's internals) run against ``make local`` where they can and are skipped against a deployed
stage, each with its reason. The first failed step ends the story; whatever it created (users,
the agent's registration, the session, open sockets) is removed in a ``finally`` all the same,
and the report lists what was removed and anything that could not be.

This module holds the order of the steps (``STORY``, and ``READ_ONLY`` for production) and
``SmokeStory``, which runs them. The steps live by theme, each theme a mixin of ``SmokeStory`` in its
own module: ``conversation``, ``handoff``, ``bad_paths``, ``ending``, ``operations`` and
``read_only``; ``removal`` is the cleanup; ``base`` holds what they share.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

from local.smoke.client import StageClient
from local.smoke.story.bad_paths import BadPathSteps
from local.smoke.story.base import (
    Existing,
    Ledger,
    SmokeFailure,
    SmokeReport,
    StepResult,
    StepSpec,
    failure_reason,
)
from local.smoke.story.conversation import ConversationSteps
from local.smoke.story.ending import EndingSteps
from local.smoke.story.handoff import HandoffSteps
from local.smoke.story.operations import OperatorSteps
from local.smoke.story.read_only import ReadOnlySteps
from local.smoke.story.removal import Removal
from local.smoke.target import Target
from local.smoke.users import SmokeUser, UserDirectory

__all__ = [
    "READ_ONLY",
    "STORY",
    "Existing",
    "SmokeFailure",
    "SmokeReport",
    "SmokeStory",
    "StepResult",
    "StepSpec",
]

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


class SmokeStory(
    ConversationSteps,
    HandoffSteps,
    BadPathSteps,
    EndingSteps,
    OperatorSteps,
    ReadOnlySteps,
    Removal,
):
    """The story's state, its steps (the mixins, one per theme) and its run: ``run()`` runs it and cleans up."""

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
        pause: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.target, self.client, self.directory = target, client, directory
        self.run_id, self.timeout, self.narrate = run_id, timeout, narrate
        self.pause = pause
        self.users = {user.label: user for user in users}
        self.existing = existing
        self.steps = READ_ONLY if existing is not None else STORY
        self.tokens = {}
        self.ledger = Ledger()
        self.session_id = ""
        self.socket = None
        self.values = {}
        self._step = None

    async def run(self) -> SmokeReport:
        """Every step in order until one fails; then the cleanup, whatever happened.

        Ctrl-C (``asyncio.run`` cancels this task) ends the story like a failed step: the cleanup
        still runs and the report says the run was interrupted. A second Ctrl-C abandons the cleanup.
        A Ctrl-C that came after a step's last await, or whose cancellation a step's await swallowed
        (on Python 3.11 ``asyncio.wait_for`` returns the result of a wait that ended at the moment
        the cancellation came), still ends the story before the next step: the task counts the
        cancellation it was asked for. With ``pause``, the story awaits it after each step that passed,
        before the next (``make smoke PAUSE=1``).
        """
        started = time.monotonic()
        results = [StepResult(index, spec) for index, spec in enumerate(self.steps, 1)]
        interrupted = False
        task = asyncio.current_task()
        try:
            await self._before()
            for result in results:
                if task is not None and task.cancelling():
                    # Ctrl-C came after the last step's final await: its cancellation is still to be
                    # delivered (at the next await, this one) or a step's wait swallowed it.
                    with contextlib.suppress(asyncio.CancelledError):
                        await asyncio.sleep(0)
                    interrupted = True
                    break
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
                    result.status, result.reason = "failed", failure_reason(error)
                result.seconds = time.monotonic() - step_started
                self.narrate(result, len(results))
                if result.status == "failed":
                    break
                if self.pause is not None and result is not results[-1]:
                    await self.pause()  # Ctrl-C here is a Ctrl-C between steps
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
