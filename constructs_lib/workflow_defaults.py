"""The policy every Step Functions workflow follows: retries, logging, tracing, timeout, alarms.

Example::

    options = WorkflowOptions(encryption_key=key, timeout=Duration.minutes(60),
                              log_retention=logs.RetentionDays.ONE_WEEK)
    task = options.retry.apply(tasks.LambdaInvoke(self, "Step", lambda_function=fn))
    machine = WorkflowStateMachine(self, "Cleanup", definition=sfn.Chain.start(task), options=options)
    machine.grant_start_execution(api_role)

Why one place: a workflow that forgets its retry jitter, its execution logs or its alarms is
the one that pages nobody at 3 a.m.; a workflow construct takes one :class:`WorkflowOptions`,
builds every Task through its :class:`RetryPolicy` and its state machine through
:class:`WorkflowStateMachine`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from aws_cdk import Acknowledgment, Duration, RemovalPolicy, Token, Validations
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from constructs_lib.nag_findings import acknowledge_policy, resource_finding
from constructs_lib.validation import PropErrors

#: Errors worth retrying: throttling, service faults and Lambda's own transient failures.
#: Business errors (a failed condition, "no agent") are never in this list: they go to a Catch.
TRANSIENT_ERRORS: tuple[str, ...] = (
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    "Lambda.TooManyRequestsException",
    "Lambda.Unknown",
    "DynamoDb.ProvisionedThroughputExceededException",
    "DynamoDb.ThrottlingException",
    "DynamoDb.RequestLimitExceededException",
    "DynamoDb.InternalServerErrorException",
    "DynamoDB.ProvisionedThroughputExceededException",
    "DynamoDB.ThrottlingException",
    "DynamoDB.RequestLimitExceeded",
    "DynamoDB.InternalServerErrorException",
    "DynamoDB.AmazonDynamoDBException",
    "SQS.AmazonSQSException",
    "SQS.SdkClientException",
    "SNS.AmazonSNSException",
    "SNS.SdkClientException",
)


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter for transient errors, applied to every Task.

    Attributes:
        interval: first delay. Defaults to 1 second.
        max_attempts: retries after the first try. Defaults to 3.
        backoff_rate: multiplier per retry. Defaults to 2.
        max_delay: cap of one delay. Defaults to 30 seconds.
        errors: error names retried. Defaults to :data:`TRANSIENT_ERRORS`.
    """

    interval: Duration = field(default_factory=lambda: Duration.seconds(1))
    max_attempts: int = 3
    backoff_rate: float = 2.0
    max_delay: Duration = field(default_factory=lambda: Duration.seconds(30))
    errors: Sequence[str] = TRANSIENT_ERRORS

    def problems(self) -> list[str]:
        """What is wrong with this policy, one message per problem (empty when it is sound)."""
        found = []
        if not 0 <= self.max_attempts <= 10:
            found.append(f"retry max_attempts must be 0..10 (given {self.max_attempts})")
        if not 1.0 <= self.backoff_rate <= 10.0:
            found.append(f"retry backoff_rate must be 1..10 (given {self.backoff_rate})")
        if not self.errors:
            found.append("retry errors must name at least one error to retry (given none)")
        return found

    def apply(self, task: sfn.TaskStateBase) -> sfn.TaskStateBase:
        """Add the retry to ``task`` and return it (so a definition reads top to bottom).

        A policy with :meth:`problems` fails the synthesis with the task's path instead.
        """
        problems = self.problems()
        if problems:
            errors = PropErrors(task)
            for problem in problems:
                errors.check(False, problem)
            return task
        task.add_retry(
            errors=list(self.errors),
            interval=self.interval,
            max_attempts=self.max_attempts,
            backoff_rate=self.backoff_rate,
            max_delay=self.max_delay,
            jitter_strategy=sfn.JitterType.FULL,
        )
        return task


