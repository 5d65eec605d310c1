"""The requester hears of a completed or rejected export: the export topic's queue and its notifier."""

from __future__ import annotations

from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from constructs import Construct

from constructs_lib import EncryptionKey, FanoutTopic, SingleTable
from stacks.config import StageConfig
from stacks.functions import StageFunctions
from stacks.mail import NoticeMail


class ExportNotices(Construct):
    """A queue on the export workflow's topic, read by the notifier that tells the requester.

    Example::

        ExportNotices(self, "ExportNotices", topic=export.topic, topic_key=key, sessions=storage.sessions,
                      mail=events.notice_mail, config=config, functions=functions)

    The queue needs a key of this construct's stack (``QueueKey``): SNS's delivery statement on a
    queue key names the topic, and on a key of a stack the topic's stack depends on, that would
    make the dependency circular. ``ExportNotifier`` reads the queue, the session table, and mails
    through the stage's notice mail.

    Args:
        topic: the export workflow's notification topic; ``topic_key`` is its customer key.
        sessions: the table the notifier reads.
        mail: the stage's notice mail (its environment and send grant).
        config: the stage (removal policy and pending window of the queue key).
        functions: the app's function factory.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        topic: sns.ITopic,
        topic_key: kms.IKey,
        sessions: SingleTable,
        mail: NoticeMail,
        config: StageConfig,
        functions: StageFunctions,
    ) -> None:
        super().__init__(scope, construct_id)
        self.queue_key: EncryptionKey = EncryptionKey(
            self,
            "QueueKey",
            description=f"MangaAssist {config.name}: the export-notification queue and its DLQ",
            service_principals=["sns"],
            removal_policy=config.resource_removal_policy,
            pending_window=config.key_pending_window,
        )
        self.topic = FanoutTopic(
            self, "Topic", encryption_key=topic_key, queue_encryption_key=self.queue_key.key, existing_topic=topic
        )
        self.notifier: lambda_.Function = functions(
            self,
            "ExportNotifier",
            "lambdas.orchestration.export_notifier.handler",
            {"TABLE_NAME": sessions.table.table_name, **mail.environment},
        ).function
        sessions.grant_read_write_data(self.notifier)
        mail.grant_send(self.notifier)
        self.topic.add_queue_subscriber("Queue", consumer=self.notifier)
