"""The smoke story's operator steps: the admin's cleanup sweep, make local's background errors, the escalation.

Each needs an operator's powers (a stage-wide action, the stage's internals, the clock): ``STORY`` in
:mod:`local.smoke.story` says where each is skipped, with its reason.

A mixin of :class:`local.smoke.story.SmokeStory`, which provides the state and the plumbing declared in
``SmokeParts``.
"""

from __future__ import annotations

import asyncio
import time
import urllib.parse

from local.smoke.story.base import SmokeFailure, SmokeParts, expect


class OperatorSteps(SmokeParts):
    """Steps only an operator may take (see the module docstring)."""

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
