"""The decision steps of the human-handoff workflow, one handler per Task (each its own function).

Handlers (``lambdas.orchestration.handoff.<name>``) and what they get from the state machine:

* ``check_agent``: ``{session_id, handoff_id, reason, priority}`` -> ``{available, agent_id?}``;
  refuses a priority outside ``contracts.priorities`` (``InvalidPriority``); when a customer
  asking the same skill waits in the waiting inbox ahead of this one (more urgent, or as urgent
  and waiting longer) it reserves nobody (``{available: false, behind}``), so a free agent is
  left to the customer served first; otherwise finds the longest-waiting available agent with
  the reason as skill and reserves it (conditional write; a lost race tries the next candidate).
* ``escalate``: same input; takes WaitForAgent's dead token (late accepts get 409), marks the
  handoff escalated (only from queued) and reserves a free manager: ``{available, agent_id?}``.
* ``begin``: ``{..., agent_id, execution_arn}``; the handoff transaction (the ``assign_agent`` use case)
  or ``ConditionalCheckFailed`` when the session is no longer active.
* ``await_reply``: ``{..., task_token, waiting_for?, expected_version?}``; MonitorHandoff's and
  WatchAgent's token (``reply``, only while assigned and while the agent's activity version is
  still ``expected_version``: otherwise it completes its own token with ``{"closed": true}`` or
  with the agent's ``{"version"}``, needing ``states:SendTaskSuccess`` on the workflow) or
  WaitForManager's (``agent``, only while escalated) onto the handoff record.
* ``transfer_context``: latest summary + the newest turns that fit SNS, published to the agent topic.
* ``reassign``: ``{state, handoff_id, expected_version?, replacement?}``; re-queues the handoff (only while still
  assigned and, given ``expected_version``, while its agent has written nothing since), releases
  the idle agent, restores the session to active, counts; raises ``ReassignmentLimitReached`` past
  ``MAX_REASSIGNMENTS``. A handoff closed meanwhile answers ``{"closed": true}`` and the workflow
  finishes (HandoffComplete); an agent who wrote meanwhile answers ``{"replied": true, "version"}``
  and keeps the handoff. A ``replacement`` agent reserved by the workflow is released again
  wherever it does not take over (closed, replied, past the bound).
* ``fail``: ``{state, handoff_id}``; releases the reserved agent, marks the handoff failed unless
  it is over (completed or failed already: conditional on the status read), restores the session
  to active if this handoff had moved it; returns the reason.
* ``queue_consumer``: SQS batch of the agent-assignment queue; stores WaitForAgent's token on the
  (queued) handoff record and tells agents that a customer waits (SNS ``handoff_waiting``).

Environment: ``TABLE_NAME``, ``HANDOFF_TOPIC_ARN`` (transfer_context, queue_consumer) and the
stage settings of :mod:`lambdas.shared.settings` (``MAX_REASSIGNMENTS``, ``MANAGER_SKILL``,
``CONTEXT_TURNS``, the session TTL and cleanup shards).
"""

from __future__ import annotations

import contextlib
import json
from typing import Any, Final

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from contracts.priorities import PRIORITIES, is_priority
from contracts.workflows import (
    CONDITIONAL_CHECK_FAILED,
    CUSTOMER_LEFT,
    INVALID_PRIORITY,
    NO_AGENT_TO_TAKE_OVER,
    NO_MANAGER_TOOK_OVER,
    REASSIGNMENT_LIMIT_REACHED,
    ConditionalCheckFailed,
    InvalidPriority,
    ReassignmentLimitReached,
)
from lambdas.events.messages import (
    ATTR_AGENT_ID,
    ATTR_EVENT_TYPE,
    ATTR_REASON,
    EVENT_HANDOFF_CONTEXT,
    EVENT_HANDOFF_WAITING,
)
from lambdas.orchestration import context as handoff_context
from lambdas.shared import aws, keys
from lambdas.shared.errors import (
    AgentNotFound,
    AgentUnavailable,
    Conflict,
    HandoffNotFound,
    InvalidTransition,
)
from lambdas.shared.logs import masked_formatter
from lambdas.shared.records import HandoffStatus, SessionStatus
from lambdas.shared.settings import resource, settings
from lambdas.shared.settings import store as store
from lambdas.shared.store import (
    WAITING_FOR_AGENT,
    WAITING_FOR_REPLY,
    AgentActive,
    HandoffConflict,
    SessionNotActive,
    preload,
)
from lambdas.shared.store.inbox import InboxItem
from lambdas.shared.tracing import tracer
from lambdas.usecases import assign_agent

