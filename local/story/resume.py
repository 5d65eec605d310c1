"""The story's resume step: a customer's connection drops, they come back within the grace period and
carry on where they were, with what they missed; the cleanup leaves the resumed session alone, and a
session left longer than the grace period is refused.

A mixin of :class:`local.story.Story`, which provides the stage, the config, the tokens and the
step plumbing declared here.
"""

from __future__ import annotations

import time
from typing import Any

from embedded.services.apigateway_websocket import ConnectionRefused
from lambdas.shared.records import SessionStatus
from local.story.base import Step, StoryParts, expect, present

#: The customer whose connection drops.
DROPPING_CUSTOMER = "erin"


class ResumeSteps(StoryParts):
    """A dropped connection resumes its session (see the module docstring)."""

    def customer_drops_and_resumes(self) -> None:
        started, step = time.monotonic(), self.step("A customer's connection drops; they resume within the grace")
        store, ws = self.store(), self.stage.websocket
        self.sign_in(DROPPING_CUSTOMER, "customer")
        created = self.rest(
            step, "POST", "/sessions", DROPPING_CUSTOMER, body={"customer_id": self.subject(DROPPING_CUSTOMER)}
        )
        expect(created.status == 201, f"POST /sessions answered {created.status}: {created.body}")
        session_id = str(created.json()["session_id"])
        first = self._connect(session_id)
        welcome = ws.frames(first)[0]
        ws.send(first, {"action": "sendMessage", "text": "Is volume 3 of Frieren out yet?"})
        self.stage.settle(until=lambda: any(f.get("type") == "final" for f in ws.frames(first)), timeout=30)
        ws.disconnect(first, status_code=1006, reason="network lost")
        self.stage.settle(timeout=30)
        dropped = present(store.sessions.get_session(session_id), "session")
        expect(dropped.status == SessionStatus.DISCONNECTED, f"after the drop the session is {dropped.status}")
        step.changes.append(f"{DROPPING_CUSTOMER} chatted, the connection dropped: session disconnected")

        grace = self.config.session_resume_grace_seconds
        self.stage.clock.advance(grace // 2)
        second = self._connect(session_id, last_turn=int(welcome["turn_number"]))
        back = ws.frames(second)[0]
        missed = [(t["turn_number"], t["role"]) for t in back.get("turns", [])]
        expect(back["resumed"] is True and back["status"] == "active", f"the welcome after the drop: {back}")
        expect(missed == [(2, "user"), (3, "assistant")], f"the resumed welcome carries turns {missed}")
        step.changes.append(f"clock +{grace // 2}s; reconnected with last_turn 1: resumed, turns {missed}")
        self._cleanup_leaves(step, session_id)

        ws.disconnect(second)
        self.stage.settle(timeout=30)
        self.stage.clock.advance(grace + 1)
        try:
            self._connect(session_id)
            refused = 0
        except ConnectionRefused as err:
            refused = err.status
        expect(refused == 410, f"a resume past the grace answered {refused or 'connected'}")
        step.changes.append(f"left again, clock +{grace + 1}s: resuming is refused (410)")
        self.done(step, started)

    def _connect(self, session_id: str, *, last_turn: int | None = None) -> str:
        # A fresh token each time: the story's clock may have moved past the last one's hour.
        query = {"token": self.sign_in(DROPPING_CUSTOMER, "customer"), "session_id": session_id}
        if last_turn is not None:
            query["last_turn"] = str(last_turn)
        connection_id = self.stage.websocket.connect(query=query)
        self.stage.settle(until=lambda: bool(self.stage.websocket.frames(connection_id)), timeout=30)
        frame: Any = self.stage.websocket.frames(connection_id)[0]
        expect(frame.get("type") == "welcome", f"the first frame is {frame}")
        return connection_id

    def _cleanup_leaves(self, step: Step, session_id: str) -> None:
        """The hour after the drop passes: the session's own schedule and the hourly sweep run and leave it."""
        self.stage.clock.advance(self.config.cleanup_grace_seconds + 61)
        fired = self.stage.fire_due_schedules()
        for schedule in fired:
            self.stage.wait_execution(str(schedule.result), timeout=40)
        (hourly,) = self.stage.all(
            "AWS::Events::Rule", where=lambda r: r.properties.get("ScheduleExpression") == "rate(1 hour)"
        )
        self.stage.fire_schedule(hourly)
        self.stage.settle(timeout=40)
        session = present(self.store().sessions.get_session(session_id), "session")
        kept = len(self.store().turns.turns_between(session_id, 1, session.turn_count))
        expect(session.status == SessionStatus.ACTIVE, f"after the cleanup ran the resumed session is {session.status}")
        expect(kept == session.turn_count == 4, f"the resumed session kept {kept} of {session.turn_count} turns")
        step.changes.append(f"the schedule ({len(fired)} fired) and the hourly sweep ran: the session keeps 4 turns")
