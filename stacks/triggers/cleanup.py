"""What starts the session cleanup workflow: an hourly sweep, and a one-time run when a session ends."""

from __future__ import annotations

from aws_cdk import Duration, Stack
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_scheduler as scheduler
from constructs import Construct

from constructs_lib import SecureQueue, SingleTable
from constructs_lib.nag_findings import acknowledge_policy
from stacks.functions import StageFunctions
from stacks.workflows import CleanupWorkflow


class CleanupTriggers(Construct):
    """The cleanup workflow's two triggers and the queue of what they could not start.

    Example::

        CleanupTriggers(self, "CleanupTriggers", cleanup=cleanup, sessions=storage.sessions,
                        bus=events.bus, session_ended=status_changed_pattern("disconnected"),
                        encryption_key=key, functions=functions)

    * ``Schedule``: every hour a sweep (``{"trigger": "schedule"}``), the safety net for every
      session waiting past its grace.
    * ``SessionEnded``: a session's end on the bus invokes ``CleanupScheduler``, which gives that
      session a one-time EventBridge Scheduler schedule at the end of its grace, in the
      ``Schedules`` group (so the function's grant names only them); the schedule starts the
      workflow with the session through ``SchedulerRole``.
    * ``DeadLetterQueue``: every start and invocation that failed after its retries (the rule
      targets', the schedules', the function's asynchronous invocations).

    Args:
        cleanup: the workflow to start.
        sessions: the table the scheduler reads the ended session from.
        bus: the bus the session events are on; ``session_ended`` selects the ends.
        encryption_key: customer key of the dead-letter queue.
        functions: the app's function factory.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cleanup: CleanupWorkflow,
        sessions: SingleTable,
        bus: events.IEventBus,
        session_ended: events.EventPattern,
        encryption_key: kms.IKey,
        functions: StageFunctions,
    ) -> None:
        super().__init__(scope, construct_id)
        self._cleanup = cleanup
        self.dead_letter_queue: SecureQueue = SecureQueue(
            self, "DeadLetterQueue", encryption_key=encryption_key, dead_letter_queue=False
        )
        # EventBridge starts the workflow with this role: StartExecution and the workflow's history key.
        rule_role = iam.Role(
            self,
            "ScheduleRole",
            assumed_by=iam.ServicePrincipal("events.amazonaws.com"),
            description="EventBridge: starts the hourly cleanup",
        )
        cleanup.grant_start_execution(rule_role)
        self.schedule: events.Rule = events.Rule(
            self,
            "Schedule",
            description="Hourly session cleanup: the safety net for every session waiting past its grace",
            schedule=events.Schedule.rate(Duration.hours(1)),
            targets=[
                targets.SfnStateMachine(
                    cleanup.state_machine,
                    role=rule_role,
                    input=events.RuleTargetInput.from_object({"trigger": "schedule"}),
                    dead_letter_queue=self.dead_letter_queue.queue,
                    retry_attempts=4,
                    max_event_age=Duration.hours(2),
                )
            ],
        )
        self.scheduler_function: lambda_.Function = self._scheduler(sessions, functions)
        self.session_ended_rule: events.Rule = events.Rule(
            self,
            "SessionEnded",
            description="SessionEnded: a session was disconnected -> schedule its own cleanup at grace end",
            event_bus=bus,
            event_pattern=session_ended,
            targets=[
                targets.LambdaFunction(
                    self.scheduler_function,
                    event=events.RuleTargetInput.from_event_path("$.detail"),
                    dead_letter_queue=self.dead_letter_queue.queue,
                    retry_attempts=4,
                    max_event_age=Duration.hours(2),
                )
            ],
        )

    def _scheduler(self, sessions: SingleTable, functions: StageFunctions) -> lambda_.Function:
        """The function that gives each ended session a one-time schedule, its group and the schedules' role."""
        self.schedules = scheduler.ScheduleGroup(self, "Schedules")
        role = iam.Role(
            self,
            "SchedulerRole",
            assumed_by=iam.ServicePrincipal(
                "scheduler.amazonaws.com", conditions={"StringEquals": {"aws:SourceAccount": Stack.of(self).account}}
            ),
            description="EventBridge Scheduler: starts one session's cleanup when its grace period ends",
        )
        self._cleanup.grant_start_execution(role)
        self.dead_letter_queue.grant_send_messages(role)
        dlq = self.dead_letter_queue.queue
        fn = functions(
            self,
            "CleanupScheduler",
            "lambdas.orchestration.cleanup_worker.schedule",
            {
                "TABLE_NAME": sessions.table.table_name,
                "CLEANUP_SCHEDULE_GROUP": self.schedules.schedule_group_name,
                "CLEANUP_STATE_MACHINE_ARN": self._cleanup.state_machine.state_machine_arn,
                "CLEANUP_SCHEDULER_ROLE_ARN": role.role_arn,
                "CLEANUP_DEAD_LETTER_QUEUE_ARN": dlq.queue_arn,
            },
            on_failure=dlq,
        ).function
        sessions.grant_read_data(fn)
        self.schedules.grant_write_schedules(fn)
        group = Stack.of(self).resolve(self.schedules.schedule_group_name)
        acknowledge_policy(
            fn.role,  # type: ignore[arg-type]
            {
                f"Resource::arn:<AWS::Partition>:scheduler:<AWS::Region>:<AWS::AccountId>:schedule/{group}/*": (
                    "The one-time schedules of ended sessions, named at run time, in this group only."
                ),
            },
        )
        role.grant_pass_role(fn.grant_principal)
        return fn
