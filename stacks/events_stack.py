"""EventsStack: the table stream's consumers (router, bus, fan-out, analytics, audit, summaries), the trail's tables."""

from __future__ import annotations

from typing import Any

from aws_cdk import Duration, Size, Stack
from aws_cdk import aws_events as events
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from constructs_lib import (
    EncryptionKey,
    FanoutTopic,
    S3DeliveryStream,
    SecureEventBus,
    SecureQueue,
    ServiceAlarms,
    StreamConsumer,
    subscribe_email,
)
from contracts import keys, messages
from stacks.analytics_search import AnalyticsSearch, compose_analytics_search
from stacks.config import StageConfig
from stacks.functions import StageFunctions, grant_stage_models, log_retention
from stacks.guardrail import grant_guardrail, guardrail_environment
from stacks.mail import NoticeMail
from stacks.operations import watch_stack
from stacks.pseudonyms import PseudonymKey
from stacks.storage_stack import StorageStack, stage_prefix
from stacks.trail import SessionTrail
from stacks.triggers import AuditLocker, HandoffMetrics

#: Key prefixes of the audit trail's delivery stream in the Object Lock bucket.
AUDIT_PREFIX = "audit/"
AUDIT_ERROR_PREFIX = "audit-errors/"
#: Key prefixes of the analytics delivery stream in the analytics bucket.
ANALYTICS_PREFIX = "sessions/"
ANALYTICS_ERROR_PREFIX = "errors/"


#: Stream records that reach the router: the records of the architecture page (every entity's
#: META, turns, summaries, handoffs). Left out: derived rows (agent SKILL# index rows, agent
#: INBOX# rows written by the dashboard updater), whose changes mirror a META or HANDOFF change
#: that is already routed, audited and counted; filtering them in the mapping saves invocations.
ROUTED_SORT_KEYS: list[Any] = [
    keys.META_SK,
    {"prefix": keys.TURN_PREFIX},
    {"prefix": keys.SUMMARY_PREFIX},
    {"prefix": keys.HANDOFF_PREFIX},
]

#: Handoff topic -> queue filters, by message attribute, in the one vocabulary of ``messages``.
# Agents see every message addressed to an agent, plus the broadcast that a customer is waiting
# for any agent (published before an agent is known, so it has no agent_id).
AGENT_DASHBOARD_FILTER: list[dict[str, Any]] = [
    {messages.ATTR_AGENT_ID: [{"exists": True}]},
    {messages.ATTR_EVENT_TYPE: list(messages.AGENT_BROADCAST_EVENTS)},
]
# The router's handoff changes the customer is told of and the workflow does not tell (escalated,
# completed); never the agent-only messages (handoff_assigned, handoff_context with the
# transcript, handoff_waiting). The workflow sends "started" and "failed" to the queue itself.
CUSTOMER_NOTIFICATION_FILTER = {
    messages.ATTR_EVENT_TYPE: sns.SubscriptionFilter.string_filter(allowlist=list(messages.CUSTOMER_EVENTS))
}
ESCALATION_FILTER = {
    messages.ATTR_EVENT_TYPE: sns.SubscriptionFilter.string_filter(allowlist=[messages.EVENT_ESCALATED])
}


def status_changed_pattern(new_status: str) -> events.EventPattern:
    """Events of the bus where a session moved to ``new_status`` (the seed's rules; shared)."""
    return events.EventPattern(
        source=[messages.EVENT_SOURCE],
        detail_type=[messages.STATUS_CHANGED],
        detail={"new_status": [new_status]},
    )


