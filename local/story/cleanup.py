"""The story's cleanup steps: the session's own schedule, its run at grace end, the hourly safety net.

A mixin of :class:`local.story.Story`, which provides the stage, the config, the shared values
and the step plumbing declared here.
"""

from __future__ import annotations

import json
import time

from embedded.services.scheduler import due_at
from embedded.services.scheduler import schedules as schedules_on
from local.story.base import StoryParts, expect, present


class CleanupSteps(StoryParts):
    """Steps between the customer's disconnect and the archive (see the module docstring)."""

    def session_cleanup_scheduled(self) -> None:
        started, step = time.monotonic(), self.step("SessionEnded gives the session its own cleanup schedule")
        # Another customer's session was deleted at the same time: waiting too, but it has no schedule.
        store = self.store()
        other = store.sessions.create_session("carol")
        store.turns.add_turn(other.session_id, "user", "please forget me")
        store.sessions.update_status(other.session_id, "deleted")
        self.values["deleted_session"] = other.session_id
        self.stage.settle(timeout=30)
        scheduler_fn = self.stage.function("lambdas.orchestration.cleanup_worker.schedule")
        schedules = schedules_on(self.stage.cloud)
        expect(
            [s["Name"] for s in schedules] == [f"cleanup-{self.session_id}"],
            f"expected one schedule for {self.session_id}, found {[s['Name'] for s in schedules]}",
        )
        (schedule,) = schedules
        session = store.sessions.get_session(self.session_id)
        session = present(session, "session")
        due = present(session.cleanup_at, "the session's cleanup time") + self.config.cleanup_grace_seconds + 60
        expect(due_at(schedule) == due, f"schedule {schedule['ScheduleExpression']} is not at grace end + 60 s")
        expect(schedule["ActionAfterCompletion"] == "DELETE", "the one-time schedule does not delete itself")
        machine = scheduler_fn.environment["CLEANUP_STATE_MACHINE_ARN"]
        expect(schedule["Target"]["Arn"] == machine, f"the schedule starts {schedule['Target']['Arn']}")
        expect(
            json.loads(schedule["Target"]["Input"])["session_id"] == self.session_id,
            f"the schedule cleans {schedule['Target']['Input']}",
        )
        expect(not self.stage.fire_due_schedules(), "a schedule fired before the session's grace period ended")
        step.calls.append(f"scheduler:CreateSchedule {schedule['Name']} {schedule['ScheduleExpression']}")
        step.changes.append(f"one schedule, in group {schedule['GroupName']}; carol's deleted session has none")
        self.done(step, started)

    def grace_ends_session_cleanup(self) -> None:
        started, step = time.monotonic(), self.step("The grace ends: the session's own schedule cleans exactly it")
        self.stage.clock.advance(self.config.cleanup_grace_seconds + 61)
        step.changes.append(f"clock +{self.config.cleanup_grace_seconds + 61}s")
        fired = self.stage.fire_due_schedules()
        expect(len(fired) == 1 and fired[0].deleted, f"fired schedules: {fired}")
        step.calls.append(f"schedule {fired[0].name} fired -> StartExecution; schedule deleted")
        done = self.stage.wait_execution(str(fired[0].result), timeout=40)
        expect(
            done["status"] == "SUCCEEDED",
            f"the scheduled cleanup ended {done['status']}: {self.stage.execution_errors(str(fired[0].result))}",
        )
        expect(schedules_on(self.stage.cloud) == [], "the schedule is still there after it ran")
        store = self.store()
        session = store.sessions.get_session(self.session_id)
        expect(session is not None and session.status == "archived", f"session is {session and session.status}")
        session = present(session, "session")
        left = [type(r).__name__ for r in store.sessions.list_session_items(self.session_id).items]
        expect(left == ["Session"], f"records left after the scheduled cleanup: {left}")
        other = store.sessions.get_session(self.values["deleted_session"])
        expect(other is not None and other.status == "deleted", "the scheduled run touched another session")
        step.changes.append(f"output {done.get('output')}; {self.session_id} archived; carol's session untouched")
        self.done(step, started)

    def hourly_sweep_is_the_safety_net(self) -> None:
        started, step = time.monotonic(), self.step("The hourly sweep cleans what no schedule did")
        store = self.store()
        other = store.sessions.get_session(self.values["deleted_session"])
        expect(other is not None and other.status == "archived", f"carol's session is {other and other.status}")
        left = [type(r).__name__ for r in store.sessions.list_session_items(self.values["deleted_session"]).items]
        expect(left == ["Session"], f"records left of carol's session: {left}")
        step.changes.append(f"carol's deleted session archived to {other.archive_key if other else None}")
        self.done(step, started)
