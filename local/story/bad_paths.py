"""The story's bad paths: a customer on another's session, a malformed request, a poison stream record.

Each is refused or contained where the product promises: the API answers 403/404 without leaking the
owner, the gateway's model rejects the request before any workflow starts, and the poison record lands
alone in the stream's dead-letter queue while the rest of the batch is processed.

A mixin of :class:`local.story.Story`, which provides the stage, the config, the tokens and the step
plumbing declared in ``StoryParts``.
"""

from __future__ import annotations

import json
import time

from local.story.base import StoryParts, expect, token_subject


class BadPathSteps(StoryParts):
    """What the stage must refuse or contain (see the module docstring)."""

    def other_customer_is_refused(self) -> None:
        started, step = time.monotonic(), self.step("Bad path: a customer reads another customer's session")
        response = self.rest(step, "GET", f"/sessions/{self.session_id}", "mallory")
        expect(response.status in (403, 404), f"mallory read alice's session: {response.status} {response.body}")
        expect(token_subject(self.tokens["alice"]) not in response.body, "the refusal leaks the owner")
        step.changes.append(f"refused with {response.status}")
        self.done(step, started)

    def malformed_request_is_rejected(self) -> None:
        started, step = time.monotonic(), self.step("Bad path: a malformed request is rejected by the model")
        sfn = self.stage.client("stepfunctions")
        machines = self.stage.all("AWS::StepFunctions::StateMachine")

        def executions() -> int:
            return sum(len(sfn.list_executions(stateMachineArn=m.ref)["executions"]) for m in machines)

        before = executions()
        response = self.rest(
            step, "POST", f"/sessions/{self.session_id}/handoff", "alice", body={"reason": "Drop Table;", "x": 1}
        )
        expect(response.status == 400, f"malformed handoff request answered {response.status}")
        expect(executions() == before, "a rejected request still started a workflow")
        step.changes.append(f"400 {response.json()}; no execution started")
        # The gateway cannot check a path parameter's pattern: the session Lambda does, before any start
        malformed = self.rest(step, "POST", "/sessions/not-a-session/handoff", "alice", body={"reason": "general"})
        error = malformed.json().get("error", {}) if malformed.status == 400 else {}
        expect("path.id" in str(error.get("message")), f"a malformed id answered {malformed.status}: {malformed.body}")
        expect(executions() == before, "a malformed session id still started a workflow")
        step.changes.append(f"malformed id: 400 {error.get('code')} naming path.id; no execution started")
        self.done(step, started)

    def poison_record_to_dlq(self) -> None:
        started, step = (
            time.monotonic(),
            self.step("Bad path: a poison stream record lands in the DLQ, nothing else lost"),
        )
        store = self.store()
        other = store.sessions.create_session("bob")
        for i in range(self.config.summary_interval):
            store.turns.add_turn(other.session_id, "user", f"bob {i}")
        client = self.stage.client("dynamodb")
        client.put_item(
            TableName=self.table.ref,
            Item={"PK": {"S": f"SESSION#{other.session_id}"}, "SK": {"S": "TURN#not-a-number"}},
        )
        step.calls.append(f"{self.config.summary_interval} turns of bob's session + 1 corrupt turn item")
        self.stage.settle(timeout=30, wait_executions=False)
        router = self.stage.function("lambdas.events.router.handler")
        (mapping,) = self.stage.mappings_of(router.name)
        expect(mapping.on_failure_arn is not None, "the router's mapping has no on-failure destination")
        dlq = self.stage.only("AWS::SQS::Queue", where=lambda q: q.attributes["Arn"] == mapping.on_failure_arn)
        failures = [json.loads(m["Body"]) for m in self.stage.queue_messages(dlq)]
        expect(len(failures) == 1, f"expected one DLQ record, found {len(failures)}")
        info = failures[0]["DDBStreamBatchInfo"]
        expect(info["batchSize"] == 1, f"the DLQ record covers {info['batchSize']} records, not just the poison")
        summary = store.turns.latest_summary(other.session_id)
        expect(summary is not None, "bob's summary was lost with the poison record")
        step.changes.append(
            f"DLQ: 1 record, sequence {info['startSequenceNumber']} "
            f"(after {failures[0]['requestContext']['approximateInvokeCount']} attempts); bob's summary written"
        )
        self.done(step, started)
