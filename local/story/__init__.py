"""The seeds' story, step by step, on the embedded stage: shared by ``test_story`` and ``demo``.

Every step calls the stage only through its public surface (the REST and WebSocket routers built
from the template, the table's stream and the queues' mappings, the workflows' executions) and
asserts what must have changed. Resource roles are found from the template (the function whose
Handler is ..., the queue its mapping reads, the rule whose target is ...), never by name.

Bedrock is stubbed at the client (``embedded.services.bedrock``): the stage config names a model,
so the Message Lambda (``BedrockResponder``) and the summary generator really call
``bedrock-runtime`` Converse; the stub answers chat with the echo responder's reply (replies stay
deterministic) and summarisation requests with :data:`STUB_SUMMARY`, and records every call.
"""

from __future__ import annotations

import html
import json
import re
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from embedded import EmbeddedStage
from embedded.cloudformation.intrinsics import Deployed
from embedded.iam.guard import Refusal
from embedded.services.athena import locked_for
from embedded.services.bedrock import ConverseCall, echo_answer
from embedded.services.cognito import Directory, SignedIn
from embedded.services.firehose import read_lines
from embedded.services.sns import published
from lambdas.events import summary as summary_generator
from lambdas.shared.store import DynamoSessionStore
from local.story.base import Step, StoryError, expect, present, streamed_replies, token_subject
from local.story.cleanup import CleanupSteps
from local.story.escalation import EscalationSteps
from local.story.export import REQUESTER_EMAIL, ExportNoticeSteps
from local.story.handoff import HandoffLifeSteps
from local.story.identity import IdentitySteps
from local.story.inbox import InboxSteps
from local.story.limits import LimitSteps
from local.story.registry import RegistrySteps
from stacks.config import StageConfig

__all__ = ["STEPS", "Step", "Story", "StoryError", "run_story", "token_subject"]

#: What the stubbed model answers to every summarisation request.
STUB_SUMMARY = "Alice is looking for Frieren and asked about it five times; nothing is decided yet."
_ROLES = ("user", "assistant", "agent", "system")


def stub_answer(request: dict[str, Any]) -> str:
    """The stubbed model: a fixed summary for the summary generator, the echo reply for chat."""
    system = [block.get("text") for block in request.get("system", [])]
    return STUB_SUMMARY if system == [summary_generator.SYSTEM_PROMPT] else echo_answer(request)


def is_summarisation(call: ConverseCall) -> bool:
    return call.system == (summary_generator.SYSTEM_PROMPT,)


def transcript_lines(call: ConverseCall) -> list[str]:
    """The ``role: text`` lines of the conversation segment a summarisation prompt carries."""
    return [line for line in call.prompt.splitlines() if line.split(": ", 1)[0] in _ROLES]