preload("agents")  # used by its invocations: loaded at init, not by the first one
logger = Logger(logger_formatter=masked_formatter())

#: How many candidates one reservation tries when concurrent handoffs take the first ones.
MAX_RESERVE_CANDIDATES: Final = 5
SYSTEM_TEXT: Final = "The conversation was handed over to a human support agent."


def sns() -> Any:
    return aws.client("sns")


def sfn() -> Any:
    return aws.client("stepfunctions")


def topic_arn() -> str:
    return resource("HANDOFF_TOPIC_ARN")


def _reserve_first(skill: str, session_id: str, *, managers_only: bool = False) -> str | None:
    """Reserve the longest-waiting matching agent; a lost race moves on to the next candidate."""
    for _ in range(MAX_RESERVE_CANDIDATES):
        agent = store().agents.find_available_agent(skill, managers_only=managers_only)
        if agent is None:
            return None
        try:
            store().agents.reserve_agent(agent.agent_id, session_id)
        except (AgentUnavailable, AgentNotFound):
            logger.info("agent taken concurrently, trying the next", extra={"agent_id": agent.agent_id})
            continue
        return agent.agent_id
    return None


def request_priority(event: dict[str, Any]) -> str:
    """The handoff's priority from the execution input; InvalidPriority for anything unknown."""
    priority = event.get("priority")
    if not is_priority(priority):
        raise InvalidPriority(f"priority must be one of {', '.join(PRIORITIES)} (given {priority!r})")
    return str(priority)


def served_before(event: dict[str, Any], priority: str) -> InboxItem | None:
    """A customer in the waiting inbox asking the same skill who is served before this handoff, if any.

    This handoff's place is its priority and since when its customer waits: the record's
    creation when it has one (a re-queued handoff keeps its place), now otherwise.
    """
    session_id, handoff_id = str(event["session_id"]), str(event["handoff_id"])
    record = store().handoffs.get_handoff(session_id, handoff_id)
    since = record.created_at if record is not None else store().table.now()
    place = keys.queue_sk(priority, since, handoff_id)
    return store().inbox.first_in(keys.WAITING_INBOX, reasons=[str(event["reason"])], before=place)