def callback_input(fields: Mapping[str, Any]) -> sfn.TaskInput:
    """The input of a ``.waitForTaskToken`` task: ``fields``, in order, with JSONPath strings read from the state.

    Example::

        tasks.LambdaInvoke(self, "Wait", lambda_function=fn,
                           integration_pattern=sfn.IntegrationPattern.WAIT_FOR_TASK_TOKEN,
                           payload=callback_input({"order_id": "$.order_id", "token": sfn.JsonPath.task_token}))

    A value that is a plain string starting with ``$`` (``"$.order_id"``, ``"$$.Execution.Id"``,
    ``"$"``) becomes a ``"<field>.$"`` entry, exactly what ``JsonPath.string_at`` renders; a
    literal string cannot start with ``$`` here (give it as ``JsonPath.string_at`` of a state
    field instead). Every other value, the task token among them, passes as given.

    Why not ``JsonPath`` tokens: CDK checks that a callback task's input holds the task token by
    parsing every JSONPath token of the input with a parser that refuses ``_`` in a path (and a
    number inside an intrinsic function); the error it raises and catches on the way is written
    to ``CDK_ERROR_FILE`` (the CLI's ``error.txt``) on every synthesis. A ``"<field>.$"`` entry is
    not a token, so the check reads only the token, and the rendered input is the same.
    """
    return sfn.TaskInput.from_object(
        {(f"{name}.$" if _is_path(value) else name): value for name, value in fields.items()}
    )


def _is_path(value: Any) -> bool:
    """A plain JSONPath string (a token, which is a string too, is not one)."""
    return isinstance(value, str) and not Token.is_unresolved(value) and value.startswith("$")


@dataclass(frozen=True)
class WorkflowOptions:
    """What every workflow of an app shares: encryption, logging, removal, retries and timeout.

    Build one per stage and hand it to every workflow construct, so the six settings are stated once.

    Attributes:
        encryption_key: customer key of the execution log group (and of what a workflow creates
            that holds data). Required (hardened default); its key policy must allow the
            CloudWatch Logs service.
        log_retention: retention of the execution log group. Defaults to one week.
        include_execution_data: log inputs and outputs of every state. Defaults to false
            (production must not copy customer data into logs); a development stage turns it on.
        removal_policy: of the log group and of what a workflow creates. Defaults to DESTROY
            (logs age out by retention anyway).
        retry: retry of transient errors on every Task. Defaults to :class:`RetryPolicy` ().
        timeout: overall execution timeout. Defaults to the workflow's own default (one hour for
            a Standard :class:`WorkflowStateMachine`, five minutes for an Express one).
    """

    encryption_key: kms.IKey
    log_retention: logs.RetentionDays = logs.RetentionDays.ONE_WEEK
    include_execution_data: bool = False
    removal_policy: RemovalPolicy = RemovalPolicy.DESTROY
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    timeout: Duration | None = None

    def with_timeout(self, timeout: Duration) -> WorkflowOptions:
        """These options with ``timeout`` (a workflow whose bound comes from its own props)."""
        return replace(self, timeout=timeout)


#: Step Functions bounds an Express execution at five minutes.
MAX_EXPRESS_DURATION = Duration.minutes(5)
_MAX_STANDARD_SECONDS = 86400 * 365


