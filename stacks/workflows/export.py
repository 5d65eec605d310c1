"""Data export workflow: (approval) -> DynamoDB native export to S3 -> poll -> notify the requester.

Example::

    export = ExportWorkflow(self, "Export", table=table, bucket=archive_bucket, encryption_key=key,
                            approval=gate.fragment,            # optional human approval gate
                            poll_interval=Duration.minutes(1), max_polls=120)
    export.grant_start_execution(admin_api_role)

States (execution input ``{"requested_by": str, ...}``; the execution name names the export)::

    [approval fragment: its end states continue here; a rejection ends inside the fragment]
    -> StartExport (ExportTableToPointInTime, direct SDK integration, SSE-KMS, into <prefix>/<execution name>/)
    -> WaitForExport (Wait) -> DescribeExport (direct SDK integration) -> CountPoll -> ExportFinished?
         COMPLETED -> NotifyRequester (SNS: the S3 location) -> ExportComplete
         FAILED    -> ExportFailed (Fail, cause = the export description with its failure reason)
         polls >= max_polls -> ExportTimedOut (Fail)
    rejected by the gate -> NotifyRejected (SNS) -> ExportRejected (Fail)
         otherwise -> WaitForExport
    a Task error -> ExportErrored (Fail)

The table needs point-in-time recovery (DynamoDB exports from it). The requester's notification
carries a ``requested_by`` message attribute, so subscriptions can filter per requester.
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from constructs_lib.nag_findings import acknowledge_policy, resource_finding
from constructs_lib.workflow_defaults import RetryPolicy, WorkflowStateMachine


class ExportWorkflow(Construct):
    """The export state machine and the requester-notification topic (see the module docstring).

    Args:
        table: the table to export (with point-in-time recovery on).
        bucket: destination bucket.
        encryption_key: KMS key the export objects are written with (SSE-KMS); also encrypts the
            new topic and the execution log group.
        prefix: key prefix of exports in ``bucket``; each export goes under
            ``<prefix>/<execution name>/``. Defaults to ``exports``.
        approval: a chainable approval gate placed before the export; its end states continue to
            StartExport. A gate with ``on_rejected(next)`` (e.g. ``HumanApprovalGate``) gets this
            workflow's rejection path (NotifyRejected -> ExportRejected); any other gate must end
            rejections itself. Defaults to none: no gate.
        existing_topic: topic for the requester notification. Defaults to a new KMS-encrypted,
            SSL-only topic.
        topic_props: properties of the new topic (not with ``existing_topic``).
        poll_interval: wait between DescribeExport calls. Defaults to 1 minute.
        max_polls: DescribeExport calls before giving up (ExportTimedOut), 1..1000. Defaults to 120.
        timeout: overall execution timeout. Defaults to poll_interval x max_polls + 1 hour
            (room for the approval).
        retry / log_retention / include_execution_data / removal_policy: as in
            :class:`WorkflowStateMachine` and :class:`RetryPolicy`.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        table: dynamodb.ITable,
        bucket: s3.IBucket,
        encryption_key: kms.IKey,
        prefix: str = "exports",
        approval: sfn.IChainable | None = None,
        existing_topic: sns.ITopic | None = None,
        topic_props: Mapping[str, object] | None = None,
        poll_interval: Duration | None = None,
        max_polls: int = 120,
        timeout: Duration | None = None,
        retry: RetryPolicy | None = None,
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_WEEK,
        include_execution_data: bool = False,
        removal_policy: RemovalPolicy = RemovalPolicy.DESTROY,
    ) -> None:
        super().__init__(scope, construct_id)
        if existing_topic is not None and topic_props is not None:
            raise ValueError("give existing_topic or topic_props, not both (topic_props shapes a new topic)")
        if not 1 <= max_polls <= 1000:
            raise ValueError(f"max_polls must be 1..1000 (given {max_polls})")
        if not prefix or prefix.startswith("/") or prefix.endswith("/"):
            raise ValueError(
                f"prefix must be a key prefix without leading/trailing '/' such as 'exports' (given {prefix!r})"
            )
        poll_interval = poll_interval or Duration.minutes(1)
        retry = retry or RetryPolicy()
        self.prefix = prefix

        if existing_topic is not None:
            self.topic: sns.ITopic = existing_topic
        else:
            props: dict[str, object] = {
                "master_key": encryption_key,
                "enforce_ssl": True,
                "display_name": "Data export notifications",
                **dict(topic_props or {}),
            }
            self.topic = sns.Topic(self, "NotificationTopic", **props)  # type: ignore[arg-type]

        errored = sfn.Fail(self, "ExportErrored", error="ExportErrored", cause="An export step failed; see the logs.")
        export_prefix = sfn.JsonPath.format(f"{prefix}/{{}}", sfn.JsonPath.string_at("$$.Execution.Name"))
        start = retry.apply(
            tasks.CallAwsService(
                self,
                "StartExport",
                service="dynamodb",
                action="exportTableToPointInTime",
                iam_action="dynamodb:ExportTableToPointInTime",
                iam_resources=[table.table_arn],
                parameters={
                    "TableArn": table.table_arn,
                    "S3Bucket": bucket.bucket_name,
                    "S3Prefix": export_prefix,
                    "S3SseAlgorithm": "KMS",
                    "S3SseKmsKeyId": encryption_key.key_arn,
                    "ExportFormat": "DYNAMODB_JSON",
                    "ClientToken": sfn.JsonPath.hash(sfn.JsonPath.string_at("$$.Execution.Id"), "MD5"),
                },
                result_selector={
                    "arn": sfn.JsonPath.string_at("$.ExportDescription.ExportArn"),
                    "status": sfn.JsonPath.string_at("$.ExportDescription.ExportStatus"),
                    "polls": 0,
                },
                result_path="$.export",
            )
        )
        start.add_catch(errored, errors=["States.ALL"], result_path="$.error")
        wait = sfn.Wait(self, "WaitForExport", time=sfn.WaitTime.duration(poll_interval))
        describe = retry.apply(
            tasks.CallAwsService(
                self,
                "DescribeExport",
                service="dynamodb",
                action="describeExport",
                iam_action="dynamodb:DescribeExport",
                iam_resources=[f"{table.table_arn}/export/*"],
                parameters={"ExportArn": sfn.JsonPath.string_at("$.export.arn")},
                result_path="$.described",
            )
        )
        describe.add_catch(errored, errors=["States.ALL"], result_path="$.error")
        count = sfn.Pass(
            self,
            "CountPoll",
            parameters={
                "arn": sfn.JsonPath.string_at("$.export.arn"),
                "status": sfn.JsonPath.string_at("$.described.ExportDescription.ExportStatus"),
                "polls": sfn.JsonPath.math_add(sfn.JsonPath.number_at("$.export.polls"), 1),
            },
            result_path="$.export",
        )
        finished = sfn.Choice(self, "ExportFinished")
        notify = retry.apply(
            tasks.SnsPublish(
                self,
                "NotifyRequester",
                topic=self.topic,
                subject="MangaAssist data export ready",
                message=sfn.TaskInput.from_object(
                    {
                        "event_type": "export_completed",
                        "requested_by": sfn.JsonPath.string_at("$.requested_by"),
                        "export_arn": sfn.JsonPath.string_at("$.export.arn"),
                        "s3_location": sfn.JsonPath.format(
                            "s3://{}/{}/",
                            sfn.JsonPath.string_at("$.described.ExportDescription.S3Bucket"),
                            sfn.JsonPath.string_at("$.described.ExportDescription.S3Prefix"),
                        ),
                    }
                ),
                message_attributes={
                    "event_type": tasks.MessageAttribute(value="export_completed"),
                    "requested_by": tasks.MessageAttribute(value=sfn.JsonPath.string_at("$.requested_by")),
                },
                result_path=sfn.JsonPath.DISCARD,
            )
        )
        notify.add_catch(errored, errors=["States.ALL"], result_path="$.error")
        complete = sfn.Succeed(self, "ExportComplete")
        failed = sfn.Fail(
            self,
            "ExportFailed",
            error="ExportFailed",
            cause_path=sfn.JsonPath.json_to_string(sfn.JsonPath.object_at("$.described.ExportDescription")),
        )
        timed_out = sfn.Fail(
            self,
            "ExportTimedOut",
            error="ExportTimedOut",
            cause=f"The export did not finish within {max_polls} polls.",
        )
        finished.when(sfn.Condition.string_equals("$.export.status", "COMPLETED"), notify.next(complete))
        finished.when(sfn.Condition.string_equals("$.export.status", "FAILED"), failed)
        finished.when(sfn.Condition.number_greater_than_equals("$.export.polls", max_polls), timed_out)
        finished.otherwise(wait)
        wait.next(describe).next(count).next(finished)

        # ---- APPROVAL GATE: the human approval fragment (issue 8) goes here, before StartExport.
        # A gate with ``on_rejected`` (HumanApprovalGate) gets this workflow's rejection path.
        export_chain = sfn.Chain.start(start).next(wait)
        definition: sfn.IChainable = export_chain
        if approval is not None:
            attach = getattr(approval, "on_rejected", None)
            if callable(attach) and not getattr(approval, "rejection_attached", False):
                rejected = sfn.Fail(
                    self, "ExportRejected", error="ExportRejected", cause="The export was not approved."
                )
                notify_rejected = retry.apply(
                    tasks.SnsPublish(
                        self,
                        "NotifyRejected",
                        topic=self.topic,
                        subject="MangaAssist data export not approved",
                        message=sfn.TaskInput.from_object(
                            {
                                "event_type": "export_rejected",
                                "requested_by": sfn.JsonPath.string_at("$.requested_by"),
                                "execution": sfn.JsonPath.string_at("$$.Execution.Id"),
                            }
                        ),
                        message_attributes={
                            "event_type": tasks.MessageAttribute(value="export_rejected"),
                            "requested_by": tasks.MessageAttribute(value=sfn.JsonPath.string_at("$.requested_by")),
                        },
                        result_path=sfn.JsonPath.DISCARD,
                    )
                )
                notify_rejected.add_catch(rejected, errors=["States.ALL"], result_path="$.error")
                attach(notify_rejected.next(rejected))
            definition = sfn.Chain.start(approval).next(export_chain)

        self.workflow: WorkflowStateMachine = WorkflowStateMachine(
            self,
            "Resource",
            definition=definition,
            timeout=timeout or Duration.seconds(poll_interval.to_seconds() * max_polls + 3600),
            encryption_key=encryption_key,
            log_retention=log_retention,
            include_execution_data=include_execution_data,
            log_removal_policy=removal_policy,
            comment="Data export: approval, DynamoDB export to S3 (KMS), poll, notify the requester",
        )
        self.state_machine: sfn.StateMachine = self.workflow.state_machine
        # DynamoDB writes the export with the caller's permissions: objects under the prefix, the key.
        # Direct DynamoDB reads of a table encrypted with a customer key need kms:Decrypt on it.
        if table.encryption_key is not None:
            table.encryption_key.grant_decrypt(self.state_machine)
        bucket.grant_put(self.state_machine, f"{prefix}/*")
        bucket.grant_put_acl(self.state_machine, f"{prefix}/*")
        encryption_key.grant_encrypt_decrypt(self.state_machine)
        self.topic.grant_publish(self.state_machine)
        acknowledge_policy(
            self.state_machine.role,
            {
                "Action::kms:GenerateDataKey*": "Data keys for the export objects and the topic; one key.",
                "Action::kms:ReEncrypt*": "Part of encrypt/decrypt on the export key (CDK grant); one key.",
                "Action::s3:Abort*": "DynamoDB aborts its own multipart uploads of the export; scoped to the prefix.",
                resource_finding(self, bucket.bucket_arn, f"/{prefix}/*", owner=bucket): "Export objects are "
                "written under this workflow's prefix only; their names are chosen by DynamoDB.",
                resource_finding(self, table.table_arn, "/export/*", owner=table): "DescribeExport of this "
                "table's exports; export ids are generated by DynamoDB.",
            },
        )

    def grant_start_execution(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let a principal start an export (the admin API)."""
        return self.workflow.grant_start_execution(grantee)
