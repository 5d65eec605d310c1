"""An Express workflow that prepares a new WebSocket connection and greets it once it is open."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Acknowledgment, CfnElement, Duration, RemovalPolicy, Stack, Validations
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from constructs_lib.workflow_defaults import RetryPolicy

#: Raised by the deliver function while the connection cannot take frames yet.
CONNECTION_NOT_READY = "ConnectionNotReady"
MAX_EXPRESS_DURATION = Duration.minutes(5)


class OnboardingWorkflow(Construct):
    """Express state machine: prepare the connection, then deliver a frame once it is open.

    Example::

        workflow = OnboardingWorkflow(self, "Onboarding", prepare_function=onboarding_fn,
                                      deliver_function=deliver_fn, encryption_key=key)
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

    Hardened defaults: logs of every state (level ALL) to a log group with a retention, X-Ray
    tracing, an execution timeout, retries with jitter on every task.

    Args:
        prepare_function: table-side steps (``step`` = ``onboard`` | ``abandon``).
        deliver_function: posts ``frame`` to the connection.
        timeout: execution timeout, at most 5 minutes (Express). Defaults to 2 minutes.
        delivery_interval: first retry delay of the delivery. Defaults to 1 second.
        delivery_max_attempts: retries of the delivery while the connection is not open.
            Defaults to 6.
        delivery_max_delay: cap of one retry delay. Defaults to 8 seconds.
        encryption_key: customer key of the execution log group. Required (hardened default);
            its key policy must allow the CloudWatch Logs service.
        log_retention: retention of the execution log group. Defaults to one week.
        include_execution_data: log state inputs and outputs. Defaults to False (they hold
            customer ids and greeting text); a development stage turns it on explicitly.
        log_removal_policy: defaults to DESTROY (logs age out by retention anyway).
        retry_policy: retry of transient (Lambda service) errors on every task. Defaults to the
            app-wide :class:`~constructs_lib.workflow_defaults.RetryPolicy` (full jitter).
        alarm_actions: actions of the failed-executions alarm. Defaults to none.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        prepare_function: lambda_.IFunction,
        deliver_function: lambda_.IFunction,
        timeout: Duration | None = None,
        delivery_interval: Duration | None = None,
        delivery_max_attempts: int = 6,
        delivery_max_delay: Duration | None = None,
        encryption_key: kms.IKey,
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_WEEK,
        include_execution_data: bool = False,
        log_removal_policy: RemovalPolicy = RemovalPolicy.DESTROY,
        retry_policy: RetryPolicy | None = None,
        alarm_actions: Sequence[cloudwatch.IAlarmAction] = (),
    ) -> None:
        super().__init__(scope, construct_id)
        timeout = timeout or Duration.minutes(2)
        interval = delivery_interval or Duration.seconds(1)
        max_delay = delivery_max_delay or Duration.seconds(8)
        if not 1 <= timeout.to_seconds() <= MAX_EXPRESS_DURATION.to_seconds():
            raise ValueError(f"timeout must be 1 s..5 min for an Express workflow (given {timeout.to_seconds()} s)")
        if not 1 <= delivery_max_attempts <= 20:
            raise ValueError(f"delivery_max_attempts must be 1..20 (given {delivery_max_attempts})")
        if not 1 <= interval.to_seconds() <= max_delay.to_seconds():
            raise ValueError(
                "delivery_interval must be >= 1 s and <= delivery_max_delay "
                f"(given {interval.to_seconds()} s, {max_delay.to_seconds()} s)"
            )
        self._retry = retry_policy or RetryPolicy()

        connection = {
            "connection_id": sfn.JsonPath.string_at("$.connection_id"),
            "domain_name": sfn.JsonPath.string_at("$.domain_name"),
            "stage": sfn.JsonPath.string_at("$.stage"),
        }

        prepare = tasks.LambdaInvoke(
            self,
            "Prepare",
            lambda_function=prepare_function,
            payload=sfn.TaskInput.from_object(
                {
                    "step": "onboard",
                    **connection,
                    "customer_id": sfn.JsonPath.string_at("$.customer_id"),
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

        self.log_group: logs.LogGroup = logs.LogGroup(
            self,
            "LogGroup",
            retention=log_retention,
            encryption_key=encryption_key,
            removal_policy=log_removal_policy,
        )
        self.state_machine: sfn.StateMachine = sfn.StateMachine(
            self,
            "Resource",
            state_machine_type=sfn.StateMachineType.EXPRESS,
            definition_body=sfn.DefinitionBody.from_chainable(definition),
            timeout=timeout,
            tracing_enabled=True,
            logs=sfn.LogOptions(
                destination=self.log_group, level=sfn.LogLevel.ALL, include_execution_data=include_execution_data
            ),
        )
        self.executions_failed_alarm: cloudwatch.Alarm = self.state_machine.metric_failed(
            period=Duration.minutes(5), statistic="Sum"
        ).create_alarm(
            self,
            "ExecutionsFailedAlarm",
            threshold=1,
            evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description="Onboarding executions failed: customers could not start a chat.",
        )
        for action in alarm_actions:
            self.executions_failed_alarm.add_alarm_action(action)
        self._acknowledge_service_wildcards(prepare_function, deliver_function)

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

    def _acknowledge_service_wildcards(self, *functions: lambda_.IFunction) -> None:
        policy = self.state_machine.role.node.try_find_child("DefaultPolicy")
        if policy is None:
            return
        Validations.of(policy).acknowledge(
            Acknowledgment(
                id="AwsSolutions-IAM5[Resource::*]",
                reason="Step Functions log delivery (logs:*LogDelivery*, DescribeLogGroups, ...) and X-Ray "
                "support no resource-level permissions; every data-plane grant of this role is scoped.",
            )
        )
        for function in functions:
            Validations.of(policy).acknowledge(
                Acknowledgment(
                    id=f"AwsSolutions-IAM5[Resource::<{_logical_id(function)}.Arn>:*]",
                    reason="lambda:InvokeFunction on '<function arn>:*' covers the versions and aliases of this "
                    "workflow's own function (CDK's LambdaInvoke grant).",
                )
            )

    def grant_start_execution(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let ``grantee`` start executions (asynchronously, StartExecution)."""
        return self.state_machine.grant_start_execution(grantee)


def _logical_id(function: lambda_.IFunction) -> str:
    """The CloudFormation logical id of a function, as cdk-nag names it in a finding."""
    child = function.node.default_child
    if not isinstance(child, CfnElement):
        return function.node.id
    return str(Stack.of(function).resolve(child.logical_id))
