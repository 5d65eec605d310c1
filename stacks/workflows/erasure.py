"""Customer erasure workflow: every trace of one customer removed, then a receipt of counts.

Example::

    erasure = ErasureWorkflow(self, "Erasure", table=table, objects=objects_fn, items=table_fn,
                              user=user_fn, options=WorkflowOptions(encryption_key=key))
    erasure.grant_start_execution(customer_api_role)

States (execution input ``{"customer_id": str, "record": {"PK": str, "SK": str}}``, the record
being the customer's erasure record, keyed by a pseudonym of the id)::

    EraseObjects (Lambda: archive versions and delete markers, export rows) -> $.counts.objects
    -> EraseItems (Lambda: running handoffs ended, then every table item of the customer) -> $.counts.items
    -> DeleteUser (Lambda: AdminDeleteUser, a missing user counts 0) -> $.counts.user
    -> WriteReceipt (DynamoDB UpdateItem, direct SDK integration: status completed, the counts,
       the finish time; ShapeReceipt merges the counts first) -> ErasureComplete
    any error -> RecordFailure (DynamoDB UpdateItem: status failed, the error name) -> ErasureFailed (Fail)

Why Lambdas for the three erasing steps: each decides what is the customer's (a row of an export
file, an item naming them, an ended handoff) or tolerates an absent user; the receipt is only the
counts put in place, so it is a direct write. Objects go first: the customer's sessions are still
in the table to name their archive objects, and a run that fails later finds them again.

Contracts of the Lambdas (``payload_response_only``): each takes ``{"customer_id"}`` and answers
its counts (numbers only, no personal data); each is idempotent (a second run counts zeros).
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from constructs_lib.workflow_defaults import WorkflowOptions, WorkflowStateMachine
from contracts import schema


class ErasureWorkflow(Construct):
    """The erasure state machine (see the module docstring).

    Args:
        table: the table holding the erasure records (``UpdateItem`` by the state machine itself).
        objects / items / user: the application Lambdas (contracts in the module docstring).
        options: key of the execution log group, its retention, execution data, removal policy,
            the retry of every Task and the overall timeout (defaults to 1 hour).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        table: dynamodb.ITable,
        objects: lambda_.IFunction,
        items: lambda_.IFunction,
        user: lambda_.IFunction,
        options: WorkflowOptions,
    ) -> None:
        super().__init__(scope, construct_id)
        self._retry = options.retry
        record_failure = self._record(
            table,
            "RecordFailure",
            "SET erasure_status = :status, finished_at = :at, failure = :error",
            {
                ":status": tasks.DynamoAttributeValue.from_string("failed"),
                ":at": tasks.DynamoAttributeValue.from_string(sfn.JsonPath.string_at("$$.State.EnteredTime")),
                ":error": tasks.DynamoAttributeValue.from_string(sfn.JsonPath.string_at("$.error.Error")),
            },
        )
        erasure_failed = sfn.Fail(
            self, "ErasureFailed", error="ErasureFailed", cause="An erasure step failed; a new request retries it."
        )
        record_failure.next(erasure_failed)
        # A record that cannot be marked failed stays "requested"; the execution still fails.
        record_failure.add_catch(erasure_failed, errors=["States.ALL"], result_path="$.record_error")
        steps = [
            self._invoke("EraseObjects", objects, "$.counts.objects"),
            self._invoke("EraseItems", items, "$.counts.items"),
            self._invoke("DeleteUser", user, "$.counts.user"),
        ]
        # The receipt's counts, one JSON document of every number of the three steps (by kind).
        shape = sfn.Pass(
            self,
            "ShapeReceipt",
            parameters={
                "counts": sfn.JsonPath.json_merge(
                    sfn.JsonPath.json_merge(
                        sfn.JsonPath.object_at("$.counts.objects"), sfn.JsonPath.object_at("$.counts.items")
                    ),
                    sfn.JsonPath.object_at("$.counts.user"),
                )
            },
            result_path="$.receipt",
        )
        receipt = self._record(
            table,
            "WriteReceipt",
            "SET erasure_status = :status, finished_at = :at, counts_json = :counts",
            {
                ":status": tasks.DynamoAttributeValue.from_string("completed"),
                ":at": tasks.DynamoAttributeValue.from_string(sfn.JsonPath.string_at("$$.State.EnteredTime")),
                ":counts": tasks.DynamoAttributeValue.from_string(
                    sfn.JsonPath.json_to_string(sfn.JsonPath.object_at("$.receipt.counts"))
                ),
            },
        )
        for step in [*steps, receipt]:
            step.add_catch(record_failure, errors=["States.ALL"], result_path="$.error")
        definition = sfn.Chain.start(steps[0]).next(steps[1]).next(steps[2]).next(shape)
        self.workflow: WorkflowStateMachine = WorkflowStateMachine(
            self,
            "Resource",
            definition=definition.next(receipt).next(sfn.Succeed(self, "ErasureComplete")),
            options=options.with_timeout(options.timeout or Duration.hours(1)),
            comment="Customer erasure: every session, item, object version, export row and the user, then a receipt",
        )
        self.state_machine: sfn.StateMachine = self.workflow.state_machine
        if table.encryption_key is not None:
            # DynamoDB asks the caller's kms:Decrypt on the table's key for a write too.
            table.encryption_key.grant_decrypt(self.state_machine)
        self.workflow.acknowledge_invokes([objects, items, user])

    def _invoke(self, state_id: str, fn: lambda_.IFunction, result_path: str) -> sfn.TaskStateBase:
        return self._retry.apply(
            tasks.LambdaInvoke(
                self,
                state_id,
                lambda_function=fn,
                payload=sfn.TaskInput.from_object({"customer_id": sfn.JsonPath.string_at("$.customer_id")}),
                payload_response_only=True,
                retry_on_service_exceptions=False,
                result_path=result_path,
            )
        )

    def _record(
        self,
        table: dynamodb.ITable,
        state_id: str,
        update: str,
        values: dict[str, tasks.DynamoAttributeValue],
    ) -> tasks.DynamoUpdateItem:
        """An UpdateItem of the execution's erasure record (``$.record``), only while that record exists."""
        task = tasks.DynamoUpdateItem(
            self,
            state_id,
            table=table,
            key={
                schema.PARTITION_KEY: tasks.DynamoAttributeValue.from_string(sfn.JsonPath.string_at("$.record.PK")),
                schema.SORT_KEY: tasks.DynamoAttributeValue.from_string(sfn.JsonPath.string_at("$.record.SK")),
            },
            update_expression=update,
            expression_attribute_values=values,
            result_path=sfn.JsonPath.DISCARD,
        )
        self._retry.apply(task)
        return task

    def grant_start_execution(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let a principal start an erasure (the customer data API)."""
        return self.workflow.grant_start_execution(grantee)
