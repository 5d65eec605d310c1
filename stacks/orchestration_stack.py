"""OrchestrationStack: the Step Functions workflows (handoff, cleanup, export) and their triggers."""

from __future__ import annotations

from collections.abc import Callable

from aws_cdk import Duration, Stack
from aws_cdk import aws_events as eventbridge
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_ssm as ssm
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from constructs_lib import EncryptionKey, FanoutTopic, SecureQueue, ServiceAlarms
from constructs_lib.approval_gate import HumanApprovalGate
from constructs_lib.nag_findings import acknowledge_policy, resource_finding
from constructs_lib.workflow_defaults import WorkflowOptions
from contracts import keys, schema
from stacks.config import StageConfig
from stacks.events_stack import EventsStack, status_changed_pattern
from stacks.functions import log_retention, stage_function
from stacks.operations import watch_stack
from stacks.storage_stack import StorageStack
from stacks.workflows import CleanupWorkflow, ExportWorkflow, HandoffFunctions, HandoffWorkflow, app_workflow_options

_FunctionFactory = Callable[..., lambda_.Function]

#: Sessions per cleanup index page: one page and its results stay far below the 256 KiB state
#: payload, and a shard's child execution records about 18 events per page (25,000 at most).
CLEANUP_PAGE_SIZE = 500

#: The REST API writes its base URL here (it is deployed after this stack); the approval
#: gate's request Lambda reads it at run time to build the review links.
REST_API_URL_PARAMETER = "/mangaassist/{stage}/rest-api-url"


def rest_api_url_parameter(stage: str) -> str:
    return REST_API_URL_PARAMETER.format(stage=stage)