@logger.inject_lambda_context
@tracer.capture_lambda_handler(capture_response=False)
def check_agent(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    ahead = served_before(event, request_priority(event))
    if ahead is not None:
        # A free agent is offered the most urgent, longest-waiting customer first; this one queues behind.
        logger.info("a customer waits ahead", extra={"behind": ahead.handoff_id, "session_id": event["session_id"]})
        return {"available": False, "behind": ahead.handoff_id}
    agent_id = _reserve_first(str(event["reason"]), str(event["session_id"]))
    if agent_id is None:
        return {"available": False}
    logger.info("agent reserved", extra={"agent_id": agent_id, "session_id": event["session_id"]})
    return {"available": True, "agent_id": agent_id}


@logger.inject_lambda_context
@tracer.capture_lambda_handler(capture_response=False)
def escalate(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """No agent accepted in time: the handoff becomes ``escalated`` and a free manager is reserved.

    ``{available: false}`` when no manager is free: the workflow then waits for one
    (WaitForManager), and the escalation branch pages the managers on the status change.
    """
    session_id, handoff_id = str(event["session_id"]), str(event["handoff_id"])
    store().handoffs.claim_callback(session_id, handoff_id, WAITING_FOR_AGENT)  # a late accept now gets 409
    # Not found: the assignment consumer never stored it (its message in the DLQ); a free manager
    # may still take over, but nobody can be paged for a record that does not exist.
    with contextlib.suppress(HandoffNotFound):
        store().handoffs.update_handoff(
            session_id, handoff_id, status=HandoffStatus.ESCALATED, expected_status=HandoffStatus.QUEUED
        )
    agent_id = _reserve_first(str(event["reason"]), session_id, managers_only=True) or _reserve_first(
        settings().manager_skill, session_id, managers_only=True
    )
    if agent_id is None:
        logger.info("no manager free; waiting for one", extra={"session_id": session_id, "handoff_id": handoff_id})
        return {"available": False}
    logger.info("manager takes over", extra={"agent_id": agent_id, "session_id": session_id})
    return {"available": True, "agent_id": agent_id}


@logger.inject_lambda_context
@tracer.capture_lambda_handler(capture_response=False)
def begin(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    try:
        begun = assign_agent.begin_handoff(
            store(),
            str(event["session_id"]),
            handoff_id=str(event["handoff_id"]),
            agent_id=str(event["agent_id"]),
            reason=str(event["reason"]),
            priority=str(event["priority"]),
            execution_arn=event.get("execution_arn"),
            system_text=SYSTEM_TEXT,
        )
    except SessionNotActive as err:
        raise ConditionalCheckFailed(str(err)) from None
    return {
        "handoff_id": begun.handoff.handoff_id,
        "status": str(begun.handoff.status),
        "turn_number": begun.turn_number,
    }


@logger.inject_lambda_context
@tracer.capture_lambda_handler(capture_response=False)
def await_reply(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Store a waiting task's token on the handoff: MonitorHandoff's or WatchAgent's (``reply``), or
    WaitForManager's (``agent``).

    A manager's wait is stored only while the handoff is still escalated (a customer who left
    meanwhile failed it), so no accept can complete a handoff that is over; an agent's reply wait
    only while it is still assigned: an agent may close between the accept and MonitorHandoff, or
    between two replies, and then finds no token to complete. Given ``expected_version`` (the
    activity version the workflow last saw: 0 for MonitorHandoff), a reply wait is stored only
    while the agent has written nothing since; a message sent before the wait began (a console
    that greets the customer as soon as the accept returns) found no token, so the wait ends
    itself with that message's version, as the message would have ended it.
    """
    waiting_for = str(event.get("waiting_for") or WAITING_FOR_REPLY)
    session_id, handoff_id = str(event["session_id"]), str(event["handoff_id"])
    # The wait is stored in the same conditional write that checks the handoff's status (and the
    # agent's activity), so a close or a message between the check and the write cannot be missed.
    replying = waiting_for == WAITING_FOR_REPLY
    status = HandoffStatus.ASSIGNED if replying else HandoffStatus.ESCALATED
    token = str(event["task_token"])
    try:
        stored = store().handoffs.await_callback(
            session_id, handoff_id, waiting_for, token, while_status=status, while_version=_expected_version(event)
        )
    except AgentActive as active:
        logger.info("the agent wrote before the reply wait began", extra={"handoff_id": handoff_id})
        output = {"agent_id": event.get("agent_id"), "version": active.version}
        sfn().send_task_success(taskToken=token, output=json.dumps(output))
        return {"waiting_for": waiting_for, "version": active.version}
    if not stored:
        if replying:
            # Closed before this wait began: nobody else will end it, so it ends itself.
            logger.info("handoff over before the reply wait began", extra={"handoff_id": handoff_id})
            sfn().send_task_success(taskToken=token, output=json.dumps({"closed": True}))
            return {"waiting_for": waiting_for, "closed": True}
        raise HandoffConflict(f"handoff {handoff_id!r} is no longer escalated; no manager can take it")
    return {"waiting_for": waiting_for}


def _expected_version(event: dict[str, Any]) -> int | None:
    """The activity version a reply wait is conditioned on; None when the workflow sends none (a manager's
    wait, or an execution started from a definition older than the condition)."""
    version = event.get("expected_version")
    if version is None:
        return None
    if event.get("waiting_for") not in (None, WAITING_FOR_REPLY):
        raise ValueError("expected_version belongs to a reply wait only")
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise ValueError(f"expected_version must be an activity version, 0 or more (given {version!r})")
    return version


@logger.inject_lambda_context
@tracer.capture_lambda_handler(capture_response=False)
def transfer_context(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Publish the summary and the newest turns that fit SNS's message limit (see ``context``)."""
    session_id, agent_id = str(event["session_id"]), str(event["agent_id"])
    summary = store().turns.latest_summary(session_id)
    turns = store().turns.list_turns(session_id, limit=settings().context_turns).items
    header = {
        ATTR_EVENT_TYPE: EVENT_HANDOFF_CONTEXT,
        "session_id": session_id,
        "handoff_id": event["handoff_id"],
        "agent_id": agent_id,
        "reason": event.get("reason"),
    }
    message = handoff_context.build(header, summary, turns)
    resp = sns().publish(
        TopicArn=topic_arn(),
        Message=handoff_context.encode(message),
        MessageAttributes={
            ATTR_EVENT_TYPE: {"DataType": "String", "StringValue": EVENT_HANDOFF_CONTEXT},
            ATTR_AGENT_ID: {"DataType": "String", "StringValue": agent_id},
            ATTR_REASON: {"DataType": "String", "StringValue": str(event.get("reason") or "unknown")},
        },
    )
    return {
        "turns": len(message["turns"]),
        "omitted_turns": message["omitted_turns"],
        "summary": summary is not None,
        "message_id": resp.get("MessageId"),
    }


def _release(agent_id: str | None, session_id: str) -> bool:
    if not agent_id:
        return False
    try:
        store().agents.release_agent(agent_id, session_id=session_id)
    except (AgentUnavailable, AgentNotFound):
        return False  # released already, or serving someone else now
    return True


def _restore(session_id: str) -> bool:
    try:
        store().sessions.update_status(session_id, SessionStatus.ACTIVE, expected=SessionStatus.HANDOFF)
    except InvalidTransition:
        return False
    return True


@logger.inject_lambda_context
@tracer.capture_lambda_handler(capture_response=False)
def reassign(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    state, handoff_id = event["state"], str(event["handoff_id"])
    session_id = str(state["session_id"])
    count = int((state.get("reassignment") or {}).get("count", 0)) + 1
    agent_id = (state.get("agent") or {}).get("agent_id")
    expected = event.get("expected_version")
    # ReplaceIdleAgent's agent, reserved already: released again wherever it does not take over.
    replacement = (event.get("replacement") or {}).get("agent_id")
    try:
        store().handoffs.requeue_handoff(
            session_id,
            handoff_id,
            previous_agent_id=agent_id,
            expected_version=None if expected is None else int(expected),
        )
    except AgentActive as active:
        # The agent wrote as the idle limit fired: its message was counted first, so it keeps the handoff.
        logger.info("agent wrote meanwhile; not reassigned", extra={"handoff_id": handoff_id})
        _release(replacement, session_id)
        return {"count": count - 1, "closed": False, "replied": True, "version": active.version}
    except HandoffConflict:
        # Closed meanwhile (by its agent, an admin or the customer's disconnect), which released
        # the agent and moved the session already: the handoff is over, nothing to reassign.
        logger.info("handoff closed while its agent was idle", extra={"handoff_id": handoff_id})
        _release(replacement, session_id)
        return {"count": count - 1, "closed": True, "released_agent_id": None}
    released = _release(agent_id, session_id)
    restored = _restore(session_id)
    logger.info(
        "idle agent released",
        extra={"agent_id": agent_id, "count": count, "released": released, "restored": restored},
    )
    limit = settings().max_reassignments
    if count > limit:
        _release(replacement, session_id)
        raise ReassignmentLimitReached(f"agent idle; handoff {handoff_id} was reassigned {limit} time(s) already")
    return {"count": count, "closed": False, "released_agent_id": agent_id}


_REASONS: Final = {
    CONDITIONAL_CHECK_FAILED: "the session was no longer active when the handoff was written",
    NO_MANAGER_TOOK_OVER: "no agent accepted in time and no manager took the escalated handoff in time",
    CUSTOMER_LEFT: "the customer left before an agent took the handoff",
    INVALID_PRIORITY: "the handoff's priority is not one of " + ", ".join(PRIORITIES),
    HandoffConflict.__name__: "the handoff ended (or was never recorded) before a manager could take it",
    REASSIGNMENT_LIMIT_REACHED: "the assigned agents stayed idle and the reassignment limit was reached",
    NO_AGENT_TO_TAKE_OVER: "the agent stopped answering and no other agent was free to take over",
}


def _failure_reason(state: dict[str, Any]) -> str:
    error = state.get("error")
    if isinstance(error, dict) and error.get("Error"):
        return _REASONS.get(str(error["Error"]), f"{error['Error']}: the handoff step failed")
    item = (state.get("session") or {}).get("Item")
    if not item:
        return "the session does not exist"
    status = (item.get("status") or {}).get("S", "unknown")
    return f"the session is {status}, not active"


#: A handoff in one of these states is over: a failure arriving late leaves it as it is.
_OVER: Final = frozenset({HandoffStatus.COMPLETED, HandoffStatus.FAILED})


def _mark_failed(session_id: str, handoff_id: str) -> bool:
    """Fail the handoff unless it is over; conditioned on the status read, so a close racing
    this failure keeps its completion. Whether this call failed it."""
    for _ in range(3):
        handoff = store().handoffs.get_handoff(session_id, handoff_id)
        if handoff is None or handoff.status in _OVER:
            return False
        try:
            store().handoffs.update_handoff(
                session_id, handoff_id, status=HandoffStatus.FAILED, expected_status=handoff.status
            )
        except Conflict:
            continue  # it moved meanwhile: read it again
        return True
    return False


@logger.inject_lambda_context
@tracer.capture_lambda_handler(capture_response=False)
def fail(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    state, handoff_id = event["state"], str(event["handoff_id"])
    session_id = str(state["session_id"])
    handoff = store().handoffs.get_handoff(session_id, handoff_id)
    released = _release((state.get("agent") or {}).get("agent_id"), session_id)
    # An agent reserved to replace a silent one, if the failure came before it took over.
    _release((state.get("replacement") or {}).get("agent_id"), session_id)
    restored = False
    failed = False
    if handoff is not None:
        moved_by_us = handoff.status == HandoffStatus.ASSIGNED
        store().handoffs.claim_callback(session_id, handoff_id, WAITING_FOR_AGENT)
        store().handoffs.claim_callback(session_id, handoff_id, WAITING_FOR_REPLY)
        failed = _mark_failed(session_id, handoff_id)
        if moved_by_us and failed:
            restored = _restore(session_id)
    reason = _failure_reason(state)
    logger.info("handoff failed", extra={"reason": reason, "released": released, "restored": restored})
    return {"reason": reason, "released": released, "restored": restored, "marked_failed": failed}


processor = BatchProcessor(event_type=EventType.SQS)


def _queue_record(record: SQSRecord) -> None:
    body = json.loads(record.body)
    session_id, handoff_id = str(body["session_id"]), str(body["handoff_id"])
    queued = store().handoffs.queue_handoff(
        session_id,
        handoff_id=handoff_id,
        reason=str(body["reason"]),
        priority=str(body["priority"]),
        execution_arn=body.get("execution_arn"),
        task_token=str(body["task_token"]),
    )
    if queued is None:  # a late or redriven copy: the handoff is past waiting, its token spent
        logger.warning("assignment message for a handoff that no longer waits", extra={"handoff_id": handoff_id})
        return
    sns().publish(
        TopicArn=topic_arn(),
        Message=json.dumps(
            {
                ATTR_EVENT_TYPE: EVENT_HANDOFF_WAITING,
                "session_id": session_id,
                "handoff_id": handoff_id,
                "reason": body["reason"],
                "priority": body["priority"],
            },
            separators=(",", ":"),
        ),
        MessageAttributes={
            ATTR_EVENT_TYPE: {"DataType": "String", "StringValue": EVENT_HANDOFF_WAITING},
            ATTR_REASON: {"DataType": "String", "StringValue": str(body["reason"])},
        },
    )


@logger.inject_lambda_context
@tracer.capture_lambda_handler(capture_response=False)
def queue_consumer(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return dict(
        process_partial_response(event=event, record_handler=_queue_record, processor=processor, context=context)
    )
