"""Human handoff workflow: reserve an agent, wait for one, hand the session over, watch the agent until the close.

Example::

    handoff = HandoffWorkflow(
        self, "Handoff",
        table=table,
        session_key={"PK": tasks.DynamoAttributeValue.from_string(
                         sfn.JsonPath.format("SESSION#{}", sfn.JsonPath.string_at("$.session_id"))),
                     "SK": tasks.DynamoAttributeValue.from_string("META")},
        functions=HandoffFunctions(check_agent_availability=..., escalate_to_manager=..., ...),
        customer_notification_queue=queue, agent_notification_topic=topic,
        options=WorkflowOptions(encryption_key=key, timeout=Duration.hours(1)),
        agent_wait=Duration.minutes(5), idle_timeout=Duration.minutes(2), reply_idle_timeout=Duration.minutes(10))
    handoff.grant_task_response(accept_route_function)

States (execution input ``{"session_id", "reason", "priority", "requested_by", "role"}``; the
handoff id is the execution name, so a retried StartExecution with the same name is one handoff;
CheckSessionActive also requires the requester to own the session or hold a privileged role)::

    ValidateSession (DynamoDB GetItem) -> CheckSessionActive
      -> CheckAgentAvailability (Lambda: find + conditionally reserve) -> IsAgentAvailable
           available -> AssignAgent
           none      -> WaitForAgent (SQS send .waitForTaskToken to the agent-assignment queue)
                          accepted -> AssignAgent
                          timeout  -> EscalateToManager (Lambda: escalated; reserve a free manager)
                                        -> IsManagerAvailable
                                             yes -> AssignAgent
                                             no  -> WaitForManager (Lambda .waitForTaskToken; the
                                                    escalation branch pages the managers)
                                                      accepted -> AssignAgent
                                                      timeout  -> NoManagerTookOver -> HandoffFailed
      AssignAgent -> UpdateDynamoDB (Lambda: ONE TransactWriteItems)
      -> NotifyParties (Parallel: NotifyCustomer = SQS send, NotifyAgent = SNS publish)
      -> TransferConversationContext (Lambda) -> MonitorHandoff (Lambda .waitForTaskToken)
           close       -> HandoffComplete
           first reply -> StartWatchingAgent -> WatchAgent (see handoff_watch: every message restarts the
                          idle limit; a silent agent is replaced -> AssignAgent, or, with nobody
                          free, NoAgentToTakeOver -> HandoffFailed)
           idle        -> ReassignAgent (Lambda: re-queue unless the agent replied, release, count)
                            -> HandoffClosedMeanwhile
                                 closed meanwhile  -> HandoffComplete
                                 replied meanwhile -> AgentRepliedMeanwhile -> WatchAgent
                                 otherwise         -> CheckAgentAvailability
    HandoffFailed (Lambda: release agent, restore session) -> NotifyCustomerHandoffFailed -> HandoffAborted

Who sends which notification (each exactly once per assignment):

* customer "handoff_started" and "handoff_failed": this workflow, direct SQS SendMessage to the
  customer-notification queue (``NotifyCustomer``, ``NotifyCustomerHandoffFailed``), each with an
  ``event_id`` the notifier de-duplicates on; "escalated" and "completed" come from the router.
* agent "handoff_assigned": this workflow, SNS publish with attributes event_type/agent_id/reason
  (``NotifyAgent``); the conversation context follows from ``TransferConversationContext``.
* agents "a customer is waiting": whoever consumes the agent-assignment queue (WaitForAgent's
  message carries the task token; the consumer stores it server-side for the accept route).
* the table stream router publishes its own SNS event when a ``HANDOFF#`` record is INSERTed
  (audit, dashboards, escalation queue); subscriptions for customer notifications must not match
  it, or the customer would hear "handoff started" twice.

The execution lives as long as the handoff (up to the workflow's timeout); the close ends it at once.

Every Task retries transient errors (exponential backoff, full jitter) and catches everything
else into ``HandoffFailed``; every timeout is a prop.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from aws_cdk import Duration
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from constructs_lib.nag_findings import acknowledge_policy
from constructs_lib.secure_queue import SecureQueue
from constructs_lib.validation import PropErrors
from constructs_lib.workflow_defaults import RetryPolicy, WorkflowOptions, WorkflowStateMachine, callback_input
from contracts import messages
from contracts.workflows import (
    CONDITIONAL_CHECK_FAILED,
    NO_MANAGER_TOOK_OVER,
)
from stacks.workflows.handoff_functions import HandoffFunctions
from stacks.workflows.handoff_watch import AGENT_ID, REQUEST, TIMEOUTS, AgentWatch, was_closed, whole_state


def _notice_id(event_type: str) -> str:
    """A customer notice's id: the same for every retry of its send, new for each time the state is entered
    (a reassigned handoff starts again), so the notifier de-duplicates redeliveries and nothing else."""
    return sfn.JsonPath.format(
        f"{{}}#{event_type}#{{}}",
        sfn.JsonPath.string_at("$$.Execution.Id"),
        sfn.JsonPath.string_at("$$.State.EnteredTime"),
    )


@dataclass(frozen=True)
class _SessionRecord:
    """Where the workflow reads a session and what CheckSessionActive checks on it."""

    key: Mapping[str, tasks.DynamoAttributeValue]
    status_attribute: str
    active_status: str
    owner_attribute: str | None
    privileged_roles: tuple[str, ...]


class HandoffWorkflow(Construct):
    """The human-handoff state machine and its agent-assignment queue (see the module docstring).

    Args:
        table: the table holding sessions (ValidateSession reads it directly).
        session_key: primary key of a session's record as DynamoDB attribute values, built
            from the execution input (e.g. with ``JsonPath.format``).
        status_attribute: attribute of that record holding the session status. Defaults to ``status``.
        active_status: value of ``status_attribute`` that allows a handoff. Defaults to ``active``.
        owner_attribute: string attribute of the session record naming its owner; CheckSessionActive
            lets the handoff proceed only when it equals the input's ``requested_by`` or the input's
            ``role`` is one of ``privileged_roles`` (the API starts executions directly, with no
            Lambda to check ownership). Defaults to ``customer_id``; None turns the check off.
        privileged_roles: roles that may hand over any session. Defaults to ``("admin",)``.
        functions: the application Lambdas (:class:`HandoffFunctions`).
        customer_notification_queue: queue whose consumer pushes notices to the customer; gets
            ``{"session_id", "event_type", "text", ...}`` bodies.
        agent_notification_topic: topic that reaches agents (``NotifyAgent``).
        options: encryption key (of the new assignment queues and the execution log group), log
            retention, execution data, removal policy (of the queues and log group), the retry of
            every Task and the overall timeout (defaults to 1 hour).
        existing_assignment_queue: bring your own agent-assignment queue. Defaults to a new
            :class:`SecureQueue` (KMS, SSL only, 60 s visibility) whose dead-letter queue takes a
            message after 5 receives.
        assignment_queue_props: further properties of the new queue (not with ``existing_assignment_queue``).
        agent_wait: how long WaitForAgent waits for an agent to accept. Defaults to 5 minutes.
        manager_wait: how long WaitForManager waits for a paged manager to accept an escalated
            handoff. Defaults to 15 minutes.
        idle_timeout: how long MonitorHandoff waits for the agent's first reply. Defaults to 2 minutes.
        reply_idle_timeout: how long WatchAgent lets the agent stay silent after a reply before it is
            replaced (or, with no agent free, the customer returns to the assistant). Defaults to 10 minutes.
        started_text / failed_text: what the customer is told. Default to short English notices.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        table: dynamodb.ITable,
        session_key: Mapping[str, tasks.DynamoAttributeValue],
        functions: HandoffFunctions,
        customer_notification_queue: sqs.IQueue,
        agent_notification_topic: sns.ITopic,
        options: WorkflowOptions,
        status_attribute: str = "status",
        active_status: str = "active",
        owner_attribute: str | None = "customer_id",
        privileged_roles: tuple[str, ...] = ("admin",),
        existing_assignment_queue: sqs.IQueue | None = None,
        assignment_queue_props: sqs.QueueProps | None = None,
        agent_wait: Duration | None = None,
        manager_wait: Duration | None = None,
        idle_timeout: Duration | None = None,
        reply_idle_timeout: Duration | None = None,
        started_text: str = "You are being connected to a member of our support team.",
        failed_text: str = "We could not reach a support agent right now; the assistant will keep helping you.",
    ) -> None:
        super().__init__(scope, construct_id)
        errors = PropErrors(self)
        errors.check_exclusive(
            existing_assignment_queue=existing_assignment_queue, assignment_queue_props=assignment_queue_props
        )
        errors.check(bool(session_key), "session_key must name the key attributes of the session record (given none)")
        agent_wait = agent_wait or Duration.minutes(5)
        manager_wait = manager_wait or Duration.minutes(15)
        idle_timeout = idle_timeout or Duration.minutes(2)
        reply_idle_timeout = reply_idle_timeout or Duration.minutes(10)
        timeouts = {"agent_wait": agent_wait, "manager_wait": manager_wait, "idle_timeout": idle_timeout}
        for name, value in {**timeouts, "reply_idle_timeout": reply_idle_timeout}.items():
            if not value.is_unresolved():
                errors.check_range(name, value.to_seconds(), 1, 86400 * 365, unit="s")
        self._retry: RetryPolicy = options.retry
        self._functions = functions
        self._customer_queue = customer_notification_queue
        self._agent_topic = agent_notification_topic
        self._texts = (started_text, failed_text)

        self.dead_letter_queue: sqs.IQueue | None = None
        if existing_assignment_queue is not None:
            self.assignment_queue: sqs.IQueue = existing_assignment_queue
        else:
            queue = SecureQueue(
                self,
                "AssignmentQueue",
                encryption_key=options.encryption_key,
                visibility_timeout=Duration.seconds(60),
                max_receive_count=5,
                removal_policy=options.removal_policy,
                queue_props=assignment_queue_props,
            )
            self.assignment_queue = queue.queue
            self.dead_letter_queue = queue.dead_letter_queue

        self._request = {name: sfn.JsonPath.string_at(path) for name, path in REQUEST.items()}
        self._agent_id = sfn.JsonPath.string_at(AGENT_ID)
        failed = self._failure_path()
        check_agent = self._find_agent(failed, agent_wait, manager_wait)
        hand_over = self._hand_over(failed, check_agent, idle_timeout, reply_idle_timeout)
        check_agent.next(self._is_available(hand_over))
        session = _SessionRecord(session_key, status_attribute, active_status, owner_attribute, privileged_roles)
        validate = self._validate_session(table, session, failed)
        validate.next(self._check_session_active(session, check_agent, failed))
        self.workflow: WorkflowStateMachine = WorkflowStateMachine(
            self,
            "Resource",
            definition=validate,
            options=options.with_timeout(options.timeout or Duration.hours(1)),
            comment="Human handoff: reserve or wait for an agent, hand the session over, watch the agent until closed",
        )
        self.state_machine: sfn.StateMachine = self.workflow.state_machine
        self._grant(table, agent_notification_topic)

    def _grant(self, table: dynamodb.ITable, agent_topic: sns.ITopic) -> None:
        # Direct DynamoDB reads of a table encrypted with a customer key need kms:Decrypt on it.
        if table.encryption_key is not None:
            table.encryption_key.grant_decrypt(self.state_machine)
        # SnsPublish grants sns:Publish only; the topic's grant adds its KMS key when it has one.
        agent_topic.grant_publish(self.state_machine)
        acknowledge_policy(
            self.state_machine.role,
            {
                "Action::kms:GenerateDataKey*": "Data keys to send to the KMS-encrypted notification queue and "
                "topic (CDK grants); scoped to their keys."
            },
        )
        self.workflow.acknowledge_invokes(self._functions.all())

    # ------------------------------------------------------------------ definition, step by step

    def _invoke(
        self,
        state_id: str,
        fn: lambda_.IFunction,
        payload: sfn.TaskInput,
        result_path: str,
        comment: str,
    ) -> tasks.LambdaInvoke:
        task = tasks.LambdaInvoke(
            self,
            state_id,
            lambda_function=fn,
            payload=payload,
            payload_response_only=True,
            retry_on_service_exceptions=False,
            result_path=result_path,
            comment=comment,
        )
        self._retry.apply(task)
        return task

    def _failure_path(self) -> tasks.LambdaInvoke:
        """HandoffFailed: release the agent, restore the session, tell the customer, fail the execution."""
        handoff_aborted = sfn.Fail(
            self,
            "HandoffAborted",
            error="HandoffFailed",
            cause_path=sfn.JsonPath.string_at("$.failure.reason"),
        )
        aborted_without_cleanup = sfn.Fail(
            self,
            "HandoffCleanupFailed",
            error="HandoffFailed",
            cause="The handoff failed and releasing the agent or restoring the session failed too; see the logs.",
        )
        handoff_failed = self._invoke(
            "HandoffFailed",
            self._functions.handoff_failed,
            whole_state(self._request),
            "$.failure",
            "Release the reserved agent, restore the session to active if it had moved",
        )
        handoff_failed.add_catch(aborted_without_cleanup, errors=["States.ALL"], result_path="$.cleanup_error")
        notify_failed = self._retry.apply(
            tasks.SqsSendMessage(
                self,
                "NotifyCustomerHandoffFailed",
                queue=self._customer_queue,
                message_body=sfn.TaskInput.from_object(
                    {
                        "session_id": self._request["session_id"],
                        messages.ATTR_EVENT_TYPE: messages.EVENT_HANDOFF_FAILED,
                        "text": self._texts[1],
                        "handoff_id": self._request["handoff_id"],
                        "event_id": _notice_id(messages.EVENT_HANDOFF_FAILED),
                    }
                ),
                result_path=sfn.JsonPath.DISCARD,
            )
        )
        notify_failed.add_catch(handoff_aborted, errors=["States.ALL"], result_path="$.notify_error")
        handoff_failed.next(notify_failed).next(handoff_aborted)
        return handoff_failed

    def _validate_session(
        self, table: dynamodb.ITable, session: _SessionRecord, failed: sfn.IChainable
    ) -> tasks.DynamoGetItem:
        """ValidateSession: read the session record directly (no Lambda)."""
        validate = tasks.DynamoGetItem(
            self,
            "ValidateSession",
            table=table,
            key=dict(session.key),
            consistent_read=True,
            result_path="$.session",
            comment="Read the session record directly (no Lambda)",
        )
        self._retry.apply(validate)
        validate.add_catch(failed, errors=["States.ALL"], result_path="$.error")
        return validate

    def _find_agent(self, failed: sfn.IChainable, agent_wait: Duration, manager_wait: Duration) -> tasks.LambdaInvoke:
        """CheckAgentAvailability, and the wait for an agent (or a manager) when none is free.

        Builds WaitForAgent, EscalateToManager and WaitForManager too; :meth:`_is_available`
        joins them.
        """
        check_agent = self._invoke(
            "CheckAgentAvailability",
            self._functions.check_agent_availability,
            sfn.TaskInput.from_object(self._request),
            "$.agent",
            "Find an available agent for the reason's skill and reserve it with a conditional write",
        )
        check_agent.add_catch(failed, errors=["States.ALL"], result_path="$.error")
        wait_for_agent = tasks.SqsSendMessage(
            self,
            "WaitForAgent",
            queue=self.assignment_queue,
            integration_pattern=sfn.IntegrationPattern.WAIT_FOR_TASK_TOKEN,
            message_body=callback_input(
                {**REQUEST, "execution_arn": "$$.Execution.Id", "task_token": sfn.JsonPath.task_token}
            ),
            task_timeout=sfn.Timeout.duration(agent_wait),
            result_path="$.agent",
            comment="Queue the request; an agent's accept completes the token with the agent id",
        )
        self._retry.apply(wait_for_agent)
        escalate = self._invoke(
            "EscalateToManager",
            self._functions.escalate_to_manager,
            sfn.TaskInput.from_object(self._request),
            "$.agent",
            "No agent accepted in time: the handoff escalates and a free manager is reserved",
        )
        wait_for_agent.add_catch(escalate, errors=TIMEOUTS, result_path="$.wait_error")
        wait_for_agent.add_catch(failed, errors=["States.ALL"], result_path="$.error")
        escalate.add_catch(failed, errors=["States.ALL"], result_path="$.error")
        wait_for_manager = tasks.LambdaInvoke(
            self,
            "WaitForManager",
            lambda_function=self._functions.await_reply,
            integration_pattern=sfn.IntegrationPattern.WAIT_FOR_TASK_TOKEN,
            payload=callback_input({**REQUEST, "waiting_for": "agent", "task_token": sfn.JsonPath.task_token}),
            retry_on_service_exceptions=False,
            task_timeout=sfn.Timeout.duration(manager_wait),
            result_path="$.agent",
            comment="The managers are paged; a manager's accept completes the token with their agent id",
        )
        self._retry.apply(wait_for_manager)
        nobody = sfn.Pass(
            self,
            "NoManagerTookOver",
            parameters={"Error": NO_MANAGER_TOOK_OVER, "Cause": "no manager took the escalated handoff in time"},
            result_path="$.error",
        )
        nobody.next(failed)
        wait_for_manager.add_catch(nobody, errors=TIMEOUTS, result_path="$.wait_error")
        wait_for_manager.add_catch(failed, errors=["States.ALL"], result_path="$.error")
        self._wait_for_agent: tasks.SqsSendMessage = wait_for_agent
        self._escalate: tasks.LambdaInvoke = escalate
        self._wait_for_manager: tasks.LambdaInvoke = wait_for_manager
        return check_agent

    def _is_available(self, assign: sfn.IChainable) -> sfn.Choice:
        """IsAgentAvailable: a reserved agent goes straight to AssignAgent, otherwise wait for one."""
        is_available = sfn.Choice(self, "IsAgentAvailable")
        is_available.when(sfn.Condition.boolean_equals("$.agent.available", True), assign).otherwise(
            self._wait_for_agent
        )
        self._wait_for_agent.next(assign)
        manager = sfn.Choice(self, "IsManagerAvailable")
        manager.when(sfn.Condition.boolean_equals("$.agent.available", True), assign).otherwise(self._wait_for_manager)
        self._escalate.next(manager)
        self._wait_for_manager.next(assign)
        return is_available

    def _hand_over(
        self, failed: sfn.IChainable, check_agent: sfn.IChainable, idle_timeout: Duration, reply_idle_timeout: Duration
    ) -> sfn.Pass:
        """AssignAgent -> UpdateDynamoDB -> NotifyParties -> TransferConversationContext -> MonitorHandoff
        -> (first reply) WatchAgent, until the close."""
        agent_id = self._agent_id
        assign = sfn.Pass(
            self,
            "AssignAgent",
            parameters={"agent_id": agent_id, "available": True},
            result_path="$.agent",
            comment="The agent is confirmed (reserved, accepted or a manager)",
        )
        update = self._invoke(
            "UpdateDynamoDB",
            self._functions.update_handoff,
            sfn.TaskInput.from_object(
                {
                    **self._request,
                    "agent_id": agent_id,
                    "execution_arn": sfn.JsonPath.string_at("$$.Execution.Id"),
                }
            ),
            "$.handoff",
            "One TransactWriteItems: session active->handoff, the HANDOFF record, a system turn",
        )
        update.add_catch(failed, errors=[CONDITIONAL_CHECK_FAILED], result_path="$.error")
        update.add_catch(failed, errors=["States.ALL"], result_path="$.error")
        notify = self._notify_parties()
        notify.add_catch(failed, errors=["States.ALL"], result_path="$.error")
        transfer = self._invoke(
            "TransferConversationContext",
            self._functions.transfer_context,
            sfn.TaskInput.from_object({**self._request, "agent_id": agent_id}),
            "$.context",
            "Send the latest summary and the last turns to the agent",
        )
        transfer.add_catch(failed, errors=["States.ALL"], result_path="$.error")
        complete = sfn.Succeed(self, "HandoffComplete")
        agents = AgentWatch(self, self._functions, self._retry, self._request)
        watch = agents.build(failed, assign, complete, reply_idle_timeout)
        monitor = agents.monitor(failed, check_agent, complete, watch, idle_timeout)
        assign.next(update).next(notify).next(transfer).next(monitor)
        replied = sfn.Choice(self, "FirstReplyOrClose")
        start_watch = sfn.Pass(
            self,
            "StartWatchingAgent",
            parameters={"version": sfn.JsonPath.number_at("$.first_reply.version")},
            result_path="$.activity",
            comment="The first reply's activity version: a reassignment for idleness is conditioned on it",
        )
        monitor.next(replied.when(was_closed("$.first_reply"), complete).otherwise(start_watch.next(watch)))
        return assign

    def _notify_parties(self) -> sfn.Parallel:
        """NotifyParties: the customer through its notification queue, the agent through the topic."""
        agent_id = self._agent_id
        notify_customer = self._retry.apply(
            tasks.SqsSendMessage(
                self,
                "NotifyCustomer",
                queue=self._customer_queue,
                message_body=sfn.TaskInput.from_object(
                    {
                        "session_id": self._request["session_id"],
                        messages.ATTR_EVENT_TYPE: messages.EVENT_HANDOFF_STARTED,
                        "text": self._texts[0],
                        "handoff_id": self._request["handoff_id"],
                        "event_id": _notice_id(messages.EVENT_HANDOFF_STARTED),
                        "agent_id": agent_id,
                    }
                ),
            )
        )
        notify_agent = self._retry.apply(
            tasks.SnsPublish(
                self,
                "NotifyAgent",
                topic=self._agent_topic,
                message=sfn.TaskInput.from_object(
                    {
                        **self._request,
                        messages.ATTR_EVENT_TYPE: messages.EVENT_HANDOFF_ASSIGNED,
                        "agent_id": agent_id,
                    }
                ),
                message_attributes={
                    messages.ATTR_EVENT_TYPE: tasks.MessageAttribute(value=messages.EVENT_HANDOFF_ASSIGNED),
                    messages.ATTR_AGENT_ID: tasks.MessageAttribute(value=agent_id),
                    messages.ATTR_REASON: tasks.MessageAttribute(value=sfn.JsonPath.string_at("$.reason")),
                },
            )
        )
        notify = sfn.Parallel(self, "NotifyParties", result_path=sfn.JsonPath.DISCARD)
        notify.branch(notify_customer)
        notify.branch(notify_agent)
        return notify

    def _check_session_active(
        self, session: _SessionRecord, check_agent: sfn.IChainable, failed: sfn.IChainable
    ) -> sfn.Choice:
        """CheckSessionActive: an active session, handed over by its owner or a privileged role."""
        check_active = sfn.Choice(self, "CheckSessionActive")
        status_path = f"$.session.Item.{session.status_attribute}.S"
        active = sfn.Condition.and_(
            sfn.Condition.is_present(status_path), sfn.Condition.string_equals(status_path, session.active_status)
        )
        if session.owner_attribute is None:
            return check_active.when(active, check_agent).otherwise(failed)
        owner_path = f"$.session.Item.{session.owner_attribute}.S"
        may_hand_over = sfn.Condition.or_(
            *[
                sfn.Condition.and_(sfn.Condition.is_present("$.role"), sfn.Condition.string_equals("$.role", role))
                for role in session.privileged_roles
            ],
            sfn.Condition.and_(
                sfn.Condition.is_present("$.requested_by"),
                sfn.Condition.is_present(owner_path),
                sfn.Condition.string_equals_json_path(owner_path, "$.requested_by"),
            ),
        )
        # Someone who may not hand the session over is refused before anything happens: no
        # agent, no session change, and no notice to the session's customer (a stranger must
        # not be able to make the workflow message someone else's chat).
        refused = sfn.Fail(
            self,
            "HandoffRefused",
            error="HandoffRefused",
            cause="The requester may not hand this session over (not its owner, not a privileged role).",
        )
        return (
            check_active.when(sfn.Condition.and_(active, may_hand_over), check_agent)
            .when(may_hand_over, failed)
            .otherwise(refused)
        )

    # ------------------------------------------------------------------ grants

    def grant_task_response(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let a principal complete WaitForAgent/MonitorHandoff tokens (the agent routes)."""
        return self.workflow.grant_task_response(grantee)

    def grant_start_execution(self, grantee: iam.IGrantable) -> iam.Grant:
        return self.workflow.grant_start_execution(grantee)

    def grant_task_failure(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let a principal fail a waiting task (``$disconnect``, when the customer leaves before an agent took over)."""
        return self.workflow.grant_task_failure(grantee)

    def grant_consume_assignments(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let a principal receive and delete agent-assignment messages."""
        return self.assignment_queue.grant_consume_messages(grantee)