@dataclass
class Story(
    CleanupSteps,
    LimitSteps,
    HandoffLifeSteps,
    InboxSteps,
    RegistrySteps,
    ExportNoticeSteps,
    EscalationSteps,
    IdentitySteps,
):
    """The state the steps share (the cleanup steps come from :class:`CleanupSteps`)."""

    stage: EmbeddedStage
    config: StageConfig
    narrate: Callable[[Step], None] = lambda step: None
    steps: list[Step] = field(default_factory=list)
    tokens: dict[str, str] = field(default_factory=dict)
    session_id: str = ""
    connection_id: str = ""
    values: dict[str, Any] = field(default_factory=dict)
    #: Who is signed in, by the story's name for them (the app client's tokens).
    signed_in: dict[str, SignedIn] = field(default_factory=dict)
    directory: Directory = field(init=False)

    def __post_init__(self) -> None:
        self.stage.bedrock.answer = stub_answer
        self.directory = Directory.of(self.stage)

    # ------------------------------------------------------------------ plumbing

    def step(self, title: str) -> Step:
        step = Step(title)
        self.steps.append(step)
        return step

    def done(self, step: Step, started: float) -> None:
        step.seconds = time.monotonic() - started
        self.narrate(step)

    @property
    def table(self) -> Deployed:
        return self.stage.only("AWS::DynamoDB::Table")

    def store(self) -> DynamoSessionStore:
        return DynamoSessionStore(self.table.ref, client=self.stage.client("dynamodb"), clock=self.stage.clock)

    def auth(self, who: str) -> dict[str, str]:
        """``who``'s bearer header, refreshed first when the stage's clock nears the token's expiry."""
        if who in self.signed_in:
            self.signed_in[who] = self.directory.fresh(self.signed_in[who])
            self.tokens[who] = self.signed_in[who].id_token
        return {"Authorization": f"Bearer {self.tokens[who]}"}

    def rest(self, step: Step, method: str, path: str, who: str | None, **kwargs: Any) -> Any:
        headers = dict(kwargs.pop("headers", {}) or {})
        if who:
            headers.update(self.auth(who))
        response = self.stage.rest.request(method, path, headers=headers, **kwargs)
        step.calls.append(f"{method} {path} -> {response.status}")
        return response

    def queue_label(self, queue_arn: str) -> str:
        """A queue named by what consumes it (the handler of its mapping), from the template."""
        for function in self.stage.functions():
            if any(m.event_source_arn == queue_arn for m in self.stage.mappings_of(function.name)):
                return function.handler.rsplit(".", 2)[-2]
        return queue_arn.rsplit(":", 1)[-1]

    def frames(self) -> list[Any]:
        return self.stage.websocket.frames(self.connection_id)

    # ------------------------------------------------------------------ steps

    def sign_in(self, who: str, role: str, *, email: str | None = None) -> str:
        """``who`` signs in to the stage's user pool (created in ``role``'s group on first use); its ID token.

        Every step that needs a caller gets its token here, so the way tokens are issued changes
        in this one method. ``email`` is a verified address the notices may be mailed to; without
        it the user's address (``<who>@example.com``) stays unverified, so no notice is mailed.
        """
        address = email or f"{who}@example.com"
        self.directory.ensure_user(address, role=role, verified=email is not None)
        self.signed_in[who] = self.directory.sign_in(address)
        self.tokens[who] = self.signed_in[who].id_token
        return self.tokens[who]

    def mint_tokens(self) -> None:
        started, step = time.monotonic(), self.step("Sign in a customer, a second customer, an agent and an admin")
        for who, role in (("alice", "customer"), ("mallory", "customer"), ("agent-7", "agent")):
            self.sign_in(who, role)
        self.sign_in("root", "admin", email=REQUESTER_EMAIL)
        step.calls.append(
            f"cognito-idp:InitiateAuth USER_PASSWORD_AUTH x{len(self.tokens)} (pool {self.directory.pool_id})"
        )
        step.changes.append(f"ID tokens (RS256, the pool's JWKS) for {', '.join(self.tokens)}")
        self.values["early_tokens"] = dict(self.tokens)  # expired by the time the refusals step runs
        self.done(step, started)

    def create_session(self) -> None:
        started, step = time.monotonic(), self.step("Create a session over REST")
        response = self.rest(
            step, "POST", "/sessions", "alice", body={"customer_id": token_subject(self.tokens["alice"])}
        )
        expect(response.status == 201, f"POST /sessions answered {response.status}: {response.body}")
        body = response.json()
        self.session_id = str(body.get("session_id") or body.get("id"))
        session = self.store().sessions.get_session(self.session_id)
        expect(session is not None and session.status == "active", f"no active session {self.session_id}")
        step.changes.append(f"session {self.session_id} (active) in the table")
        self.done(step, started)

    def connect(self) -> None:
        started, step = time.monotonic(), self.step("Connect over WebSocket (authorizer, onboarding workflow)")
        ws = self.stage.websocket
        self.connection_id = ws.connect(query={"token": self.tokens["alice"], "session_id": self.session_id})
        step.calls.append(f"$connect ?token=...&session_id={self.session_id} -> {self.connection_id}")
        self.stage.settle(until=lambda: bool(self.frames()), timeout=20)
        welcome = self.frames()[0]
        expect(welcome.get("type") == "welcome", f"first frame is not a welcome: {welcome}")
        session = self.store().sessions.get_session(self.session_id)
        expect(session is not None and session.connection_id == self.connection_id, "connection not recorded")
        # The greeting is the session's first turn (the summary of turns 1..N starts with it).
        self.values["transcript"] = {int(welcome["turn_number"]): f"assistant: {welcome.get('message')}"}
        step.changes.append(f"frame {welcome.get('type')}; session.connection_id={self.connection_id}")
        self.done(step, started)

    def chat(self, count: int = 10) -> None:
        started, step = time.monotonic(), self.step(f"{count} messages (Bedrock stubbed at the client: echo replies)")
        before, calls_before = len(self.frames()), len(self.stage.bedrock.calls)
        texts = [f"message {i} about Frieren" for i in range(1, count + 1)]
        for text in texts:
            self.stage.websocket.send(self.connection_id, {"action": "sendMessage", "text": text})
        step.calls.append(f"sendMessage x{count}")
        replies = streamed_replies(self.frames()[before:])
        expect(
            [r.text for r in replies] == [f"You said: {text}" for text in texts]
            and all(r.end is not None and r.end["type"] == "final" for r in replies),
            f"{count} messages got these assistant replies: {self.frames()[before:]}",
        )
        converse = self.stage.bedrock.calls[calls_before:]
        model_ids = {c.model_id for c in converse}
        expect(
            len(converse) == count
            and model_ids == {self.config.bedrock_model_id}
            and all(c.streamed for c in converse),
            f"{count} messages made {len(converse)} ConverseStream calls on {sorted(model_ids)}",
        )
        expect(
            [c.prompt for c in converse] == texts,
            f"ConverseStream was not asked the messages: {[c.prompt for c in converse]}",
        )
        # Streamed in batches: each reply took fewer PostToConnection calls (its frames) than its tokens
        posts = [(r.frames, c.tokens) for r, c in zip(replies, converse, strict=True)]
        expect(
            all(frames < model_tokens for frames, model_tokens in posts),
            f"replies took as many posts as tokens or more (posts, tokens): {posts}",
        )
        step.calls.append(
            f"bedrock-runtime:ConverseStream x{len(converse)} on {self.config.bedrock_model_id} (stub); "
            f"PostToConnection per reply {max(f for f, _ in posts)} at most, for {min(t for _, t in posts)}+ tokens"
        )
        # The transcript by turn number, as the table must hold it: each reply follows its message,
        # and the deltas, joined, are exactly the stored reply.
        transcript: dict[int, str] = self.values.setdefault("transcript", {})
        store = self.store()
        for text, reply in zip(texts, replies, strict=True):
            number = present(reply.turn_number, "the reply's turn number")
            transcript[reply.reply_to] = f"user: {text}"
            transcript[number] = f"assistant: {reply.text}"
            stored = store.turns.turns_between(self.session_id, number, number)
            expect(
                [t.content for t in stored] == [reply.text],
                f"turn {number} does not store the streamed reply {reply.text!r}: {stored}",
            )
        session = self.store().sessions.get_session(self.session_id)
        session = present(session, "session")
        step.changes.append(
            f"{len(replies)} streamed replies 'You said: ...' (deltas + final), each stored once; "
            f"turn_count={session.turn_count}"
        )
        self.values["turns_after_chat"] = session.turn_count
        self.done(step, started)

    def summary(self) -> None:
        started, step = (
            time.monotonic(),
            self.step("The stream delivers the turns; the 10th turn triggers a summary (Bedrock stubbed)"),
        )
        calls_before = len(self.stage.bedrock.calls)
        moved = self.stage.settle(timeout=30)
        step.calls.append(f"stream pump: {moved} invocations")
        items = self.stage.client("dynamodb").query(
            TableName=self.table.ref,
            KeyConditionExpression="PK = :pk AND begins_with(SK, :summary)",
            ExpressionAttributeValues={":pk": {"S": f"SESSION#{self.session_id}"}, ":summary": {"S": "SUMMARY#"}},
        )["Items"]
        summaries = {int(i["summary_number"]["N"]): i for i in items}
        windows = [(int(i["window_start"]["N"]), int(i["window_end"]["N"])) for i in items]
        interval = self.config.summary_interval
        first = summaries.get(1)
        expect(
            first is not None and (int(first["window_start"]["N"]), int(first["window_end"]["N"])) == (1, interval),
            f"no SUMMARY#1 of turns 1..{interval}: {windows}",
        )
        first = present(first, "first")
        expect(
            first["summary_text"]["S"] == STUB_SUMMARY,
            f"SUMMARY#1 does not hold the model's summary (extractive fallback?): {first['summary_text']['S'][:200]}",
        )
        # Exactly one Converse call summarised turns 1..N, on the stage's model, with exactly those turns.
        converse = [c for c in self.stage.bedrock.calls[calls_before:] if is_summarisation(c)]
        transcript = self.values["transcript"]
        expected = [transcript.get(n) for n in range(1, interval + 1)]
        window_calls = [c for c in converse if transcript_lines(c) == expected]
        expect(
            len(window_calls) == 1,
            f"{len(window_calls)} summarisation calls for turns 1..{interval}; "
            f"segments sent: {[transcript_lines(c) for c in converse]}",
        )
        expect(
            window_calls[0].model_id == self.config.bedrock_model_id,
            f"the summary used model {window_calls[0].model_id}, not {self.config.bedrock_model_id}",
        )
        # Every summary item came from one call (no retries, no fallback); later ones roll the previous summary in.
        expect(len(converse) == len(items), f"{len(converse)} summarisation calls for {len(items)} summaries")
        rolled = [c for c in converse if c is not window_calls[0]]
        expect(
            all(STUB_SUMMARY in c.prompt for c in rolled), "a later summary was not given the previous one as context"
        )
        step.calls.append(
            f"bedrock-runtime:Converse x{len(converse)} from {window_calls[0].caller or 'the summary generator'} "
            f"on {window_calls[0].model_id} (stub)"
        )
        step.changes.append(f"summaries of turns {', '.join(f'{a}..{b}' for a, b in windows)}")
        step.changes.append(f"SUMMARY#1 = {STUB_SUMMARY!r}")
        self.done(step, started)

    def request_handoff(self) -> None:
        started, step = time.monotonic(), self.step("Request a handoff (REST -> Step Functions, request template)")
        self.register_agent(step, "agent-7", display_name="Agent Seven")
        response = self.rest(
            step,
            "POST",
            f"/sessions/{self.session_id}/handoff",
            "alice",
            body={"reason": "general", "priority": "high"},
        )
        expect(response.status == 202, f"handoff request answered {response.status}: {response.body}")
        self.values["handoff_execution"] = response.json()["execution_arn"]
        step.changes.append(f"execution {self.values['handoff_execution'].rsplit(':', 1)[-1]} started")
        self.done(step, started)

    def no_agent_free(self) -> None:
        started, step = time.monotonic(), self.step("No agent is free: the request waits in the assignment queue")
        store = self.store()

        def queued() -> bool:
            handoff = store.handoffs.current_handoff(self.session_id)
            return handoff is not None and handoff.status == "queued"

        self.stage.settle(until=queued, timeout=20)
        handoff = store.handoffs.current_handoff(self.session_id)
        handoff = present(handoff, "handoff")
        self.values["handoff_id"] = handoff.handoff_id
        session = store.sessions.get_session(self.session_id)
        status = session.status if session else None
        step.changes.append(f"handoff {handoff.handoff_id} queued (waiting for an agent); session still {status}")
        self.done(step, started)

    def agent_accepts(self) -> None:
        started, step = time.monotonic(), self.step("The agent comes online and accepts through the API")
        self.set_presence(step, "agent-7", "available")
        response = self.rest(step, "POST", f"/handoffs/{self.session_id}/accept", "agent-7")
        expect(response.status == 200, f"accept answered {response.status}: {response.body}")
        store = self.store()

        def assigned() -> bool:
            handoff = store.handoffs.current_handoff(self.session_id)
            return handoff is not None and handoff.status == "assigned"

        try:
            self.stage.settle(until=assigned, timeout=20)
        except TimeoutError:
            errors = self.stage.execution_errors(self.values["handoff_execution"])
            raise StoryError(f"handoff not assigned: {errors}") from None
        session = store.sessions.get_session(self.session_id)
        expect(session is not None and session.status == "handoff", f"session not in handoff: {session}")
        step.changes.append("handoff assigned to agent-7; session status handoff")
        self.done(step, started)

    def notifications(self) -> None:
        started, step = (
            time.monotonic(),
            self.step("Notifications land in exactly the queues the filter policies select"),
        )
        self.stage.settle(timeout=20, wait_executions=False)
        topic_arn = self.stage.function("lambdas.events.router.handler").environment["HANDOFF_TOPIC_ARN"]
        topic = self.stage.only("AWS::SNS::Topic", where=lambda t: t.ref == topic_arn)
        messages = published(self.stage.cloud, topic, self.stage.all("AWS::SNS::Subscription"))
        expect(bool(messages), "the handoff topic published nothing")
        received = self.stage.queues.received
        names = {q.attributes["Arn"]: q.attributes["QueueName"] for q in self.stage.all("AWS::SQS::Queue")}
        for message in messages:
            actual = frozenset(arn for arn, bodies in received.items() if message.message in bodies)
            expect(
                actual == message.expected_queues,
                f"{message.event_type}: selected {sorted(names[a] for a in message.expected_queues)}, "
                f"landed in {sorted(names[a] for a in actual)}",
            )
            labels = sorted(self.queue_label(a) for a in actual)
            step.changes.append(f"{message.event_type} -> {', '.join(labels) or 'no queue'}")
        kinds = [f.get("type") for f in self.frames()]
        step.changes.append(f"customer frames so far: {kinds[-4:]}")
        self.done(step, started)

    def agent_replies(self) -> None:
        started, step = time.monotonic(), self.step("The agent replies; the handoff workflow completes")
        before = len(self.frames())
        response = self.rest(
            step, "POST", f"/handoffs/{self.session_id}/messages", "agent-7", body={"text": "Hi, I am Seven. Volume 3?"}
        )
        expect(response.status == 201, f"agent message answered {response.status}: {response.body}")
        new = self.frames()[before:]
        expect(
            any(f.get("type") == "message" and f.get("role") == "agent" for f in new),
            f"customer got no agent frame: {new}",
        )
        done = self.stage.wait_execution(self.values["handoff_execution"], timeout=40)
        expect(done["status"] == "SUCCEEDED", f"handoff execution ended {done['status']}")
        step.changes.append(f"customer frame message (role agent); handoff execution {done['status']}")
        self.done(step, started)

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

    def hour_passes_cleanup(self) -> None:
        started, step = time.monotonic(), self.step("An hour passes; the hourly cleanup archives and deletes")
        self.stage.clock.advance(self.config.cleanup_grace_seconds + 60)
        step.changes.append(f"clock +{self.config.cleanup_grace_seconds + 60}s")
        (schedule,) = self.stage.all("AWS::Events::Rule", where=lambda r: "ScheduleExpression" in r.properties)
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

    def audit_trail_holds_every_change(self) -> None:
        started, step = time.monotonic(), self.step("The audit trail holds every change, in the locked bucket")
        stream = self.stage.function("lambdas.events.router.handler").environment["AUDIT_STREAM_NAME"]
        destination = self.stage.client("firehose").describe_delivery_stream(DeliveryStreamName=stream)[
            "DeliveryStreamDescription"
        ]["Destinations"][0]["ExtendedS3DestinationDescription"]
        bucket = destination["BucketARN"].split(":::", 1)[1]
        s3 = self.stage.client("s3")
        lock = s3.get_object_lock_configuration(Bucket=bucket)["ObjectLockConfiguration"]
        expect(lock["ObjectLockEnabled"] == "Enabled", f"audit bucket {bucket} has no Object Lock: {lock}")
        lines = [line for _, line in read_lines(s3, bucket, destination["Prefix"].split("!{", 1)[0])]
        mine = {line["event_id"]: line for line in lines if line["pk"] == f"SESSION#{self.session_id}"}
        turns = [line for line in mine.values() if line["item_type"] == "turn"]
        total = int(self.values["turns_total"])
        created = sum(line["change"] == "created" for line in turns)
        deleted = sum(line["change"] == "deleted" for line in turns)
        expect(
            (created, deleted) == (total, total),
            f"audit has {created} turn creations and {deleted} deletions, expected {total} of each",
        )
        statuses = [
            (line["old_status"], line["new_status"])
            for line in sorted(mine.values(), key=lambda line: int(line["sequence_number"]))
            if line["sk"] == "META" and "new_status" in line
        ]
        expect(bool(statuses) and statuses[-1][1] == "archived", f"session status changes audited: {statuses}")
        # Every object the stream wrote is locked by the audit locker: the stage's mode, its days.
        mode, days = self.config.audit_object_lock_mode.upper(), self.config.audit_retention_days
        versions = s3.list_object_versions(Bucket=bucket).get("Versions", [])
        unlocked = [v["Key"] for v in versions if not locked_for(s3, bucket, v, mode, days)]
        expect(bool(versions) and not unlocked, f"audit objects without {mode} retention of {days} days: {unlocked}")
        step.changes.append(
            f"s3://{bucket[:24]}.../audit/: {len(lines)} lines; this session {len(mine)}: "
            f"{created} turns created, {deleted} deleted, status {' -> '.join(s[1] for s in statuses)}; "
            f"{len(versions)} objects, each locked ({mode}, {days} days)"
        )
        self.done(step, started)

    def export_approved(self) -> None:
        started, step = time.monotonic(), self.step("Export requested, approved through the signed link, finished")
        response = self.rest(step, "POST", "/admin/export", "root", body={"reason": "quarterly analytics"})
        expect(response.status == 202, f"export request answered {response.status}: {response.body}")
        execution = response.json()["execution_arn"]
        reviewer_topic = self.stage.function("gate_runtime.request.handler").environment["REVIEWER_TOPIC_ARN"]
        topic = self.stage.only("AWS::SNS::Topic", where=lambda t: t.ref == reviewer_topic)
        self.stage.settle(until=lambda: bool(published(self.stage.cloud, topic, [])), timeout=20, wait_executions=False)
        mail = published(self.stage.cloud, topic, [])[-1].message
        link = re.search(r"https://\S+/reviews/[^/\s]+/approve\?\S+", mail)
        expect(link is not None, f"no approve link in the reviewer message: {mail[:300]}")
        link = present(link, "link")
        url = urllib.parse.urlsplit(link.group(0))
        path = "/" + url.path.split("/", 2)[2]  # drop the stage
        query = dict(urllib.parse.parse_qsl(url.query))
        # Opening the link (as a mail scanner would) only shows the confirmation page.
        page = self.rest(step, "GET", path, None, query=query)
        expect(page.status == 200, f"approve link answered {page.status}: {page.body[:200]}")
        fields = re.findall(r'<input type="hidden" name="([a-z]+)" value="([^"]*)">', page.body)
        expect('<form method="post"' in page.body and bool(fields), f"no confirmation form: {page.body[:300]}")
        waiting = self.stage.client("stepfunctions").describe_execution(executionArn=execution)["status"]
        expect(waiting == "RUNNING", f"opening the review link alone moved the export to {waiting}")
        step.changes.append("GET of the approve link: confirmation page, export still waiting")
        # The reviewer presses the button: the signed fields are POSTed to the same address.
        form = urllib.parse.urlencode([(name, html.unescape(value)) for name, value in fields])
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
        page = self.rest(step, "POST", path, None, query=query, headers=headers, body=form)
        expect(page.status == 200, f"approve confirmation answered {page.status}: {page.body[:200]}")
        # The export polls DescribeExport after each Wait: time passes while the stage is idle
        done = self.stage.wait_execution(execution, timeout=40, tick=self.config.export_poll_seconds)
        output = json.loads(done.get("output") or "{}")
        export = output.get("export") if isinstance(output, dict) else None
        detail = {k: v for k, v in (export or {}).items() if k.lower() in ("status", "exportstatus", "s3prefix")}
        step.changes.append(f"export execution {done['status']} {json.dumps(detail) if detail else ''}".rstrip())
        expect(
            done["status"] == "SUCCEEDED",
            f"export ended {done['status']}: {done.get('error')}; history: {self.stage.execution_errors(execution)}",
        )
        self.done(step, started)

    # ------------------------------------------------------------------ bad paths

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

    def register_agent(
        self,
        step: Step,
        who: str,
        *,
        skills: tuple[str, ...] = ("general",),
        display_name: str | None = None,
        is_manager: bool = False,
        available: bool = False,
    ) -> str:
        """Register ``who`` as an agent the way an admin onboards one: ``POST /admin/agents`` as root.

        The agent id is the subject of ``who``'s token (whatever the identity provider issues),
        so the registry and the agent's own requests name the same agent.
        """
        token = self.tokens.get(who) or self.sign_in(who, "agent")
        agent_id = token_subject(token)
        body = {
            "agent_id": agent_id,
            "display_name": display_name or who,
            "skills": list(skills),
            "is_manager": is_manager,
        }
        response = self.rest(step, "POST", "/admin/agents", "root", body=body)
        expect(response.status == 201, f"registering {who} answered {response.status}: {response.body}")
        expect(response.json()["status"] == "offline", f"a new agent is not offline: {response.body}")
        step.changes.append(f"{who} registered by root (agent {agent_id}, skills {', '.join(skills)}), offline")
        if available:
            self.set_presence(step, who, "available")
        return agent_id

    def set_presence(self, step: Step, who: str, status: str) -> dict[str, Any]:
        response = self.rest(step, "POST", "/agents/me/presence", who, body={"status": status})
        expect(response.status == 200, f"{who}'s presence {status!r} answered {response.status}: {response.body}")
        answer: dict[str, Any] = response.json()
        step.changes.append(f"{who} presence {status} (now {answer['status']})")
        return answer

    def dump(self) -> str:
        return json.dumps([s.__dict__ for s in self.steps], default=str)


