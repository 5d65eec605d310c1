"""An Express workflow that prepares a new WebSocket connection and greets it once it is open."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from constructs_lib.validation import PropErrors
from constructs_lib.workflow_defaults import RetryPolicy, WorkflowOptions, WorkflowStateMachine
from contracts.workflows import CONNECTION_NOT_READY


class OnboardingWorkflow(Construct):
    """Express state machine: prepare the connection, then deliver a frame once it is open.

    Example::

        workflow = OnboardingWorkflow(self, "Onboarding", prepare_function=onboarding_fn,
                                      deliver_function=deliver_fn, options=WorkflowOptions(encryption_key=key))
        workflow.grant_start_execution(connect_fn)

    Definition (CDK Step Functions DSL), on the execution input
    ``{connection_id, customer_id, session_id, domain_name, stage, ...}``:

    1. ``Prepare``: invokes ``prepare_function`` with ``{"step": "onboard", ...input}``; its
       result must hold ``frame`` (the frame to send). Transient Lambda errors are retried
       (``retry_policy``: backoff, full jitter); any failure goes to the failure branch.
    2. ``DeliverFrame``: invokes ``deliver_function`` with ``{connection_id, domain_name, stage,
       frame}``. A client cannot receive frames until its ``$connect`` has returned, so the
       function raises ``ConnectionNotReady`` meanwhile and this state retries it, bounded by
       ``delivery_max_attempts`` with exponential backoff, full jitter and ``delivery_max_delay``.
    3. ``ConnectionAbandoned``: when delivery never succeeds (the client left),
       ``prepare_function`` runs again with ``{"step": "abandon", connection_id}`` so the work of
       step 1 is undone or closed, then the execution succeeds (nothing is wrong with the system).
    4. Failure branch: an error frame (``{"type": "error", "code": "onboarding_failed", ...}``)
       is delivered the same way, then the execution fails with ``OnboardingFailed``.

    Hardened defaults (an Express :class:`WorkflowStateMachine`): logs of every state (level ALL)
    to a log group with a retention, X-Ray tracing, an execution timeout, retries with jitter on
    every task, alarms on failed and timed-out executions.

    Args:
        prepare_function: table-side steps (``step`` = ``onboard`` | ``abandon``).
        deliver_function: posts ``frame`` to the connection.
        options: key of the execution log group, its retention, execution data (state inputs
            hold customer ids and greeting text: off unless a development stage turns it on),
            removal policy, the retry of transient (Lambda service) errors on every task, and the
            execution timeout, at most 5 minutes (Express; defaults to 2 minutes).
        delivery_interval: first retry delay of the delivery. Defaults to 1 second.
        delivery_max_attempts: retries of the delivery while the connection is not open.
            Defaults to 6.
        delivery_max_delay: cap of one retry delay. Defaults to 8 seconds.
        alarm_actions: actions of the failed- and timed-out-executions alarms. Defaults to none.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        prepare_function: lambda_.IFunction,
        deliver_function: lambda_.IFunction,
        options: WorkflowOptions,
        delivery_interval: Duration | None = None,
        delivery_max_attempts: int = 6,
        delivery_max_delay: Duration | None = None,
        alarm_actions: Sequence[cloudwatch.IAlarmAction] = (),
    ) -> None:
        super().__init__(scope, construct_id)
        interval = delivery_interval or Duration.seconds(1)
        max_delay = delivery_max_delay or Duration.seconds(8)
        errors = PropErrors(self)
        errors.check_range("delivery_max_attempts", delivery_max_attempts, 1, 20)
        errors.check(
            1 <= interval.to_seconds() <= max_delay.to_seconds(),
            "delivery_interval must be >= 1 s and <= delivery_max_delay "
            f"(given {interval.to_seconds()} s, {max_delay.to_seconds()} s)",
        )
        self._retry: RetryPolicy = options.retry

        definition = self._definition(prepare_function, deliver_function, interval, delivery_max_attempts, max_delay)
        # "Default" hides this level from CloudFormation's logical ids, so the log group, state
        # machine, role and alarm keep the ids they had when this construct created them itself.
        self.workflow: WorkflowStateMachine = WorkflowStateMachine(
            self,
            "Default",
            definition=definition,
            options=options.with_timeout(options.timeout or Duration.minutes(2)),
            state_machine_type=sfn.StateMachineType.EXPRESS,
            alarm_actions=alarm_actions,
            failed_alarm_description="Onboarding executions failed: customers could not start a chat.",
        )
        self.log_group: logs.LogGroup = self.workflow.log_group
        self.state_machine: sfn.StateMachine = self.workflow.state_machine
        self.executions_failed_alarm: cloudwatch.Alarm = self.workflow.executions_failed_alarm
        self.workflow.acknowledge_invokes([prepare_function, deliver_function])

    def _definition(
        self,
        prepare_function: lambda_.IFunction,
        deliver_function: lambda_.IFunction,
        interval: Duration,
        delivery_max_attempts: int,
        max_delay: Duration,
    ) -> sfn.IChainable:
        """Prepare -> DeliverFrame -> Onboarded, with the abandon and failure branches."""
        connection = {
            "connection_id": sfn.JsonPath.string_at("$.connection_id"),
            "domain_name": sfn.JsonPath.string_at("$.domain_name"),
            "stage": sfn.JsonPath.string_at("$.stage"),
        }

        prepare = self._prepare(prepare_function, connection)

        deliver = self._deliver(
            "DeliverFrame",
            deliver_function,
            connection,
            "$.onboarding.frame",
            interval,
            delivery_max_attempts,
            max_delay,
        )
        abandon = tasks.LambdaInvoke(
            self,
            "ConnectionAbandoned",
            lambda_function=prepare_function,
            payload=sfn.TaskInput.from_object(
                {"step": "abandon", "connection_id": sfn.JsonPath.string_at("$.connection_id")}
            ),
            result_path=sfn.JsonPath.DISCARD,
            retry_on_service_exceptions=False,
        )
        self._retry.apply(abandon)
        abandoned = sfn.Succeed(self, "ClientLeft", comment="The client closed its connection before it opened.")
        failed = sfn.Fail(
            self, "OnboardingFailed", error="OnboardingFailed", cause="The connection could not be prepared."
        )
        failure_frame = sfn.Pass(
            self,
            "FailureFrame",
            parameters={
                "type": "error",
                "code": "onboarding_failed",
                "message": "We could not start your chat session. Please reconnect in a moment.",
            },
            result_path="$.failure_frame",
        )
        notify = self._deliver(
            "DeliverFailureFrame",
            deliver_function,
            connection,
            "$.failure_frame",
            interval,
            delivery_max_attempts,
            max_delay,
        )
        notify.add_catch(failed, errors=[sfn.Errors.ALL], result_path="$.notify_error")
        failure_frame.next(notify).next(failed)

        prepare.add_catch(failure_frame, errors=[sfn.Errors.ALL], result_path="$.error")
        deliver.add_catch(abandon, errors=[CONNECTION_NOT_READY], result_path="$.error")
        deliver.add_catch(failure_frame, errors=[sfn.Errors.ALL], result_path="$.error")
        abandon.add_catch(abandoned, errors=[sfn.Errors.ALL], result_path="$.error")
        abandon.next(abandoned)
        definition = prepare.next(deliver).next(sfn.Succeed(self, "Onboarded"))
        return definition

    def _prepare(self, prepare_function: lambda_.IFunction, connection: dict[str, str]) -> tasks.LambdaInvoke:
        """Prepare: the session and connection record; its result holds the welcome frame."""
        prepare = tasks.LambdaInvoke(
            self,
            "Prepare",
            lambda_function=prepare_function,
            payload=sfn.TaskInput.from_object(
                {
                    "step": "onboard",
                    **connection,
                    "customer_id": sfn.JsonPath.string_at("$.customer_id"),
                    # The whole input too: optional fields (the customer's e-mail) need no default here.
                    "request": sfn.JsonPath.object_at("$$.Execution.Input"),
                    "session_id": sfn.JsonPath.string_at("$.session_id"),
                }
            ),
            result_selector={
                "session_id": sfn.JsonPath.string_at("$.Payload.session_id"),
                "frame": sfn.JsonPath.object_at("$.Payload.frame"),
            },
            result_path="$.onboarding",
            retry_on_service_exceptions=False,
        )
        self._retry.apply(prepare)
        return prepare

    def _deliver(
        self,
        construct_id: str,
        function: lambda_.IFunction,
        connection: dict[str, str],
        frame_path: str,
        interval: Duration,
        max_attempts: int,
        max_delay: Duration,
    ) -> tasks.LambdaInvoke:
        task = tasks.LambdaInvoke(
            self,
            construct_id,
            lambda_function=function,
            payload=sfn.TaskInput.from_object({**connection, "frame": sfn.JsonPath.object_at(frame_path)}),
            result_path=sfn.JsonPath.DISCARD,
            retry_on_service_exceptions=False,
        )
        task.add_retry(
            errors=[CONNECTION_NOT_READY],
            interval=interval,
            max_attempts=max_attempts,
            backoff_rate=2,
            max_delay=max_delay,
            jitter_strategy=sfn.JitterType.FULL,
        )
        self._retry.apply(task)
        return task

    def grant_start_execution(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let ``grantee`` start executions (asynchronously, StartExecution)."""
        return self.workflow.grant_start_execution(grantee)
