"""The story's erasure: alice, who chatted, asked for people and is in an export, has her data erased.

Before the erasure she opens one more session, says something only she said, and asks for a
person (her handoff still waits when the erasure starts). Then she asks ``DELETE
/customers/{id}/data``; the erasure workflow ends her handoff, removes her sessions, items, archive
versions, export rows and user, and its receipt counts them. The step then searches everything the
embedded stage holds for her id, her e-mail address and her words: every table item, every version
of every object of every bucket (gzip unpacked), and every line the stage's functions printed. It
expects none, except in the places ``docs/privacy.md`` says are kept and why (:data:`KEPT`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from itertools import chain
from typing import TYPE_CHECKING, Any, Final

from embedded import EmbeddedStage
from embedded.texts import item_texts, object_texts, output_texts
from lambdas.shared.records import WAITING_STATUSES
from local.story.base import Step, StoryParts, expect

if TYPE_CHECKING:
    from lambdas.shared.store import DynamoSessionStore

#: The customer erased: the story's first customer.
ERASED_CUSTOMER: Final = "alice"
#: What only she said (the search looks for it everywhere after the erasure).
HER_WORDS: Final = "my loyalty card is MA-7781-ALICE"
#: Places that may keep a trace, and why (docs/privacy.md): none. A trace anywhere fails the step.
KEPT: Final[dict[str, str]] = {}


def traces(stage: EmbeddedStage, needles: Iterable[str]) -> list[str]:
    """Where any of ``needles`` appears on the stage: every table item, object version and function output line.

    As ``table:<pk>/<sk>``, ``s3:<bucket>/<key>@<version>`` or ``log:<handler>#<invocation>``
    (:mod:`embedded.texts` reads them).
    """
    wanted = [needle for needle in needles if needle]
    found = {
        where
        for where, text in chain(item_texts(stage), object_texts(stage), output_texts(stage))
        if any(needle in text for needle in wanted)
    }
    return sorted(found)


def handoff_waits(store: DynamoSessionStore, session_id: str) -> Callable[[], bool]:
    """Whether the session's handoff is recorded, waiting for an agent.

    The handoff workflow records it as it starts, after the request's 202: until then there is no
    handoff for an erasure to end, however long a busy machine takes to get there.
    """

    def waiting() -> bool:
        handoff = store.handoffs.current_handoff(session_id)
        return handoff is not None and handoff.status in WAITING_STATUSES

    return waiting


class ErasureSteps(StoryParts):
    """A customer's data erased everywhere (see the module docstring)."""

    def _her_handoff(self, step: Step) -> str:
        """A new session of hers: connected, her words said, a person asked for (still waiting)."""
        created = self.rest(
            step, "POST", "/sessions", ERASED_CUSTOMER, body={"customer_id": self.subject(ERASED_CUSTOMER)}
        )
        expect(created.status == 201, f"POST /sessions answered {created.status}: {created.body}")
        session_id = str(created.json()["session_id"])
        ws = self.stage.websocket
        token = self.auth(ERASED_CUSTOMER)["Authorization"].removeprefix("Bearer ")
        connection = ws.connect(query={"token": token, "session_id": session_id})
        self.stage.settle(until=lambda: bool(ws.frames(connection)), timeout=30)
        ws.send(connection, {"action": "sendMessage", "text": HER_WORDS})
        self.stage.settle(until=lambda: any(f.get("type") == "final" for f in ws.frames(connection)), timeout=30)
        asked = self.rest(step, "POST", f"/sessions/{session_id}/handoff", ERASED_CUSTOMER, body={"reason": "billing"})
        expect(asked.status == 202, f"the handoff request answered {asked.status}: {asked.body}")
        self.stage.settle(timeout=120, until=handoff_waits(self.store(), session_id))
        self.stage.settle(timeout=30, wait_executions=False)
        return session_id

    def erasure_leaves_no_trace(self) -> None:
        started, step = time.monotonic(), self.step("A customer's data is erased: no trace of her is left")
        customer_id = self.subject(ERASED_CUSTOMER)
        email = f"{ERASED_CUSTOMER}@example.com"
        session_id = self._her_handoff(step)
        before = traces(self.stage, [customer_id, email, HER_WORDS])
        expect(bool(before), "before the erasure the stage holds no trace of her: the search finds nothing")

        asked = self.rest(step, "DELETE", f"/customers/{customer_id}/data", ERASED_CUSTOMER)
        expect(asked.status == 202, f"DELETE /customers/{{id}}/data answered {asked.status}: {asked.body}")
        execution = self.stage.wait_execution(asked.json()["execution_arn"], timeout=60)
        expect(execution["status"] == "SUCCEEDED", f"the erasure ended {execution['status']}")
        self.stage.settle(timeout=60, wait_executions=False)
        receipt = self.rest(step, "GET", f"/customers/{customer_id}/data/erasure", "root").json()
        counts: dict[str, Any] = receipt.get("counts", {})
        expect(receipt.get("erasure_status") == "completed", f"the erasure record: {receipt}")
        expect(counts.get("handoffs_ended") == 1 and counts.get("users") == 1, f"the receipt counts {counts}")
        expect(counts.get("sessions", 0) >= 2 and counts.get("export_rows", 0) > 0, f"the receipt counts {counts}")
        expect(self.store().sessions.get_session(session_id) is None, "her last session is still in the table")

        left = [place for place in traces(self.stage, [customer_id, email, HER_WORDS]) if place not in KEPT]
        expect(not left, f"after the erasure a trace of her is left in {left}")
        again = self.rest(
            step, "DELETE", f"/customers/{customer_id}/data", "root", headers={"Idempotency-Key": "again"}
        )
        second = self.stage.wait_execution(again.json()["execution_arn"], timeout=60)
        record = self.rest(step, "GET", f"/customers/{customer_id}/data/erasure", "root").json()
        expect(
            second["status"] == "SUCCEEDED" and not any(record.get("counts", {}).values()),
            f"a second erasure erased more: {record}",
        )
        self.stage.settle(timeout=60, wait_executions=False)  # the receipt's own stream record, routed
        step.changes.append(
            f"before: {len(before)} places held her id, e-mail or words; receipt {counts}; after: none; "
            "a second run counts zeros"
        )
        self.done(step, started)