#: The story in order: happy path, then the bad paths.
STEPS: tuple[str, ...] = (
    "mint_tokens",
    "create_session",
    "connect",
    "chat",
    "summary",
    "request_handoff",
    "no_agent_free",
    "agent_reads_the_waiting_inbox",
    "agent_accepts",
    "accepted_handoff_moves_to_the_agents_inbox",
    "notifications",
    "agent_replies",
    "agent_closes_handoff",
    "closed_handoff_leaves_the_inbox",
    "assistant_answers_again",
    "second_handoff_reaches_a_new_agent",
    "escalation_pages_the_managers",
    "manager_takes_the_escalated_handoff",
    "customer_away_is_told_by_email",
    "other_customer_is_refused",
    "malformed_request_is_rejected",
    "disconnect",
    "session_cleanup_scheduled",
    "grace_ends_session_cleanup",
    "hour_passes_cleanup",
    "refused_tokens",
    "hourly_sweep_is_the_safety_net",
    "archive_holds_every_turn",
    "audit_trail_holds_every_change",
    "export_approved",
    "requester_is_told_where_the_export_is",
    "rejected_export_tells_the_requester",
    "poison_record_to_dlq",
    "burst_is_refused",
    "customer_leaves_while_queued",
    "agent_registry",
)


def run_story(stage: EmbeddedStage, config: StageConfig, narrate: Callable[[Step], None] = lambda step: None) -> Story:
    """Run every step in order on a freshly deployed stage; raises StoryError at the first failure.

    A step fails too when anything in it made a call or a delivery AWS would refuse (the embedded
    stage's IAM, resource and key policies): the error names each refused action, principal and
    resource, whatever else the refusal broke downstream.
    """
    story = Story(stage, config, narrate)
    # The stage's clock stands still unless a step moves it: a workflow's timer (an agent's wait,
    # the idle limit) fires when the story says time has passed, never because the machine is slow.
    with stage.clock.frozen():
        for name in STEPS:
            seen = len(stage.refusals)
            try:
                getattr(story, name)()
            except Exception as error:
                refused = stage.refusals[seen:]
                if refused:
                    raise StoryError(_refused(name, refused)) from error
                raise
            refused = stage.refusals[seen:]
            if refused:
                raise StoryError(_refused(name, refused))
    return story


def _refused(step: str, refusals: list[Refusal]) -> str:
    unique = list(dict.fromkeys(str(r) for r in refusals))
    return f"step {step}: {len(unique)} call(s) AWS would refuse:\n  " + "\n  ".join(unique)
