"""The story's cleanup steps: the customer disconnects, the session gets its own schedule, which runs at grace
end; the hourly cleanup archives and deletes, the hourly sweep is the safety net, the archive holds every turn.

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
    """Steps from the customer's disconnect to the archive (see the module docstring)."""

    def disconnect(self) -> None:
        started, step = time.monotonic(), self.step("The customer disconnects")
        self.stage.websocket.disconnect(self.connection_id)
        step.calls.append("$disconnect")
        self.stage.settle(timeout=30)
        session = self.store().sessions.get_session(self.session_id)
        session = present(session, "session")
        expect(session.status == "disconnected", f"session is {session.status} after $disconnect")
        self.values["turns_total"] = session.turn_count
        step.changes.append(f"session disconnected at {session.disconnected_at}; SessionEnded scheduled its cleanup")
        expect(session.archive_key is None, "a session was archived before its grace period")
        self.done(step, started)

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

    def hour_passes_cleanup(self) -> None:
        started, step = time.monotonic(), self.step("An hour passes; the hourly cleanup archives and deletes")
        self.stage.clock.advance(self.config.cleanup_grace_seconds + 60)
        step.changes.append(f"clock +{self.config.cleanup_grace_seconds + 60}s")
        (schedule,) = self.stage.all(
            "AWS::Events::Rule", where=lambda r: r.properties.get("ScheduleExpression") == "rate(1 hour)"
        )
        self.stage.fire_schedule(schedule)
        step.calls.append(f"schedule {schedule.properties['ScheduleExpression']} fired")
        self.stage.settle(timeout=40)
        session = self.store().sessions.get_session(self.session_id)
        session = present(session, "session")
        expect(session.status == "archived", f"session is {session.status} after the cleanup")
        remaining = self.stage.client("dynamodb").query(
            TableName=self.table.ref,
            KeyConditionExpression="PK = :pk",
            ExpressionAttributeValues={":pk": {"S": f"SESSION#{self.session_id}"}},
        )["Items"]
        sort_keys = [item["SK"]["S"] for item in remaining]
        expect(sort_keys == ["META"], f"items left after the cleanup: {sort_keys}")
        step.changes.append(f"session archived to {session.archive_key}; items left: {sort_keys}")
        self.values["archive_key"] = session.archive_key
        self.done(step, started)

    def archive_holds_every_turn(self) -> None:
        started, step = time.monotonic(), self.step("The archive holds every turn")
        bucket = self.stage.function("lambdas.orchestration.cleanup_worker.handler").environment["ARCHIVE_BUCKET"]
        body = self.stage.client("s3").get_object(Bucket=bucket, Key=self.values["archive_key"])["Body"].read()
        lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
        turns = sorted(int(line["turn_number"]) for line in lines if line.get("type") == "turn")
        total = int(self.values["turns_total"])
        expect(turns == list(range(1, total + 1)), f"archive holds turns {turns}, expected 1..{total}")
        step.changes.append(f"s3://{bucket[:24]}.../{self.values['archive_key']}: {len(lines)} lines, turns 1..{total}")
        self.done(step, started)
