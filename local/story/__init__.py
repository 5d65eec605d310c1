"""The seeds' story, step by step, on the embedded stage: shared by ``test_story`` and ``demo``.

Every step calls the stage only through its public surface (the REST and WebSocket routers built
from the template, the table's stream and the queues' mappings, the workflows' executions) and
asserts what must have changed. Resource roles are found from the template (the function whose
Handler is ..., the queue its mapping reads, the rule whose target is ...), never by name.

Bedrock is stubbed at the client (``embedded.services.bedrock``): the stage config names a model,
so the Message Lambda (``BedrockResponder``) and the summary generator really call
``bedrock-runtime`` Converse; the stub answers chat with the echo responder's reply (replies stay
deterministic) and summarisation requests with ``conversation.STUB_SUMMARY``, and records every call.

This module holds the ``Story`` (the state the steps share and their plumbing), the order of the
steps (``STEPS``) and ``run_story``. The steps live by theme, each theme a mixin of ``Story`` in its
own module: ``conversation`` (sign-ins, session, chat, summary), ``handoff``, ``inbox``,
``escalation``, ``cleanup``, ``identity``, ``audit``, ``export``, ``bad_paths``, ``limits`` and
``registry``; ``base`` holds what they share.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from embedded import EmbeddedStage
from embedded.cloudformation.intrinsics import Deployed
from embedded.iam.guard import Refusal
from embedded.services.cognito import Directory, SignedIn
from lambdas.shared.store import DynamoSessionStore
from local.story.audit import AuditSteps
from local.story.bad_paths import BadPathSteps
from local.story.base import Step, StoryError, token_subject
from local.story.cleanup import CleanupSteps
from local.story.conversation import ConversationSteps, stub_answer
from local.story.erasure import ErasureSteps
from local.story.escalation import EscalationSteps
from local.story.export import ExportSteps
from local.story.handoff import HandoffLifeSteps
from local.story.identity import IdentitySteps
from local.story.inbox import InboxSteps
from local.story.limits import LimitSteps
from local.story.metrics import MetricsSteps
from local.story.privacy import PrivacySteps
from local.story.registry import RegistrySteps
from local.story.resume import ResumeSteps
from stacks.config import StageConfig

__all__ = ["STEPS", "Step", "Story", "StoryError", "run_story", "token_subject"]


@dataclass
class Story(
    ConversationSteps,
    CleanupSteps,
    LimitSteps,
    HandoffLifeSteps,
    MetricsSteps,
    InboxSteps,
    RegistrySteps,
    ExportSteps,
    EscalationSteps,
    IdentitySteps,
    AuditSteps,
    BadPathSteps,
    ResumeSteps,
    PrivacySteps,
    ErasureSteps,
):
    """The state the steps share and the plumbing they call; the steps come from the mixins, one per theme."""

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

    def frames(self) -> list[Any]:
        return self.stage.websocket.frames(self.connection_id)

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

    def dump(self) -> str:
        return json.dumps([s.__dict__ for s in self.steps], default=str)


#: The story in order: happy path, then the bad paths.
STEPS: tuple[str, ...] = (
    "mint_tokens",
    "low_risk_export_needs_no_reviewer",
    "create_session",
    "connect",
    "chat",
    "summary",
    "request_handoff",
    "no_agent_free",
    "agent_reads_the_waiting_inbox",
    "agent_accepts",
    "accepted_handoff_moves_to_the_agents_inbox",
    "agent_lists_sessions_in_handoff",
    "notifications",
    "agent_replies",
    "agent_closes_handoff",
    "handoff_metrics_after_close",
    "closed_handoff_leaves_the_inbox",
    "assistant_answers_again",
    "second_handoff_reaches_a_new_agent",
    "silent_agent_is_replaced",
    "nobody_free_returns_the_customer_to_the_assistant",
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
    "urgent_customer_served_first",
    "agent_registry",
    "customer_drops_and_resumes",
    "customer_rewinds",
    "customer_gives_contact_details",
    "erasure_leaves_no_trace",
    "spent_budget_is_refused_until_midnight",
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
    # A refusal fails the step anyway, and the notice or workflow end a step waits for may never
    # come once a grant is missing: the step's waits end at the refusal, not at their timeouts.
    with stage.clock.frozen(), stage.waits_end_on_refusal():
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