class OrchestrationStack(Stack):
    """The multi-step workflows. Receives the storage and the event bus they react to.

    Exposes ``handoff_state_machine``, ``cleanup_state_machine``, ``export_state_machine``
    (start them with the execution name as idempotency key), ``handoff`` (its
    ``grant_task_response`` is what the agent routes need), ``approval_gate`` (whose
    ``add_review_routes`` mounts the review links on the REST API), and :meth:`grant_agent_routes`.

    Execution inputs: handoff ``{"session_id", "reason", "priority", "requested_by"}``; cleanup
    ``{}`` or ``{"older_than_seconds"}`` (admin) or ``{"now"}`` (tests); export
    ``{"requested_by", "reason"}``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: StageConfig,
        storage: StorageStack,
        events: EventsStack,
        **kwargs: object,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)  # type: ignore[arg-type]
        self.config = config
        table, key = storage.table, storage.key
        retention = log_retention(config.log_retention_days)
        base_env = {"TABLE_NAME": table.table_name}

        def function(
            construct_id: str,
            handler: str,
            environment: dict[str, str] | None = None,
            *,
            table_access: bool = True,
        ) -> lambda_.Function:
            fn = stage_function(
                self,
                construct_id,
                config,
                handler=handler,
                environment={**base_env, **(environment or {})},
                log_encryption_key=key,
            ).function
            if table_access:
                storage.sessions.grant_read_write_data(fn)
            return fn

        options = app_workflow_options(config, key, retention)
        self._human_handoff(config, storage, events, function, options)
        self._session_cleanup(config, storage, events, function, options)
        self._data_export(config, storage, events, function, options)
        self.alarms: ServiceAlarms = watch_stack(
            self, topic=storage.ops_topic, prefix=f"MangaAssist-{config.name}-Orchestration"
        )

    def _human_handoff(
        self,
        config: StageConfig,
        storage: StorageStack,
        events: EventsStack,
        function: _FunctionFactory,
        options: WorkflowOptions,
    ) -> None:
        """The handoff workflow, its seven Lambdas and the consumer of its assignment queue."""
        table = storage.table
        # -- human handoff --------------------------------------------------------------------
        topic_env = {"HANDOFF_TOPIC_ARN": events.handoff_topic.topic_arn}
        handoff_functions = HandoffFunctions(
            check_agent_availability=function("CheckAgentAvailability", "lambdas.orchestration.handoff.check_agent"),
            escalate_to_manager=function("EscalateToManager", "lambdas.orchestration.handoff.escalate"),
            update_handoff=function("HandoffTransaction", "lambdas.orchestration.handoff.begin"),
            transfer_context=function("TransferContext", "lambdas.orchestration.handoff.transfer_context", topic_env),
            await_reply=function("AwaitAgentReply", "lambdas.orchestration.handoff.await_reply"),
            reassign_agent=function("ReassignAgent", "lambdas.orchestration.handoff.reassign"),
            handoff_failed=function("HandoffFailed", "lambdas.orchestration.handoff.fail"),
        )
        events.handoffs.grant_publish(handoff_functions.transfer_context)
        self.handoff: HandoffWorkflow = HandoffWorkflow(
            self,
            "Handoff",
            table=table,
            session_key={
                schema.PARTITION_KEY: tasks.DynamoAttributeValue.from_string(
                    sfn.JsonPath.format(f"{keys.SESSION_PREFIX}{{}}", sfn.JsonPath.string_at("$.session_id"))
                ),
                schema.SORT_KEY: tasks.DynamoAttributeValue.from_string(keys.META_SK),
            },
            functions=handoff_functions,
            customer_notification_queue=events.customer_notification_queue,
            agent_notification_topic=events.handoff_topic,
            # SQS event sources want the visibility timeout at >= 6x the consumer's timeout.
            assignment_queue_props=sqs.QueueProps(
                visibility_timeout=Duration.seconds(6 * config.lambda_timeout_seconds)
            ),
            agent_wait=Duration.seconds(config.handoff_agent_wait_seconds),
            manager_wait=Duration.seconds(config.handoff_manager_wait_seconds),
            idle_timeout=Duration.seconds(config.handoff_idle_seconds),
            options=options,
        )
        self.handoff_state_machine: sfn.StateMachine = self.handoff.state_machine
        consumer = function("AssignmentConsumer", "lambdas.orchestration.handoff.queue_consumer", topic_env)
        events.handoffs.grant_publish(consumer)
        consumer.add_event_source(
            sources.SqsEventSource(self.handoff.assignment_queue, batch_size=10, report_batch_item_failures=True)
        )

    def _session_cleanup(
        self,
        config: StageConfig,
        storage: StorageStack,
        events: EventsStack,
        function: _FunctionFactory,
        options: WorkflowOptions,
    ) -> None:
        """The cleanup workflow, its Lambdas and its two triggers (hourly, SessionEnded)."""
        table, key = storage.table, storage.key
        # -- session cleanup ------------------------------------------------------------------
        cleanup_env = {
            "ARCHIVE_BUCKET": storage.archive.bucket.bucket_name,
            "ARCHIVE_KEY_ARN": key.key_arn,
        }
        worker = function("CleanupWorker", "lambdas.orchestration.cleanup_worker.handler", cleanup_env)
        storage.archive.bucket.grant_read(worker, "sessions/*")
        storage.archive.bucket.grant_put(worker, "sessions/*")
        archive = storage.archive.bucket
        acknowledge_policy(
            worker.role,  # type: ignore[arg-type]
            {
                "Action::s3:GetBucket*": "HeadObject/GetObject of archives (CDK read grant); scoped to sessions/*.",
                "Action::s3:GetObject*": "Reads of this worker's own archive objects (sessions/*) to stay idempotent.",
                "Action::s3:List*": "Part of CDK's read grant; scoped to the archive bucket's sessions/ prefix.",
                "Action::s3:Abort*": "Aborting its own uploads (CDK put grant); scoped to sessions/*.",
                "Action::kms:GenerateDataKey*": "Data keys of the stage's one customer key, for the table's "
                "items and the SSE-KMS archive objects (CDK table and bucket grants).",
                "Action::kms:ReEncrypt*": "Part of CDK's encrypt grant on the stage's one customer key.",
                resource_finding(self, archive.bucket_arn, "/sessions/*", owner=archive): "One archive object "
                "per session under sessions/; the session id names it.",
            },
        )
        self.cleanup: CleanupWorkflow = CleanupWorkflow(
            self,
            "Cleanup",
            table=table,
            index_name=schema.CLEANUP.name,
            shard_attribute=schema.CLEANUP.partition_key,
            eligible_since_attribute=schema.CLEANUP.sort_key,
            plan=function("CleanupPlan", "lambdas.orchestration.cleanup_worker.plan", cleanup_env, table_access=False),
            worker=worker,
            tally=function("CleanupTally", "lambdas.orchestration.cleanup_worker.tally", table_access=False),
            options=options,
            max_concurrency=config.map_max_concurrency,
            page_size=CLEANUP_PAGE_SIZE,
        )
        self.cleanup_state_machine: sfn.StateMachine = self.cleanup.state_machine
        trigger_dlq = SecureQueue(self, "CleanupTriggerDeadLetterQueue", encryption_key=key, dead_letter_queue=False)
        self.cleanup_schedule = eventbridge.Rule(
            self,
            "CleanupSchedule",
            description="Hourly session cleanup: the safety net for every session waiting past its grace",
            schedule=eventbridge.Schedule.rate(Duration.hours(1)),
            targets=[self._cleanup_target(trigger_dlq, "schedule")],
        )
        scheduler_fn = self._session_schedules(config, storage, trigger_dlq)
        self.session_ended_rule = eventbridge.Rule(
            self,
            "SessionEndedRule",
            description="SessionEnded: a session was disconnected -> schedule its own cleanup at grace end",
            event_bus=events.bus,
            event_pattern=status_changed_pattern("disconnected"),
            targets=[
                targets.LambdaFunction(
                    scheduler_fn,
                    event=eventbridge.RuleTargetInput.from_event_path("$.detail"),
                    dead_letter_queue=trigger_dlq.queue,
                    retry_attempts=4,
                    max_event_age=Duration.hours(2),
                )
            ],
        )

    def _session_schedules(
        self, config: StageConfig, storage: StorageStack, trigger_dlq: SecureQueue
    ) -> lambda_.Function:
        """The function that gives each ended session a one-time cleanup schedule, and what it needs.

        Schedules live in their own group (so the function's grant names only them), start the
        cleanup state machine with the session through their own role, and send what they could
        not start to the trigger dead-letter queue.
        """
        self.cleanup_schedules = scheduler.ScheduleGroup(self, "CleanupSchedules")
        role = iam.Role(
            self,
            "CleanupSchedulerRole",
            assumed_by=iam.ServicePrincipal(
                "scheduler.amazonaws.com", conditions={"StringEquals": {"aws:SourceAccount": self.account}}
            ),
            description="EventBridge Scheduler: starts one session's cleanup when its grace period ends",
        )
        self.cleanup.grant_start_execution(role)
        trigger_dlq.queue.grant_send_messages(role)
        scheduler_fn = stage_function(
            self,
            "CleanupScheduler",
            config,
            handler="lambdas.orchestration.cleanup_worker.schedule",
            environment={
                "TABLE_NAME": storage.table.table_name,
                "CLEANUP_SCHEDULE_GROUP": self.cleanup_schedules.schedule_group_name,
                "CLEANUP_STATE_MACHINE_ARN": self.cleanup.state_machine.state_machine_arn,
                "CLEANUP_SCHEDULER_ROLE_ARN": role.role_arn,
                "CLEANUP_DEAD_LETTER_QUEUE_ARN": trigger_dlq.queue.queue_arn,
            },
            log_encryption_key=storage.key,
            on_failure=trigger_dlq.queue,
        )
        fn = scheduler_fn.function
        storage.sessions.grant_read_data(fn)
        self.cleanup_schedules.grant_write_schedules(fn)
        role.grant_pass_role(fn.grant_principal)
        kms_findings = {
            "Action::kms:GenerateDataKey*": "Data keys of the stage's one customer key, which encrypts the "
            "trigger dead-letter queue (CDK's send grant).",
            "Action::kms:ReEncrypt*": "Part of CDK's send grant on the queue's one customer key.",
        }
        acknowledge_policy(role, kms_findings)
        group = Stack.of(self).resolve(self.cleanup_schedules.schedule_group_name)
        acknowledge_policy(
            fn.role,  # type: ignore[arg-type]
            {
                **kms_findings,
                f"Resource::arn:<AWS::Partition>:scheduler:<AWS::Region>:<AWS::AccountId>:schedule/{group}/*": (
                    "The one-time schedules of ended sessions, named at run time, in this group only."
                ),
            },
        )
        return fn

    def _data_export(
        self,
        config: StageConfig,
        storage: StorageStack,
        events: EventsStack,
        function: _FunctionFactory,
        options: WorkflowOptions,
    ) -> None:
        """The export workflow behind the human approval gate."""
        table, key = storage.table, storage.key
        table_findings = {
            "Action::kms:GenerateDataKey*": "Data keys of the sessions table's customer key (table grant); one key.",
            "Action::kms:ReEncrypt*": "Part of the table grant's encrypt/decrypt on its one customer key.",
            resource_finding(self, table.table_arn, "/index/*", owner=table): "Queries of the sessions table's "
            "own indexes (available agents, cleanup); CDK's table grant names them with /index/*.",
        }
        retention = options.log_retention
        # -- data export behind the approval gate ---------------------------------------------
        self.approval_gate = HumanApprovalGate(
            self,
            "ExportApproval",
            table=table,
            key_prefix=keys.REVIEW_PREFIX,
            sort_key_value=keys.META_SK,
            link_base_url=ssm.StringParameter.from_string_parameter_name(
                self, "RestApiUrl", rest_api_url_parameter(config.name)
            ),
            reviewer_email=config.reviewer_email,
            # The gate's own key: its secret's grants write key-policy statements naming roles of
            # this stack, which on the Storage key would make Storage depend on Orchestration.
            review_ttl_days=config.review_ttl_days,
            subject="MangaAssist data export: approval needed",
            requested_by="$.requested_by",
            details="$.reason",
            log_retention=retention,
            log_encryption_key=key,
        )
        self.export: ExportWorkflow = ExportWorkflow(
            self,
            "Export",
            table=table,
            bucket=storage.archive.bucket,
            options=options.with_timeout(
                Duration.seconds(
                    config.review_ttl_days * 86400 + config.export_poll_seconds * config.export_max_polls + 3600
                )
            ),
            approval=self.approval_gate,
            poll_interval=Duration.seconds(config.export_poll_seconds),
            max_polls=config.export_max_polls,
        )
        self.approval_gate.bind(self.export.state_machine)
        self.export.workflow.acknowledge_invokes([self.approval_gate.request_function.function])
        acknowledge_policy(self.approval_gate.request_function.role, table_findings)
        self.export_state_machine: sfn.StateMachine = self.export.state_machine
        self._export_notices(config, events, function, key, table_findings)

    def _export_notices(
        self,
        config: StageConfig,
        events: EventsStack,
        function: Callable[..., lambda_.Function],
        topic_key: kms.IKey,
        table_findings: dict[str, str],
    ) -> None:
        """The requester hears of a completed or rejected export: the topic's queue and its notifier.

        The queue needs a key of this stack: SNS's delivery statement on a queue key names the
        topic, and on a Storage or Events key that would make those stacks depend on this one.
        """
        self.notices_key = EncryptionKey(
            self,
            "NoticesKey",
            description=f"MangaAssist {config.name}: the export-notification queue and its DLQ",
            service_principals=["sns"],
            removal_policy=config.resource_removal_policy,
            pending_window=config.key_pending_window,
        )
        notices = FanoutTopic(
            self,
            "ExportNotices",
            encryption_key=topic_key,
            queue_encryption_key=self.notices_key.key,
            existing_topic=self.export.topic,
        )
        self.export_notifier = function(
            "ExportNotifier", "lambdas.orchestration.export_notifier.handler", events.notice_mail.environment
        )
        events.notice_mail.grant_send(self.export_notifier)
        notices.add_queue_subscriber("ExportNotificationQueue", consumer=self.export_notifier)
        acknowledge_policy(self.export_notifier.role, table_findings)  # type: ignore[arg-type]

    def _cleanup_target(self, dlq: SecureQueue, trigger: str) -> targets.SfnStateMachine:
        return targets.SfnStateMachine(
            self.cleanup.state_machine,
            input=eventbridge.RuleTargetInput.from_object({"trigger": trigger}),
            dead_letter_queue=dlq.queue,
            retry_attempts=4,
            max_event_age=Duration.hours(2),
        )

    def grant_agent_routes(self, grantee: iam.IGrantable) -> None:
        """What ``lambdas/api/agent.py`` needs from this stack: complete the handoff's callback tokens."""
        self.handoff.grant_task_response(grantee)