class WorkflowStateMachine(Construct):
    """A state machine with execution logs, X-Ray, an overall timeout and two alarms.

    Example::

        machine = WorkflowStateMachine(self, "Handoff", definition=chain,
                                       options=WorkflowOptions(encryption_key=key, timeout=Duration.hours(1)))

    Args:
        definition: the workflow, built with the Step Functions DSL (``DefinitionBody.from_chainable``).
        options: encryption key, log retention, execution data, removal policy and timeout
            (:class:`WorkflowOptions`; its ``retry`` is for the caller's Tasks).
        state_machine_type: STANDARD (long-running, exactly once) or EXPRESS (at most five
            minutes, high rate). Defaults to STANDARD. An Express timeout must be 1 s..5 min.
        alarm_actions: actions of both alarms (e.g. an SNS topic action). Defaults to none:
            the alarms still show in the console and dashboards.
        failed_alarm_threshold: failed executions per 5 minutes that raise the alarm. Defaults to 1.
        failed_alarm_description: what a failed execution means for the workflow's users.
            Defaults to "Executions of this workflow failed.".
        comment: the definition's comment. Defaults to none.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        definition: sfn.IChainable,
        options: WorkflowOptions,
        state_machine_type: sfn.StateMachineType = sfn.StateMachineType.STANDARD,
        alarm_actions: Sequence[cloudwatch.IAlarmAction] = (),
        failed_alarm_threshold: int = 1,
        failed_alarm_description: str = "Executions of this workflow failed.",
        comment: str | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        express = state_machine_type == sfn.StateMachineType.EXPRESS
        timeout = options.timeout or (MAX_EXPRESS_DURATION if express else Duration.hours(1))
        errors = PropErrors(self)
        errors.check(
            failed_alarm_threshold >= 1, f"failed_alarm_threshold must be >= 1 (given {failed_alarm_threshold})"
        )
        if not timeout.is_unresolved():
            seconds = timeout.to_seconds()
            if express:
                errors.check(
                    1 <= seconds <= MAX_EXPRESS_DURATION.to_seconds(),
                    f"timeout must be 1 s..5 min for an Express workflow (given {seconds} s)",
                )
            else:
                errors.check(1 <= seconds <= _MAX_STANDARD_SECONDS, f"timeout must be 1 s..1 year (given {seconds} s)")
        self.log_group: logs.LogGroup = logs.LogGroup(
            self,
            "LogGroup",
            retention=options.log_retention,
            encryption_key=options.encryption_key,
            removal_policy=options.removal_policy,
        )
        self.state_machine: sfn.StateMachine = sfn.StateMachine(
            self,
            "Resource",
            definition_body=sfn.DefinitionBody.from_chainable(definition),
            state_machine_type=state_machine_type,
            timeout=timeout,
            tracing_enabled=True,
            comment=comment,
            logs=sfn.LogOptions(
                destination=self.log_group,
                level=sfn.LogLevel.ALL,
                include_execution_data=options.include_execution_data,
            ),
            encryption_configuration=sfn.CustomerManagedEncryptionConfiguration(
                options.encryption_key, HISTORY_DATA_KEY_REUSE
            ),
        )
        self._grant_own_history_key(options.encryption_key)
        self.executions_failed_alarm: cloudwatch.Alarm = self._alarm(
            "ExecutionsFailedAlarm", self.state_machine.metric_failed, failed_alarm_threshold, failed_alarm_description
        )
        self.executions_timed_out_alarm: cloudwatch.Alarm = self._alarm(
            "ExecutionsTimedOutAlarm",
            self.state_machine.metric_timed_out,
            1,
            "Executions of this workflow hit the overall timeout.",
        )
        for alarm in (self.executions_failed_alarm, self.executions_timed_out_alarm):
            for action in alarm_actions:
                alarm.add_alarm_action(action)
        self._acknowledge_service_wildcards()

    def _grant_own_history_key(self, key: kms.IKey) -> None:
        """The execution role's use of the history key, for this state machine's ARN as encryption context.

        CDK's own statement names the state machine by its physical name, which is empty when
        CloudFormation names the machine, so it matches no request. The ARN cannot go in the
        role's default policy (the state machine depends on it), hence a policy of its own.
        """
        iam.Policy(
            self,
            "HistoryKeyPolicy",
            roles=[self.state_machine.role],
            statements=[_history_key_statement(self.state_machine, key, HISTORY_KMS_ACTIONS["states:StartExecution"])],
        )

    def _alarm(
        self, construct_id: str, metric: Callable[..., cloudwatch.Metric], threshold: int, description: str
    ) -> cloudwatch.Alarm:
        return metric(period=Duration.minutes(5), statistic="Sum").create_alarm(
            self,
            construct_id,
            threshold=threshold,
            evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description=description,
        )

    def _acknowledge_service_wildcards(self) -> None:
        policy = self.state_machine.role.node.try_find_child("DefaultPolicy")
        if policy is None:
            return
        Validations.of(policy).acknowledge(
            Acknowledgment(
                id="AwsSolutions-IAM5[Resource::*]",
                reason="Step Functions log delivery (logs:*LogDelivery*, DescribeLogGroups, ...) and X-Ray "
                "(PutTraceSegments, GetSampling*) support no resource-level permissions; every data-plane "
                "grant of this role is scoped to its resource.",
            )
        )

    def acknowledge_invokes(self, functions: Sequence[lambda_.IFunction]) -> None:
        """Acknowledge the ``<function arn>:*`` finding of each Lambda task's invoke grant."""
        findings = {
            resource_finding(self, fn.function_arn, ":*", owner=fn): "lambda:InvokeFunction on '<arn>:*' covers "
            "the versions and aliases of this workflow's own function only (CDK's LambdaInvoke grant)."
            for fn in functions
        }
        acknowledge_policy(self.state_machine.role, findings)

    def grant_start_execution(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let a principal start executions (the API, a schedule, a rule target), and use the history key."""
        grant_history_key(grantee, self.state_machine, ["states:StartExecution"])
        return self.state_machine.grant_start_execution(grantee)

    def grant_task_response(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let a principal complete this workflow's callback tasks (SendTaskSuccess/Failure/Heartbeat)."""
        grant_history_key(grantee, self.state_machine, ["states:SendTaskSuccess"])
        return self.state_machine.grant_task_response(grantee)

    def grant_task_failure(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let a principal only fail this workflow's callback tasks (SendTaskFailure)."""
        grant_history_key(grantee, self.state_machine, ["states:SendTaskFailure"])
        return self.state_machine.grant(grantee, "states:SendTaskFailure")

    def grant_read(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let a principal describe executions (clients poll the execution ARN)."""
        grant_history_key(grantee, self.state_machine, ["states:DescribeExecution"])
        return self.state_machine.grant_read(grantee)


#: How long Step Functions reuses one data key of the history key (60..900 s); five minutes
#: bounds the KMS requests of a busy workflow at one per five minutes.
HISTORY_DATA_KEY_REUSE = Duration.minutes(5)

#: What a caller of each Step Functions action needs on the key of a state machine encrypted with
#: a customer key (Step Functions developer guide, "Data at rest encryption"): writing into an
#: execution encrypts with a new data key, reading decrypts.
HISTORY_KMS_ACTIONS: Mapping[str, Sequence[str]] = {
    "states:StartExecution": ("kms:GenerateDataKey", "kms:Decrypt"),
    "states:StartSyncExecution": ("kms:GenerateDataKey", "kms:Decrypt"),
    "states:SendTaskSuccess": ("kms:GenerateDataKey", "kms:Decrypt"),
    "states:SendTaskFailure": ("kms:GenerateDataKey", "kms:Decrypt"),
    "states:SendTaskHeartbeat": ("kms:GenerateDataKey", "kms:Decrypt"),
    "states:RedriveExecution": ("kms:GenerateDataKey", "kms:Decrypt"),
    "states:DescribeExecution": ("kms:Decrypt",),
    "states:GetExecutionHistory": ("kms:Decrypt",),
    "states:StopExecution": ("kms:Decrypt",),
}


def history_key_of(state_machine: sfn.IStateMachine) -> str | None:
    """The ARN of the customer key that encrypts ``state_machine``'s history (None: AWS's own key, or unknown)."""
    resource = state_machine.node.default_child
    if not isinstance(resource, sfn.CfnStateMachine):
        return None
    encryption = resource.encryption_configuration
    if (
        isinstance(encryption, sfn.CfnStateMachine.EncryptionConfigurationProperty)
        and encryption.type == "CUSTOMER_MANAGED_KMS_KEY"
        and encryption.kms_key_id
    ):
        return encryption.kms_key_id
    return None


def _history_key_statement(
    state_machine: sfn.IStateMachine, key: kms.IKey | str, actions: Sequence[str]
) -> iam.PolicyStatement:
    return iam.PolicyStatement(
        actions=list(actions),
        resources=[key if isinstance(key, str) else key.key_arn],
        conditions={
            "StringEquals": {"kms:EncryptionContext:aws:states:stateMachineArn": state_machine.state_machine_arn}
        },
    )


def grant_history_key(grantee: iam.IGrantable, state_machine: sfn.IStateMachine, actions: Sequence[str]) -> None:
    """Let ``grantee`` use the key of an encrypted state machine for ``actions`` (Step Functions actions).

    A state machine whose history is encrypted with a customer key refuses StartExecution,
    SendTask*, DescribeExecution, ... to a caller that may not use the key for that machine;
    the grant is limited to this machine by the encryption context. A machine with AWS's own key
    needs nothing, and nothing is granted.
    """
    key = history_key_of(state_machine)
    if key is None:
        return
    kms_actions = sorted({kms_action for action in actions for kms_action in HISTORY_KMS_ACTIONS[action]})
    grantee.grant_principal.add_to_principal_policy(_history_key_statement(state_machine, key, kms_actions))
