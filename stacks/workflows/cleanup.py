"""Session cleanup workflow: sweep a sharded, sparse "awaiting cleanup" index and clean each session.

Example::

    cleanup = CleanupWorkflow(
        self, "Cleanup", table=table, index_name="CleanupIndex",
        shard_attribute="cleanup_shard", eligible_since_attribute="cleanup_at",
        plan=plan_fn, worker=worker_fn, tally=tally_fn,
        options=WorkflowOptions(encryption_key=key, timeout=Duration.hours(1)), max_concurrency=10)
    cleanup.grant_start_execution(admin_api_role)

States::

    PlanCleanup (Lambda: cutoff = now - grace, the shard list)
    -> OneSession? ($.session_id present: a per-session run, scheduled when that session ended)
         yes -> CleanOneSession (worker, only if the session became eligible before the cutoff)
                (a failure -> OneSessionFailed) -> CountOneSession (Lambda) -> AllSessionsCleaned?
    -> SweepShards (Distributed Map over shards, one at a time; each shard is a STANDARD child)
         QueryFirstPage (DynamoDB Query, direct SDK integration: shard = S AND eligible < cutoff)
         -> CleanPage (Distributed Map over the page, MaxConcurrency; each session a STANDARD child)
              -> CleanSession (worker Lambda) (a failed session -> SessionCleanupFailed)
         -> TallyPage (Lambda: add the page's counts) -> MorePages?
              LastEvaluatedKey present -> QueryNextPage (ExclusiveStartKey) -> CleanPage ...
              done -> ShardSwept
    -> SumShards (Lambda) -> AllSessionsCleaned? -> CleanupComplete | CleanupIncomplete (Fail)
    any error outside a session -> CleanupFailed (Fail)

Why Distributed Maps: an Inline Map writes every iteration into the parent's history, whose
25,000 events end a Standard execution after a few thousand sessions. Here the parent records a
few events per shard, a shard's child about 18 per page, and each session's own events stay in its
own child; one sweep can clean about 1,380 pages per shard (``page_size`` sessions each).

The output is the counts: ``{"sessions_seen", "sessions_archived", "sessions_failed", "items_deleted"}``.
Why Lambdas for the plan and the tally: ASL has no clock in epoch seconds (only the ISO start
time) and no sum over an array; both are a few lines of code and keep the index Query direct.

Contracts of the Lambdas (``payload_response_only``):

* ``plan``: ``{"input": <execution input>}`` -> ``{"cutoff": int, "cutoff_text": str, "shards": [str]}``.
* ``worker``: ``{"session_id", "eligible_before"?}`` -> ``{"session_id", "archived": bool, "items_deleted": int,
  ...}``; idempotent; only ``session_id``, ``archived`` and ``items_deleted`` are kept per session.
* ``tally``: ``{"results": [...], "totals": {...}}`` -> the totals plus the results' counts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from aws_cdk import Acknowledgment, Duration, Fn, Stack, Validations
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from constructs_lib.validation import PropErrors
from constructs_lib.workflow_defaults import WorkflowOptions, WorkflowStateMachine


@dataclass(frozen=True)
class _IndexShape:
    """The cleanup index and the attributes the sweep reads from it."""

    index_name: str
    shard_attribute: str
    eligible_since_attribute: str
    session_id_attribute: str


ZERO_TOTALS = {"sessions_seen": 0, "sessions_archived": 0, "sessions_failed": 0, "items_deleted": 0}


class CleanupWorkflow(Construct):
    """The cleanup state machine (see the module docstring).

    Args:
        table: the table whose index lists sessions awaiting cleanup.
        index_name: that sparse index. Its partition key is a shard id, its sort key a number
            (epoch seconds since the item became eligible).
        shard_attribute / eligible_since_attribute: the index's key attributes.
        session_id_attribute: string attribute (projected into the index) naming the session.
            Defaults to ``session_id``.
        plan / worker / tally: the application Lambdas (contracts in the module docstring).
        options: key of the execution log group, its retention, execution data, removal policy,
            the retry of every Task and the overall timeout (defaults to 1 hour).
        max_concurrency: sessions cleaned in parallel, 1..40. Defaults to 10.
        page_size: index items per Query page, 1..1000. Defaults to 500 (a page and its results
            stay far below the 256 KiB state payload limit).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        table: dynamodb.ITable,
        index_name: str,
        shard_attribute: str,
        eligible_since_attribute: str,
        plan: lambda_.IFunction,
        worker: lambda_.IFunction,
        tally: lambda_.IFunction,
        options: WorkflowOptions,
        session_id_attribute: str = "session_id",
        max_concurrency: int = 10,
        page_size: int = 500,
    ) -> None:
        super().__init__(scope, construct_id)
        errors = PropErrors(self)
        errors.check_range("max_concurrency", max_concurrency, 1, 40)
        errors.check_range("page_size", page_size, 1, 1000)
        for name, value in (
            ("index_name", index_name),
            ("shard_attribute", shard_attribute),
            ("eligible_since_attribute", eligible_since_attribute),
        ):
            errors.check(bool(value), f"{name} must name the cleanup index or one of its key attributes (given '')")
        self._retry = options.retry
        self.max_concurrency = max_concurrency

        failed = sfn.Fail(self, "CleanupFailed", error="CleanupFailed", cause="A cleanup step failed; see the logs.")

        plan_task = self._invoke(
            "PlanCleanup",
            plan,
            sfn.TaskInput.from_object({"input": sfn.JsonPath.entire_payload}),
            "$.plan",
        )
        plan_task.add_catch(failed, errors=["States.ALL"], result_path="$.error")

        sweep, sum_shards = self._sweep(
            table,
            _IndexShape(index_name, shard_attribute, eligible_since_attribute, session_id_attribute),
            worker=worker,
            tally=tally,
            page_size=page_size,
            failed=failed,
        )
        all_clean = self._all_clean()

        one_session = self._one_session(worker, tally, failed)
        one_session.next(all_clean)
        route = sfn.Choice(self, "OneSession")
        route.when(sfn.Condition.is_present("$.session_id"), one_session.start_state).otherwise(sweep)
        sweep.next(sum_shards).next(all_clean)

        definition = sfn.Chain.start(plan_task).next(route)
        self.workflow: WorkflowStateMachine = WorkflowStateMachine(
            self,
            "Resource",
            definition=definition,
            options=options.with_timeout(options.timeout or Duration.hours(1)),
            comment="Session cleanup: archive and delete the items of sessions past the grace period",
        )
        self.state_machine: sfn.StateMachine = self.workflow.state_machine
        # Direct DynamoDB reads of a table encrypted with a customer key need kms:Decrypt on it.
        if table.encryption_key is not None:
            table.encryption_key.grant_decrypt(self.state_machine)
        self.workflow.acknowledge_invokes([plan, worker, tally])
        self._acknowledge_child_executions()

    def _sweep(
        self,
        table: dynamodb.ITable,
        shape: _IndexShape,
        *,
        worker: lambda_.IFunction,
        tally: lambda_.IFunction,
        page_size: int,
        failed: sfn.Fail,
    ) -> tuple[sfn.DistributedMap, sfn.TaskStateBase]:
        """SweepShards (every shard, one at a time, each a child execution) and SumShards (the totals)."""
        first_page = self._sweep_shard(table, shape, worker=worker, tally=tally, page_size=page_size)

        sweep = sfn.DistributedMap(
            self,
            "SweepShards",
            items_path="$.plan.shards",
            max_concurrency=1,
            map_execution_type=sfn.StateMachineType.STANDARD,
            item_selector={
                "shard": sfn.JsonPath.string_at("$$.Map.Item.Value"),
                "cutoff": sfn.JsonPath.string_at("$.plan.cutoff_text"),
                "totals": ZERO_TOTALS,
            },
            result_path="$.shards",
        )
        sweep.item_processor(first_page)
        sweep.add_catch(failed, errors=["States.ALL"], result_path="$.error")

        sum_shards = self._invoke(
            "SumShards",
            tally,
            sfn.TaskInput.from_object({"results": sfn.JsonPath.list_at("$.shards"), "totals": ZERO_TOTALS}),
            "$.totals",
        )
        sum_shards.add_catch(failed, errors=["States.ALL"], result_path="$.error")
        return sweep, sum_shards

    def _all_clean(self) -> sfn.Choice:
        """AllSessionsCleaned: CleanupComplete with the totals, or CleanupIncomplete naming how many failed."""
        all_clean = sfn.Choice(self, "AllSessionsCleaned")
        complete = sfn.Pass(self, "CleanupComplete", output_path="$.totals")
        incomplete = sfn.Fail(
            self,
            "CleanupIncomplete",
            error="CleanupIncomplete",
            cause_path=sfn.JsonPath.format(
                "{} session(s) could not be cleaned; the next run retries them",
                sfn.JsonPath.string_at("$.totals.sessions_failed"),
            ),
        )
        all_clean.when(sfn.Condition.number_greater_than("$.totals.sessions_failed", 0), incomplete).otherwise(complete)
        return all_clean

    def _acknowledge_child_executions(self) -> None:
        """The Distributed Maps' own grant: describe and stop the child executions of this state machine."""
        policy = self.state_machine.node.try_find_child("DistributedMapPolicy")
        if policy is None:
            return
        reference = Stack.of(self).resolve(
            Fn.select(6, Fn.split(":", self.state_machine.state_machine_arn))  # the state machine's name
        )
        name = json.dumps(reference, separators=(",", ":"))
        for suffix in (":*", "/*:*"):
            finding = f"Resource::arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:execution:{name}{suffix}"
            Validations.of(policy).acknowledge(
                Acknowledgment(
                    id=f"AwsSolutions-IAM5[{finding}]",
                    reason="Distributed Map child executions of this one state machine (their names are "
                    "generated at run time); CDK's grant for describing and stopping them.",
                )
            )

    def _invoke(
        self, state_id: str, fn: lambda_.IFunction, payload: sfn.TaskInput, result_path: str
    ) -> sfn.TaskStateBase:
        return self._retry.apply(
            tasks.LambdaInvoke(
                self,
                state_id,
                lambda_function=fn,
                payload=payload,
                payload_response_only=True,
                retry_on_service_exceptions=False,
                result_path=result_path,
            )
        )

    def _one_session(self, worker: lambda_.IFunction, tally: lambda_.IFunction, failed: sfn.Fail) -> sfn.Chain:
        """A per-session run: clean ``$.session_id`` if its grace is over, count it like a sweep."""
        clean = self._invoke(
            "CleanOneSession",
            worker,
            sfn.TaskInput.from_object(
                {
                    "session_id": sfn.JsonPath.string_at("$.session_id"),
                    "eligible_before": sfn.JsonPath.number_at("$.plan.cutoff"),
                }
            ),
            "$.result",
        )
        one_failed = sfn.Pass(
            self,
            "OneSessionFailed",
            parameters={
                "session_id": sfn.JsonPath.string_at("$.session_id"),
                "failed": True,
                "error": sfn.JsonPath.string_at("$.error.Error"),
            },
            result_path="$.result",
        )
        clean.add_catch(one_failed, errors=["States.ALL"], result_path="$.error")
        count = self._invoke(
            "CountOneSession",
            tally,
            sfn.TaskInput.from_object(
                {"results": sfn.JsonPath.array(sfn.JsonPath.string_at("$.result")), "totals": ZERO_TOTALS}
            ),
            "$.totals",
        )
        count.add_catch(failed, errors=["States.ALL"], result_path="$.error")
        one_failed.next(count)
        return sfn.Chain.start(clean).next(count)

    def _sweep_shard(
        self,
        table: dynamodb.ITable,
        shape: _IndexShape,
        *,
        worker: lambda_.IFunction,
        tally: lambda_.IFunction,
        page_size: int,
    ) -> sfn.TaskStateBase:
        """One shard, page by page: QueryFirstPage -> CleanPage -> TallyPage -> MorePages? -> QueryNextPage."""
        query_params = {
            "TableName": table.table_name,
            "IndexName": shape.index_name,
            "KeyConditionExpression": "#shard = :shard AND #since < :cutoff",
            "ExpressionAttributeNames": {"#shard": shape.shard_attribute, "#since": shape.eligible_since_attribute},
            "ExpressionAttributeValues": {
                ":shard": {"S": sfn.JsonPath.string_at("$.shard")},
                ":cutoff": {"N": sfn.JsonPath.string_at("$.cutoff")},
            },
            "ProjectionExpression": "#sid",
            "Limit": page_size,
        }
        query_params["ExpressionAttributeNames"] = {
            **query_params["ExpressionAttributeNames"],  # type: ignore[dict-item]
            "#sid": shape.session_id_attribute,
        }
        index_arn = f"{table.table_arn}/index/{shape.index_name}"

        def query(state_id: str, extra: dict[str, object]) -> sfn.TaskStateBase:
            return self._retry.apply(
                tasks.CallAwsService(
                    self,
                    state_id,
                    service="dynamodb",
                    action="query",
                    iam_action="dynamodb:Query",
                    iam_resources=[index_arn],
                    parameters={**query_params, **extra},
                    result_path="$.page",
                )
            )

        first_page = query("QueryFirstPage", {})
        next_page = query("QueryNextPage", {"ExclusiveStartKey": sfn.JsonPath.object_at("$.page.LastEvaluatedKey")})

        clean_page = self._clean_page(worker, shape)

        tally_page = self._invoke(
            "TallyPage",
            tally,
            sfn.TaskInput.from_object(
                {"results": sfn.JsonPath.list_at("$.results"), "totals": sfn.JsonPath.object_at("$.totals")}
            ),
            "$.totals",
        )
        more_pages = sfn.Choice(self, "MorePages")
        shard_swept = sfn.Pass(self, "ShardSwept", output_path="$.totals")
        first_page.next(clean_page)
        next_page.next(clean_page)
        clean_page.next(tally_page).next(more_pages)
        more_pages.when(sfn.Condition.is_present("$.page.LastEvaluatedKey"), next_page).otherwise(shard_swept)
        return first_page

    def _clean_page(self, worker: lambda_.IFunction, shape: _IndexShape) -> sfn.DistributedMap:
        """CleanPage: every session of a page, MaxConcurrency at a time, each a child execution; a failed
        session is counted (SessionCleanupFailed), not raised."""
        clean_session = self._retry.apply(
            tasks.LambdaInvoke(
                self,
                "CleanSession",
                lambda_function=worker,
                payload=sfn.TaskInput.from_object({"session_id": sfn.JsonPath.string_at("$.session_id")}),
                payload_response_only=True,
                retry_on_service_exceptions=False,
                # What the tally counts, nothing more: a page's results must fit one state payload.
                result_selector={
                    "session_id": sfn.JsonPath.string_at("$.session_id"),
                    "archived": sfn.JsonPath.string_at("$.archived"),
                    "items_deleted": sfn.JsonPath.number_at("$.items_deleted"),
                },
            )
        )
        session_failed = sfn.Pass(
            self,
            "SessionCleanupFailed",
            parameters={
                "session_id": sfn.JsonPath.string_at("$.session_id"),
                "failed": True,
                "error": sfn.JsonPath.string_at("$.error.Error"),
            },
        )
        clean_session.add_catch(session_failed, errors=["States.ALL"], result_path="$.error")
        clean_page = sfn.DistributedMap(
            self,
            "CleanPage",
            items_path="$.page.Items",
            max_concurrency=self.max_concurrency,
            # STANDARD children: each session's cleanup keeps an inspectable history, and moto's
            # executor (which the tests run the definition on) accepts no EXPRESS processor.
            map_execution_type=sfn.StateMachineType.STANDARD,
            item_selector={"session_id": sfn.JsonPath.string_at(f"$$.Map.Item.Value.{shape.session_id_attribute}.S")},
            result_path="$.results",
        )
        clean_page.item_processor(clean_session)
        return clean_page

    def grant_start_execution(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let a principal start a cleanup (the admin API, a schedule, a rule)."""
        return self.workflow.grant_start_execution(grantee)