class EventsStack(Stack):
    """Everything the table stream drives. Receives the storage it reads from.

    Exposes ``bus`` (source ``mangaassist.sessions``, detail-type ``SessionStatusChanged``; the
    Orchestration stack adds the SessionEnded rule with ``status_changed_pattern("disconnected")``),
    ``handoff_topic``, ``customer_notification_queue`` (its consumer is deployed in ApiStack with
    a timeout of at most ``customer_notifier_timeout``), ``managers_topic`` and the functions.
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, config: StageConfig, storage: StorageStack, **kwargs: object
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)  # type: ignore[arg-type]
        self.config = config
        self.storage = storage
        # Every function's log group is encrypted with the Storage key, as every function's of the stage.
        self.functions = StageFunctions(config, log_encryption_key=storage.key)
        self._build_keys()
        self.notice_mail = NoticeMail(self, "NoticeMail", config=config)
        self._build_bus()
        self._build_fanout()
        self._build_delivery_streams()
        self.audit_lock = AuditLocker(
            self, "AuditLock", audit=storage.audit, encryption_key=self.queues_key.key, functions=self.functions
        )
        self.trail = SessionTrail(
            self,
            "Trail",
            config=config,
            audit_bucket=storage.audit.bucket,
            audit_prefix=AUDIT_PREFIX,
            analytics_bucket=storage.analytics.bucket,
            analytics_prefix=ANALYTICS_PREFIX,
            results_bucket=storage.query_results.bucket,
            encryption_key=storage.key,
        )
        self._build_summaries()
        self.pseudonyms = PseudonymKey(
            self, "Pseudonyms", encryption_key=storage.key, removal_policy=config.resource_removal_policy
        )
        self._build_router()
        # The same analytics records, searchable in OpenSearch Serverless, where the stage turns it on.
        self.analytics_search: AnalyticsSearch | None = compose_analytics_search(
            self,
            config,
            storage=storage,
            stream_encryption_key=self.events_key.key,
            producer=self.router_function.function,
        )
        self.alarms: ServiceAlarms = watch_stack(
            self, topic=storage.ops_topic, prefix=f"MangaAssist-{config.name}-Events"
        )
        self.handoff_metrics.add_alarms(self.alarms)

    def _build_keys(self) -> None:
        """This stack's own keys.

        Services attach key-policy statements naming our resources (the bus; SNS -> SQS names the
        topic), so the Storage key, which must not reference this stack, cannot serve; and queues
        need a key other than the topics' (see FanoutTopic).
        """
        config = self.config
        removal = config.resource_removal_policy
        window = config.key_pending_window
        self.events_key = EncryptionKey(
            self,
            "EventsKey",
            description=f"MangaAssist {config.name}: event bus, topics, delivery stream buffer",
            service_principals=["sns", "events", "firehose"],
            removal_policy=removal,
            pending_window=window,
            source_prefix=stage_prefix(config),
        )
        self.queues_key = EncryptionKey(
            self,
            "QueuesKey",
            description=f"MangaAssist {config.name}: SQS queues and dead-letter queues",
            service_principals=["sns", "events"],
            removal_policy=removal,
            pending_window=window,
            source_prefix=stage_prefix(config),
        )

    def _build_bus(self) -> None:
        """The event bus and its metric rules: sessions started; handoffs and the sessions gauge (HandoffMetrics)."""
        queue_key = self.queues_key.key
        self.event_bus = SecureEventBus(
            self,
            "SessionEvents",
            encryption_key=self.events_key.key,
            dead_letter_queue_props=sqs.QueueProps(encryption_master_key=queue_key),
            event_bus_name=f"MangaAssist-{self.config.name}-sessions",
            archive_retention=Duration.days(self.config.event_archive_retention_days),
        )
        self.bus: events.IEventBus = self.event_bus.event_bus
        self.metrics_function = self.functions(
            self,
            "SessionMetrics",
            "lambdas.events.metrics.handler",
            {},
            on_failure=self.event_bus.dead_letter_queue,
            retry_attempts=2,
        )
        self.event_bus.route_to_function(
            "SessionStartedRule",
            event_pattern=status_changed_pattern("active"),
            function=self.metrics_function.function,
            description="SessionStarted: a session became active -> sessions-started metric",
        )
        self.handoff_metrics = HandoffMetrics(
            self,
            "HandoffMetrics",
            config=self.config,
            bus=self.event_bus,
            sessions=self.storage.sessions,
            functions=self.functions,
        )
        # The seed's SessionHandoff rule feeds the handoff metrics (above, from the handoff's own
        # events); it has no agent queue target: agents already learn of a waiting customer exactly
        # once. The handoff workflow's queue step publishes handoff_waiting to the handoff topic, whose
        # dashboard queue puts one conditional item per handoff into the shared waiting inbox
        # every agent's console reads. A bus rule into a queue beside it had no reader.

    def _build_fanout(self) -> None:
        """The handoff topic's queues (agent dashboard, customer notification, escalation), the managers' topic."""
        key, queue_key, storage = self.events_key.key, self.queues_key.key, self.storage
        self.handoffs = FanoutTopic(self, "HandoffTopic", encryption_key=key, queue_encryption_key=queue_key)
        self.handoff_topic: sns.ITopic = self.handoffs.topic
        self.managers = FanoutTopic(self, "ManagersTopic", encryption_key=key, queue_encryption_key=queue_key)
        self.managers_topic: sns.ITopic = self.managers.topic
        # What SNS cannot mail to the managers waits in a queue (watch_stack alarms on its depth).
        self.managers_email_dead_letters: SecureQueue | None = (
            subscribe_email(
                self,
                "ManagersEmailDeadLetterQueue",
                topic=self.managers_topic,
                address=self.config.managers_email,
                encryption_key=queue_key,
            )
            if self.config.managers_email is not None
            else None
        )
        table_env = {"TABLE_NAME": storage.table.table_name}

        self.dashboard_function = self.functions(
            self, "AgentDashboardUpdater", "lambdas.events.dashboard.handler", table_env
        )
        # Reads the handoff record an inbox item is for: its priority and age place the item in the queue.
        storage.sessions.grant_read_write_data(self.dashboard_function.function)
        self.handoffs.add_queue_subscriber(
            "AgentDashboardQueue", any_of=AGENT_DASHBOARD_FILTER, consumer=self.dashboard_function.function
        )

        timeout = Duration.seconds(self.config.lambda_timeout_seconds)
        self.customer_notifier_timeout = timeout
        customer = self.handoffs.add_queue_subscriber(
            "CustomerNotificationQueue",
            filter_policy=CUSTOMER_NOTIFICATION_FILTER,
            raw_message_delivery=True,
            consumer_timeout=timeout,
        )
        self.customer_notification_queue: sqs.IQueue = customer.queue

        self.escalation_function = self.functions(
            self,
            "EscalationManager",
            "lambdas.events.escalation.handler",
            {**table_env, "MANAGERS_TOPIC_ARN": self.managers.topic_arn},
        )
        storage.sessions.grant_read_write_data(self.escalation_function.function)
        self.managers.grant_publish(self.escalation_function.function)
        self.handoffs.add_queue_subscriber(
            "EscalationQueue", filter_policy=ESCALATION_FILTER, consumer=self.escalation_function.function
        )

    def _build_delivery_streams(self) -> None:
        """Analytics and audit: one delivery stream each."""
        config, storage = self.config, self.storage

        def delivery_stream(construct_id: str, bucket: s3.IBucket, prefix: str, error_prefix: str) -> S3DeliveryStream:
            return S3DeliveryStream(
                self,
                construct_id,
                bucket=bucket,
                encryption_key=storage.key,
                stream_encryption_key=self.events_key.key,
                prefix=prefix,
                error_prefix=error_prefix,
                buffering_interval=Duration.seconds(config.firehose_buffer_seconds),
                buffering_size=Size.mebibytes(config.firehose_buffer_mb),
                log_retention=log_retention(config.log_retention_days),
                log_encryption_key=storage.key,
            )

        self.analytics = delivery_stream(
            "AnalyticsDeliveryStream", storage.analytics.bucket, ANALYTICS_PREFIX, ANALYTICS_ERROR_PREFIX
        )
        # The audit trail's own stream: every change, into the Object Lock bucket. Separate from
        # analytics so that a slow or failing analytics destination never holds up the audit, and
        # so that the locked bucket receives nothing but audit records.
        self.audit = delivery_stream("AuditDeliveryStream", storage.audit.bucket, AUDIT_PREFIX, AUDIT_ERROR_PREFIX)

    def _build_summaries(self) -> None:
        """The summary generator, invoked asynchronously by the router, and its failure queue."""
        config = self.config
        self.summary_dead_letter_queue = SecureQueue(
            self, "SummaryDeadLetterQueue", encryption_key=self.queues_key.key, dead_letter_queue=False
        ).queue
        self.summary_function = self.functions(
            self,
            "SummaryGenerator",
            "lambdas.events.summary.handler",
            {"TABLE_NAME": self.storage.table.table_name, **guardrail_environment(self.storage.guardrail)},
            timeout=Duration.seconds(max(config.lambda_timeout_seconds, 90)),
            on_failure=self.summary_dead_letter_queue,
            retry_attempts=2,
        )
        self.storage.sessions.grant_read_write_data(self.summary_function.function)
        # A summary is screened by the same guardrail as the replies: it is written from the same turns.
        summarizer = self.summary_function.function
        grant_stage_models(summarizer, config, guardrail_id=config.bedrock_guardrail_id)
        grant_guardrail(summarizer, self.storage.guardrail)

    def _build_router(self) -> None:
        """The stream router and its event source mapping on the table's stream."""
        config = self.config
        self.router_function = self.functions(
            self,
            "StreamRouter",
            "lambdas.events.router.handler",
            {
                "EVENT_BUS_NAME": self.event_bus.event_bus_name,
                "HANDOFF_TOPIC_ARN": self.handoffs.topic_arn,
                "ANALYTICS_STREAM_NAME": self.analytics.delivery_stream_name,
                "AUDIT_STREAM_NAME": self.audit.delivery_stream_name,
                "SUMMARY_FUNCTION_NAME": self.summary_function.function_name,
                **self.pseudonyms.environment,
            },
            timeout=Duration.seconds(max(config.lambda_timeout_seconds, 60)),
        )
        router = self.router_function.function
        self.pseudonyms.grant_read(router)
        self.event_bus.grant_put_events_to(router)
        self.handoffs.grant_publish(router)
        self.analytics.grant_put_records(router)
        self.audit.grant_put_records(router)
        self.summary_function.grant_invoke(router)
        limits = config.capacity.limits
        self.stream_source = StreamConsumer(
            self,
            "StreamRouterSource",
            function=router,
            table=self.storage.table,
            encryption_key=self.queues_key.key,
            # TRIM_HORIZON: a new or re-created mapping starts at the oldest record still in the
            # stream, so no change made before the mapping existed escapes the audit trail; the
            # router is idempotent, so reading a record twice changes nothing.
            starting_position=lambda_.StartingPosition.TRIM_HORIZON,
            # Batch size, window and batches per shard at once keep up with the stage's target (stacks/capacity.py);
            # with more than one batch per shard at once, Lambda still keeps each item key's records in order.
            batch_size=limits.stream_batch_size,
            max_batching_window=Duration.seconds(limits.stream_batching_window_seconds),
            parallelization_factor=limits.stream_parallelization_factor,
            retry_attempts=config.stream_max_retries,
            max_record_age=Duration.seconds(config.stream_max_record_age_seconds),
            filters=[{"dynamodb": {"Keys": {"SK": {"S": ROUTED_SORT_KEYS}}}}],
        )
        self.stream_dead_letter_queue: sqs.IQueue = self.stream_source.dead_letter_queue
