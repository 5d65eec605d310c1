"""OrchestrationStack: the Step Functions workflows (handoff, cleanup, export) and their triggers."""

from __future__ import annotations

from aws_cdk import Duration, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_ssm as ssm
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from constructs_lib import ServiceAlarms
from constructs_lib.approval_gate import HumanApprovalGate
from constructs_lib.nag_findings import acknowledge_grant, resource_finding
from constructs_lib.workflow_defaults import WorkflowOptions
from contracts import keys, schema
from stacks.config import StageConfig
from stacks.events_stack import EventsStack, status_changed_pattern
from stacks.functions import StageFunctions, log_retention
from stacks.operations import watch_stack
from stacks.storage_stack import StorageStack
from stacks.triggers import CleanupTriggers, ExportNotices
from stacks.workflows import CleanupWorkflow, ExportWorkflow, HandoffFunctions, HandoffWorkflow, app_workflow_options
from stacks.workflows.erasure import ErasureWorkflow
from stacks.workflows.export import RiskGate

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

    Exposes ``handoff_state_machine``, ``cleanup_state_machine``, ``export_state_machine``,
    ``erasure_state_machine``
    (start them with the execution name as idempotency key), ``handoff`` (its
    ``grant_task_response`` is what the agent routes need), ``approval_gate`` (whose
    ``add_review_routes`` mounts the review links on the REST API), and :meth:`grant_agent_routes`.

    Execution inputs: handoff ``{"session_id", "reason", "priority", "requested_by"}``; cleanup
    ``{}`` or ``{"older_than_seconds"}`` (admin) or ``{"now"}`` (tests); export
    ``{"requested_by", "reason", "role", "requested_by_email"}`` (role and e-mail weigh in its risk score);
    erasure ``{"customer_id", "record": {"PK", "SK"}}`` (the customer data API starts it).
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
        self.storage = storage
        # Every function's log group is encrypted with the Storage key, as every function's of the stage.
        self.functions = StageFunctions(config, log_encryption_key=storage.key)
        options = app_workflow_options(config, storage.key, log_retention(config.log_retention_days))
        self._human_handoff(events, options)
        self._session_cleanup(events, options)
        self._data_export(events, options)
        self._customer_erasure(options)
        self.alarms: ServiceAlarms = watch_stack(
            self, topic=storage.ops_topic, prefix=f"MangaAssist-{config.name}-Orchestration"
        )

    def _function(
        self, construct_id: str, handler: str, environment: dict[str, str] | None = None, *, table_access: bool = True
    ) -> lambda_.Function:
        """A function of the workflows: it names the sessions table, and reads and writes it unless told not."""
        fn = self.functions(
            self, construct_id, handler, {"TABLE_NAME": self.storage.table.table_name, **(environment or {})}
        ).function
        if table_access:
            self.storage.sessions.grant_read_write_data(fn)
        return fn

    def _human_handoff(self, events: EventsStack, options: WorkflowOptions) -> None:
        """The handoff workflow, its seven Lambdas and the consumer of its assignment queue."""
        topic_env = {"HANDOFF_TOPIC_ARN": events.handoff_topic.topic_arn}
        function = self._function
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
            table=self.storage.table,
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
                visibility_timeout=Duration.seconds(6 * self.config.lambda_timeout_seconds)
            ),
            agent_wait=Duration.seconds(self.config.handoff_agent_wait_seconds),
            manager_wait=Duration.seconds(self.config.handoff_manager_wait_seconds),
            idle_timeout=Duration.seconds(self.config.handoff_idle_seconds),
            reply_idle_timeout=Duration.seconds(self.config.handoff_reply_idle_seconds),
            options=options,
        )
        self.handoff_state_machine: sfn.StateMachine = self.handoff.state_machine
        # WatchAgent's function ends its own wait ({"closed": true}) when the handoff closed before
        # the wait began. A policy apart from the role's default one: the function does not depend
        # on it, so the state machine (which invokes the function) and this grant on it form no cycle.
        await_reply = handoff_functions.await_reply
        if await_reply.role is not None:
            iam.Policy(
                self,
                "AwaitAgentReplyEndsItsWait",
                roles=[await_reply.role],
                statements=[
                    iam.PolicyStatement(
                        actions=["states:SendTaskSuccess"], resources=[self.handoff_state_machine.state_machine_arn]
                    )
                ],
            )
        consumer = function("AssignmentConsumer", "lambdas.orchestration.handoff.queue_consumer", topic_env)
        events.handoffs.grant_publish(consumer)
        consumer.add_event_source(
            sources.SqsEventSource(self.handoff.assignment_queue, batch_size=10, report_batch_item_failures=True)
        )

    def _session_cleanup(self, events: EventsStack, options: WorkflowOptions) -> None:
        """The cleanup workflow, its Lambdas and its triggers (hourly, SessionEnded)."""
        storage, config = self.storage, self.config
        cleanup_env = {"ARCHIVE_BUCKET": storage.archive.bucket.bucket_name, "ARCHIVE_KEY_ARN": storage.key.key_arn}
        worker = self._function("CleanupWorker", "lambdas.orchestration.cleanup_worker.handler", cleanup_env)
        archives = f"{config.archive_prefix}/*"
        storage.archive.grant_read(worker, archives)
        storage.archive.grant_put(worker, archives)
        plan = self._function(
            "CleanupPlan", "lambdas.orchestration.cleanup_worker.plan", cleanup_env, table_access=False
        )
        tally = self._function("CleanupTally", "lambdas.orchestration.cleanup_worker.tally", table_access=False)
        self.cleanup: CleanupWorkflow = CleanupWorkflow(
            self,
            "Cleanup",
            table=storage.table,
            index_name=schema.CLEANUP.name,
            shard_attribute=schema.CLEANUP.partition_key,
            eligible_since_attribute=schema.CLEANUP.sort_key,
            plan=plan,
            worker=worker,
            tally=tally,
            options=options,
            max_concurrency=config.map_max_concurrency,
            page_size=CLEANUP_PAGE_SIZE,
        )
        self.cleanup_state_machine: sfn.StateMachine = self.cleanup.state_machine
        self.cleanup_triggers = CleanupTriggers(
            self,
            "CleanupTriggers",
            cleanup=self.cleanup,
            sessions=storage.sessions,
            bus=events.bus,
            session_ended=status_changed_pattern("disconnected"),
            encryption_key=storage.key,
            functions=self.functions,
        )

    def _data_export(self, events: EventsStack, options: WorkflowOptions) -> None:
        """The export workflow behind the human approval gate, and the notices to its requester."""
        storage, config = self.storage, self.config
        self.approval_gate = HumanApprovalGate(
            self,
            "ExportApproval",
            existing_table=storage.table,
            key_prefix=keys.REVIEW_PREFIX,
            sort_key_value=keys.META_SK,
            link_base_url=ssm.StringParameter.from_string_parameter_name(
                self, "RestApiUrl", rest_api_url_parameter(config.name)
            ),
            reviewer_email=config.reviewer_email,
            review_ttl_days=config.review_ttl_days,
            subject="MangaAssist data export: approval needed",
            requested_by="$.requested_by",
            details="$.reason",
            log_retention=options.log_retention,
            log_encryption_key=storage.key,
        )
        # Scores the request from facts the workflow reads itself; it touches no resource.
        assess = self._function("AssessExportRisk", "lambdas.orchestration.export_risk.handler", table_access=False)
        self.export: ExportWorkflow = ExportWorkflow(
            self,
            "Export",
            table=storage.table,
            bucket=storage.archive.bucket,
            options=options.with_timeout(
                Duration.seconds(
                    config.review_ttl_days * 86400 + config.export_poll_seconds * config.export_max_polls + 3600
                )
            ),
            approval=self.approval_gate,
            risk=RiskGate(
                assess=assess,
                min_score=config.export_review_min_score,
                customer_index=schema.CUSTOMER_SESSIONS.name,
                record_days=config.review_ttl_days,
            ),
            poll_interval=Duration.seconds(config.export_poll_seconds),
            max_polls=config.export_max_polls,
        )
        self.approval_gate.bind(self.export.state_machine)
        self.export.workflow.acknowledge_invokes([self.approval_gate.request_function.function, assess])
        self.export_state_machine: sfn.StateMachine = self.export.state_machine
        self.export_notices = ExportNotices(
            self,
            "ExportNotices",
            topic=self.export.topic,
            topic_key=storage.key,
            sessions=storage.sessions,
            mail=events.notice_mail,
            config=config,
            functions=self.functions,
        )

    def _customer_erasure(self, options: WorkflowOptions) -> None:
        """The erasure workflow and its three Lambdas, each granted exactly the calls it makes."""
        storage, config = self.storage, self.config
        bucket = storage.archive
        export_prefix = self.export.prefix
        objects = self._function(
            "EraseObjects",
            "lambdas.orchestration.erasure.objects",
            {"ARCHIVE_BUCKET": bucket.bucket.bucket_name, "EXPORT_PREFIX": export_prefix},
            table_access=False,
        )
        storage.sessions.grant_index_query(objects, schema.CUSTOMER_SESSIONS.name)
        bucket.grant_read_write(objects, f"{export_prefix}/*")
        # Every version and delete marker of the customer's archive objects and of a rewritten export file.
        for pattern in (f"{config.archive_prefix}/*", f"{export_prefix}/*"):
            iam.Grant.add_to_principal(
                grantee=objects,
                actions=["s3:DeleteObjectVersion"],
                resource_arns=[bucket.bucket.arn_for_objects(pattern)],
            )
        iam.Grant.add_to_principal(
            grantee=objects, actions=["s3:ListBucketVersions"], resource_arns=[bucket.bucket.bucket_arn]
        )
        archives = resource_finding(
            objects, bucket.bucket.bucket_arn, f"/{config.archive_prefix}/*", owner=bucket.bucket
        )
        acknowledge_grant(
            objects,
            {
                archives: "Versions of archive objects, whose names are session ids found at run time; "
                "the archive prefix only, never the audit bucket."
            },
        )
        items = self._function(
            "EraseItems",
            "lambdas.orchestration.erasure.table",
            {"HANDOFF_STATE_MACHINE_ARN": self.handoff_state_machine.state_machine_arn},
        )
        # The one Scan of the app: what names the customer outside their sessions has no index.
        iam.Grant.add_to_principal(grantee=items, actions=["dynamodb:Scan"], resource_arns=[storage.table.table_arn])
        # A waiting handoff of the customer ends with its wait failed, as when they delete the session.
        self.handoff.grant_task_failure(items)
        users = storage.users
        user_env = {"USER_POOL_ID": users.user_pool.user_pool_id} if users is not None else {}
        user = self._function("DeleteCustomerUser", "lambdas.orchestration.erasure.user", user_env, table_access=False)
        if users is not None:
            users.user_pool.grant(user, "cognito-idp:AdminDeleteUser")
        self.erasure: ErasureWorkflow = ErasureWorkflow(
            self, "Erasure", table=storage.table, objects=objects, items=items, user=user, options=options
        )
        self.erasure_state_machine: sfn.StateMachine = self.erasure.state_machine

    def grant_agent_routes(self, grantee: iam.IGrantable) -> iam.Grant:
        """What ``lambdas/api/agent.py`` needs from this stack: complete the handoff's callback tokens."""
        return self.handoff.grant_task_response(grantee)
