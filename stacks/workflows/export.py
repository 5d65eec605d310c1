"""Data export workflow: (approval) -> DynamoDB native export to S3 -> poll -> notify the requester.

Example::

    export = ExportWorkflow(self, "Export", table=table, bucket=archive_bucket,
                            options=WorkflowOptions(encryption_key=key),
                            approval=gate,                     # optional human approval gate
                            poll_interval=Duration.minutes(1), max_polls=120)
    export.grant_start_execution(admin_api_role)

States (execution input ``{"requested_by": str, ...}``; the execution name names the export)::

    [with a risk gate: DescribeTable + ScanCustomerIndex (direct SDK integrations, one item) -> AssessRisk
     (Lambda: the score) -> NeedsReview? score >= min_score -> the approval fragment;
     otherwise -> RecordAutomaticApproval (DynamoDB PutItem of the decision and its reason) -> StartExport]
    [approval fragment: its end states continue here; a rejection ends inside the fragment]
    -> StartExport (ExportTableToPointInTime, direct SDK integration, SSE-KMS, into <prefix>/<execution name>/)
    -> WaitForExport (Wait) -> DescribeExport (direct SDK integration) -> CountPoll -> ExportFinished?
         COMPLETED -> NotifyRequester (SNS: the S3 location) -> ExportComplete
         FAILED    -> ExportFailed (Fail, cause = the export description with its failure reason)
         polls >= max_polls -> ExportTimedOut (Fail)
    rejected by the gate -> NotifyRejected (SNS) -> ExportRejected (Fail)
         otherwise -> WaitForExport
    a Task error -> ExportErrored (Fail)

The table needs point-in-time recovery (DynamoDB exports from it). Both notices carry
``event_type``, ``execution`` (the execution ARN) and ``request`` (the execution input, e.g. the
requester's ``requested_by_email``), and a ``requested_by`` message attribute, so subscriptions can
filter per requester; the completed one adds ``export_arn`` and ``s3_location``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aws_cdk import Duration
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from constructs_lib.nag_findings import acknowledge_policy, resource_finding
from constructs_lib.validation import PropErrors, struct_values
from constructs_lib.workflow_defaults import RetryPolicy, WorkflowOptions, WorkflowStateMachine
from contracts import keys, schema
from contracts.workflows import AUTOMATIC_APPROVAL_PREFIX


@dataclass(frozen=True)
class RiskGate:
    """Which exports the approval gate sees: ``assess`` scores a request, a score >= ``min_score`` waits for a person.

    ``customer_index`` is the index whose items are customer records (its first item, and its
    count, are the scope); an automatic approval's record expires after ``record_days``.
    """

    assess: lambda_.IFunction
    min_score: int
    customer_index: str
    record_days: int


class ExportWorkflow(Construct):
    """The export state machine and the requester-notification topic (see the module docstring).

    Args:
        table: the table to export (with point-in-time recovery on).
        bucket: destination bucket.
        options: its ``encryption_key`` is the KMS key the export objects are written with
            (SSE-KMS) and encrypts the new topic and the execution log group; log retention,
            execution data, removal policy, the retry of every Task, and the overall timeout
            (defaults to poll_interval x max_polls + 1 hour, room for the approval).
        prefix: key prefix of exports in ``bucket``; each export goes under
            ``<prefix>/<execution name>/``. Defaults to ``exports``.
        risk: which exports need the approval: those whose risk score reaches ``risk.min_score``;
            the others are approved automatically, and the decision with its reason is written to
            the table as ``REVIEW#export-<execution name>`` (status ``approved``, ``decided_by``
            ``automatic``), which the stream router audits. Needs ``approval``. Defaults to none:
            every export passes the gate.
        approval: a chainable approval gate placed before the export; its end states continue to
            StartExport. A gate with ``on_rejected(next)`` (e.g. ``HumanApprovalGate``) gets this
            workflow's rejection path (NotifyRejected -> ExportRejected); any other gate must end
            rejections itself. Defaults to none: no gate.
        existing_topic: topic for the requester notification. Defaults to a new KMS-encrypted,
            SSL-only topic.
        topic_props: further properties of the new topic (not with ``existing_topic``).
        poll_interval: wait between DescribeExport calls. Defaults to 1 minute.
        max_polls: DescribeExport calls before giving up (ExportTimedOut), 1..1000. Defaults to 120.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        table: dynamodb.ITable,
        bucket: s3.IBucket,
        options: WorkflowOptions,
        prefix: str = "exports",
        approval: sfn.IChainable | None = None,
        risk: RiskGate | None = None,
        existing_topic: sns.ITopic | None = None,
        topic_props: sns.TopicProps | None = None,
        poll_interval: Duration | None = None,
        max_polls: int = 120,
    ) -> None:
        super().__init__(scope, construct_id)
        errors = PropErrors(self)
        errors.check_exclusive(existing_topic=existing_topic, topic_props=topic_props)
        errors.check_range("max_polls", max_polls, 1, 1000)
        errors.check(risk is None or approval is not None, "risk needs an approval gate to send risky exports to")
        errors.check(
            bool(prefix) and not prefix.startswith("/") and not prefix.endswith("/"),
            f"prefix must be a key prefix without leading/trailing '/' such as 'exports' (given {prefix!r})",
        )
        poll_interval = poll_interval or Duration.minutes(1)
        encryption_key = options.encryption_key
        self._retry: RetryPolicy = options.retry
        self.prefix = prefix
        self.topic: sns.ITopic = existing_topic or self._new_topic(encryption_key, topic_props)
        export_chain = self._export(table, bucket, encryption_key, poll_interval, max_polls)
        definition = self._with_approval(approval, export_chain)
        if risk is not None:
            definition = self._with_risk(risk, table, definition, export_chain)
        self.workflow: WorkflowStateMachine = WorkflowStateMachine(
            self,
            "Resource",
            definition=definition,
            options=options.with_timeout(
                options.timeout or Duration.seconds(poll_interval.to_seconds() * max_polls + 3600)
            ),
            comment="Data export: approval, DynamoDB export to S3 (KMS), poll, notify the requester",
        )
        self.state_machine: sfn.StateMachine = self.workflow.state_machine
        self._grant(table, bucket, encryption_key)

    def _new_topic(self, encryption_key: kms.IKey, topic_props: sns.TopicProps | None) -> sns.Topic:
        props: dict[str, Any] = {
            "master_key": encryption_key,
            "enforce_ssl": True,
            "display_name": "Data export notifications",
            **struct_values(topic_props),
        }
        return sns.Topic(self, "NotificationTopic", **props)

    def _export(
        self,
        table: dynamodb.ITable,
        bucket: s3.IBucket,
        encryption_key: kms.IKey,
        poll_interval: Duration,
        max_polls: int,
    ) -> sfn.Chain:
        """StartExport -> WaitForExport -> DescribeExport -> CountPoll -> ExportFinished? (see the module docstring)."""
        retry = self._retry
        errored = sfn.Fail(self, "ExportErrored", error="ExportErrored", cause="An export step failed; see the logs.")
        start = self._start(table, bucket, encryption_key)
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
        notify = self._notify_completed()
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
        return sfn.Chain.start(start).next(wait)

    def _start(self, table: dynamodb.ITable, bucket: s3.IBucket, encryption_key: kms.IKey) -> sfn.TaskStateBase:
        """StartExport: the point-in-time export into ``<prefix>/<execution name>/``, SSE-KMS (direct SDK call)."""
        export_prefix = sfn.JsonPath.format(f"{self.prefix}/{{}}", sfn.JsonPath.string_at("$$.Execution.Name"))
        return self._retry.apply(
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

    def _notify_completed(self) -> sfn.TaskStateBase:
        """NotifyRequester: the export's S3 location, to the requester's topic."""
        return self._retry.apply(
            tasks.SnsPublish(
                self,
                "NotifyRequester",
                topic=self.topic,
                subject="MangaAssist data export ready",
                message=sfn.TaskInput.from_object(
                    {
                        "event_type": "export_completed",
                        "requested_by": sfn.JsonPath.string_at("$.requested_by"),
                        "execution": sfn.JsonPath.string_at("$$.Execution.Id"),
                        "request": sfn.JsonPath.object_at("$$.Execution.Input"),
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

    def _with_approval(self, approval: sfn.IChainable | None, export_chain: sfn.Chain) -> sfn.IChainable:
        """The export behind the approval gate, when there is one."""
        retry = self._retry
        # ---- APPROVAL GATE: the human approval fragment goes here, before StartExport.
        # A gate with ``on_rejected`` (HumanApprovalGate) gets this workflow's rejection path.
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
                                "request": sfn.JsonPath.object_at("$$.Execution.Input"),
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
        return definition

    def _with_risk(
        self, risk: RiskGate, table: dynamodb.ITable, reviewed: sfn.IChainable, export_chain: sfn.Chain
    ) -> sfn.IChainable:
        """DescribeTable -> ScanCustomerIndex -> AssessRisk -> NeedsReview? the gate | RecordAutomaticApproval."""
        retry = self._retry
        errored = sfn.Fail(self, "AssessmentErrored", error="AssessmentErrored", cause="Scoring the export failed.")
        describe = retry.apply(
            tasks.CallAwsService(
                self,
                "DescribeTable",
                service="dynamodb",
                action="describeTable",
                iam_action="dynamodb:DescribeTable",
                iam_resources=[table.table_arn],
                parameters={"TableName": table.table_name},
                result_selector={
                    "bytes": sfn.JsonPath.number_at("$.Table.TableSizeBytes"),
                    "indexes": sfn.JsonPath.list_at("$.Table.GlobalSecondaryIndexes"),
                },
                result_path="$.facts.table",
            )
        )
        probe = retry.apply(
            tasks.CallAwsService(
                self,
                "ScanCustomerIndex",
                service="dynamodb",
                action="scan",
                iam_action="dynamodb:Scan",
                iam_resources=[f"{table.table_arn}/index/{risk.customer_index}"],
                parameters={
                    "TableName": table.table_name,
                    "IndexName": risk.customer_index,
                    "Select": "COUNT",
                    "Limit": 1,
                },
                result_selector={"count": sfn.JsonPath.number_at("$.Count")},
                result_path="$.facts.customers",
            )
        )
        assess = retry.apply(
            tasks.LambdaInvoke(
                self,
                "AssessRisk",
                lambda_function=risk.assess,
                payload=sfn.TaskInput.from_object(
                    {
                        "request": sfn.JsonPath.object_at("$$.Execution.Input"),
                        "table": sfn.JsonPath.object_at("$.facts.table"),
                        "customers": sfn.JsonPath.object_at("$.facts.customers"),
                        "customer_index": risk.customer_index,
                        "record_days": risk.record_days,
                    }
                ),
                payload_response_only=True,
                result_path="$.risk",
            )
        )
        record = self._record_automatic_approval(table, risk)
        for task in (describe, probe, assess, record):
            task.add_catch(errored, errors=["States.ALL"], result_path="$.error")
        needs_review = sfn.Choice(self, "NeedsReview")
        needs_review.when(sfn.Condition.number_greater_than_equals("$.risk.score", risk.min_score), reviewed)
        needs_review.otherwise(record.next(export_chain.start_state))
        return describe.next(probe).next(assess).next(needs_review)

    def _record_automatic_approval(self, table: dynamodb.ITable, risk: RiskGate) -> sfn.TaskStateBase:
        """RecordAutomaticApproval: the decision and its reason as a review record (direct PutItem), audited."""
        text = tasks.DynamoAttributeValue.from_string
        number = tasks.DynamoAttributeValue.number_from_string
        return self._retry.apply(
            tasks.DynamoPutItem(
                self,
                "RecordAutomaticApproval",
                table=table,
                item={
                    schema.PARTITION_KEY: text(
                        sfn.JsonPath.format(
                            f"{keys.REVIEW_PREFIX}{AUTOMATIC_APPROVAL_PREFIX}{{}}",
                            sfn.JsonPath.string_at("$$.Execution.Name"),
                        )
                    ),
                    schema.SORT_KEY: text(keys.META_SK),
                    "status": text("approved"),
                    "decided_by": text("automatic"),
                    "decision_reason": text(sfn.JsonPath.string_at("$.risk.reason")),
                    "risk_score": number(sfn.JsonPath.string_at("$.risk.score_text")),
                    "review_threshold": number(str(risk.min_score)),
                    "execution": text(sfn.JsonPath.string_at("$$.Execution.Id")),
                    "created_at": number(sfn.JsonPath.string_at("$.risk.decided_at")),
                    "decided_at": number(sfn.JsonPath.string_at("$.risk.decided_at")),
                    schema.TTL_ATTRIBUTE: number(sfn.JsonPath.string_at("$.risk.expires_at")),
                },
                result_path=sfn.JsonPath.DISCARD,
            )
        )

    def _grant(self, table: dynamodb.ITable, bucket: s3.IBucket, encryption_key: kms.IKey) -> None:
        prefix = self.prefix
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
