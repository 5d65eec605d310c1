"""OrchestrationStack templates: state graphs, retries and catches, concurrency, logging, tracing, IAM, triggers."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Duration, Stack
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk.assertions import Match

from constructs_lib.workflow_defaults import RetryPolicy, WorkflowOptions
from embedded.synth import SynthesizedStage
from stacks.workflows.cleanup import CleanupWorkflow
from stacks.workflows.export import ExportWorkflow

ROOT = Path(__file__).resolve().parents[2]
HANDOFF_STATES = {
    "ValidateSession",
    "CheckSessionActive",
    "CheckAgentAvailability",
    "IsAgentAvailable",
    "WaitForAgent",
    "EscalateToManager",
    "IsManagerAvailable",
    "WaitForManager",
    "NoManagerTookOver",
    "AssignAgent",
    "UpdateDynamoDB",
    "NotifyParties",
    "TransferConversationContext",
    "MonitorHandoff",
    "FirstReplyOrClose",
    "StartWatchingAgent",
    "WatchAgent",
    "MessageOrClose",
    "FindReplacementAgent",
    "ReplaceIdleAgent",
    "IdleAgentReplaced",
    "AgentWroteMeanwhile",
    "HandToReplacement",
    "NoAgentToTakeOver",
    "HandoffComplete",
    "ReassignAgent",
    "HandoffClosedMeanwhile",
    "AgentRepliedMeanwhile",
    "HandoffFailed",
    "NotifyCustomerHandoffFailed",
    "HandoffAborted",
    "HandoffCleanupFailed",
    "HandoffRefused",
}


def _machines(stage: SynthesizedStage) -> dict[str, dict[str, Any]]:
    """Each state machine's definition (tokens rendered as "<token>"), by logical-id prefix."""
    resources = stage.templates["Orchestration"]["Resources"]
    found: dict[str, dict[str, Any]] = {}
    for lid, res in resources.items():
        if res["Type"] != "AWS::StepFunctions::StateMachine":
            continue
        body = res["Properties"]["DefinitionString"]
        if isinstance(body, dict):
            separator, parts = body["Fn::Join"]
            body = separator.join(_render(p) for p in parts)
        found[re.sub(r"[0-9A-F]{8}$", "", lid)] = {"definition": json.loads(body), "resource": res}
    return found


def _render(part: Any) -> str:
    if isinstance(part, str):
        return part
    return "aws" if part == {"Ref": "AWS::Partition"} else "<token>"


def _states(definition: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every state of a definition, nested Parallel branches and Map processors included."""
    states: dict[str, dict[str, Any]] = {}
    for name, state in definition["States"].items():
        states[name] = state
        for branch in state.get("Branches", []):
            states.update(_states(branch))
        if "ItemProcessor" in state:
            states.update(_states(state["ItemProcessor"]))
    return states


def _catches_to(state: dict[str, Any]) -> set[str]:
    return {c["Next"] for c in state.get("Catch", [])}


def test_handoff_has_exactly_the_specified_states_and_transitions(dev: SynthesizedStage) -> None:
    definition = _machines(dev)["Handoff"]["definition"]
    states = _states(definition)
    assert set(definition["States"]) == HANDOFF_STATES
    assert definition["StartAt"] == "ValidateSession"
    assert states["ValidateSession"]["Resource"] == "arn:aws:states:::dynamodb:getItem"
    assert states["ValidateSession"]["Parameters"]["Key"]["PK"] == {"S.$": "States.Format('SESSION#{}', $.session_id)"}
    assert "<token>" in json.dumps(states["ValidateSession"]["Parameters"]["TableName"])  # from the ITable
    # Active and may hand over -> on; may hand over but not active -> HandoffFailed (the owner is
    # told); anyone else -> HandoffRefused, with no side effect and no message to the session
    choices = states["CheckSessionActive"]["Choices"]
    assert [c["Next"] for c in choices] == ["CheckAgentAvailability", "HandoffFailed"]
    assert states["CheckSessionActive"]["Default"] == "HandoffRefused"
    assert states["HandoffRefused"]["Type"] == "Fail"
    assert states["HandoffRefused"]["Error"] == "HandoffRefused"
    ownership = json.dumps(choices[0])
    assert '"StringEqualsPath": "$.requested_by"' in ownership  # the API has no Lambda to check it
    assert '"Variable": "$.session.Item.customer_id.S"' in ownership
    assert '"StringEquals": "admin"' in ownership
    assert states["IsAgentAvailable"]["Choices"][0]["Next"] == "AssignAgent"
    assert states["IsAgentAvailable"]["Default"] == "WaitForAgent"
    assert states["WaitForAgent"]["Resource"] == "arn:aws:states:::sqs:sendMessage.waitForTaskToken"
    assert states["WaitForAgent"]["Catch"][0] == {
        "ErrorEquals": ["States.Timeout", "States.HeartbeatTimeout"],
        "ResultPath": "$.wait_error",
        "Next": "EscalateToManager",
    }
    # An escalation takes a free manager at once, or waits for a paged one until manager_wait
    assert states["EscalateToManager"]["Next"] == "IsManagerAvailable"
    assert states["IsManagerAvailable"]["Choices"][0]["Next"] == "AssignAgent"
    assert states["IsManagerAvailable"]["Default"] == "WaitForManager"
    assert states["WaitForManager"]["Resource"] == "arn:aws:states:::lambda:invoke.waitForTaskToken"
    assert states["WaitForManager"]["Parameters"]["Payload"]["waiting_for"] == "agent"
    assert states["WaitForManager"]["Next"] == "AssignAgent"
    assert states["WaitForManager"]["Catch"][0]["Next"] == "NoManagerTookOver"
    assert states["NoManagerTookOver"]["Next"] == "HandoffFailed"
    assert states["UpdateDynamoDB"]["Catch"][0]["ErrorEquals"] == ["ConditionalCheckFailed"]
    assert [b["StartAt"] for b in states["NotifyParties"]["Branches"]] == ["NotifyCustomer", "NotifyAgent"]
    assert states["NotifyCustomer"]["Resource"] == "arn:aws:states:::sqs:sendMessage"
    assert states["NotifyCustomer"]["Parameters"]["MessageBody"]["event_type"] == "handoff_started"
    assert states["MonitorHandoff"]["Resource"] == "arn:aws:states:::lambda:invoke.waitForTaskToken"
    assert _catches_to(states["MonitorHandoff"]) == {"ReassignAgent", "HandoffFailed"}
    assert states["MonitorHandoff"]["Next"] == "FirstReplyOrClose"
    assert states["FirstReplyOrClose"]["Choices"][0]["Next"] == "HandoffComplete"
    assert states["FirstReplyOrClose"]["Default"] == "StartWatchingAgent"
    assert states["StartWatchingAgent"]["Parameters"] == {"version.$": "$.first_reply.version"}
    # After the first reply every message restarts the idle limit; the close ends the execution
    assert states["StartWatchingAgent"]["Next"] == "WatchAgent"
    assert states["WatchAgent"]["Resource"] == "arn:aws:states:::lambda:invoke.waitForTaskToken"
    assert states["WatchAgent"]["Next"] == "MessageOrClose"
    assert [c["Next"] for c in states["WatchAgent"]["Catch"]] == ["FindReplacementAgent", "HandoffFailed"]
    assert states["WatchAgent"]["Catch"][0]["ErrorEquals"] == ["States.Timeout", "States.HeartbeatTimeout"]
    assert states["MessageOrClose"]["Choices"][0]["Next"] == "HandoffComplete"
    assert states["MessageOrClose"]["Default"] == "WatchAgent"
    # A silent agent: a replacement is reserved first, then the silent agent is let go unless it wrote
    assert states["FindReplacementAgent"]["Next"] == "ReplaceIdleAgent"
    assert states["FindReplacementAgent"]["ResultPath"] == "$.replacement"
    assert states["ReplaceIdleAgent"]["Parameters"]["expected_version.$"] == "$.activity.version"
    assert states["ReplaceIdleAgent"]["Next"] == "IdleAgentReplaced"
    assert [c["Next"] for c in states["IdleAgentReplaced"]["Choices"]] == [
        "HandoffComplete",
        "AgentWroteMeanwhile",
        "HandToReplacement",
    ]
    assert states["IdleAgentReplaced"]["Default"] == "NoAgentToTakeOver"
    assert states["AgentWroteMeanwhile"]["Next"] == "WatchAgent"
    assert states["HandToReplacement"]["Next"] == "AssignAgent"
    assert states["NoAgentToTakeOver"]["Parameters"]["Error"] == "NoAgentToTakeOver"
    assert states["NoAgentToTakeOver"]["Next"] == "HandoffFailed"
    # A handoff closed while its agent was idle ends here, one whose first reply was counted as the
    # limit fired stays with its agent (the re-queue is conditioned on no activity); otherwise the
    # next agent is sought. Both waits and the re-queue carry the activity version they expect.
    assert states["MonitorHandoff"]["Parameters"]["Payload"]["expected_version"] == 0
    assert states["WatchAgent"]["Parameters"]["Payload"]["expected_version.$"] == "$.activity.version"
    assert states["ReassignAgent"]["Parameters"]["expected_version"] == 0
    assert states["ReassignAgent"]["Next"] == "HandoffClosedMeanwhile"
    assert [c["Next"] for c in states["HandoffClosedMeanwhile"]["Choices"]] == [
        "HandoffComplete",
        "AgentRepliedMeanwhile",
    ]
    assert states["AgentRepliedMeanwhile"]["Parameters"] == {"version.$": "$.reassignment.version"}
    assert states["AgentRepliedMeanwhile"]["Next"] == "WatchAgent"
    assert states["HandoffClosedMeanwhile"]["Default"] == "CheckAgentAvailability"
    assert states["HandoffFailed"]["Next"] == "NotifyCustomerHandoffFailed"
    assert states["HandoffAborted"] == {"Type": "Fail", "Error": "HandoffFailed", "CausePath": "$.failure.reason"}


def test_timeouts_come_from_the_stage_config(any_stage: SynthesizedStage) -> None:
    config = any_stage.stage.config
    machines = _machines(any_stage)
    handoff = _states(machines["Handoff"]["definition"])
    assert handoff["WaitForAgent"]["TimeoutSeconds"] == config.handoff_agent_wait_seconds
    assert handoff["WaitForManager"]["TimeoutSeconds"] == config.handoff_manager_wait_seconds
    assert handoff["MonitorHandoff"]["TimeoutSeconds"] == config.handoff_idle_seconds
    assert handoff["WatchAgent"]["TimeoutSeconds"] == config.handoff_reply_idle_seconds
    assert machines["Handoff"]["definition"]["TimeoutSeconds"] == config.workflow_timeout_minutes * 60
    assert machines["Cleanup"]["definition"]["TimeoutSeconds"] == config.workflow_timeout_minutes * 60
    export = _states(machines["Export"]["definition"])
    assert export["WaitForExport"]["Seconds"] == config.export_poll_seconds
    limit = [c for c in export["ExportFinished"]["Choices"] if c.get("Next") == "ExportTimedOut"]
    assert limit[0]["NumericGreaterThanEquals"] == config.export_max_polls


def test_every_task_retries_transient_errors_with_full_jitter_and_has_a_failure_path(
    any_stage: SynthesizedStage,
) -> None:
    for name, machine in _machines(any_stage).items():
        states = _states(machine["definition"])
        top_level = set(machine["definition"]["States"])
        parallel_or_map = {n for n, s in states.items() if s["Type"] in ("Parallel", "Map")}
        for state_name, state in states.items():
            if state["Type"] != "Task" or state_name == "ExportApprovalRequestReview":
                continue  # the approval gate (another construct) has its own policy
            retry = state.get("Retry", [])
            assert any(
                r.get("JitterStrategy") == "FULL"
                and r["BackoffRate"] == 2
                and "Lambda.ServiceException" in r["ErrorEquals"]
                for r in retry
            ), f"{name}.{state_name} lacks the transient retry"
            in_nested = state_name not in top_level
            assert state.get("Catch") or (in_nested and parallel_or_map), f"{name}.{state_name} has no Catch"
        for nested in parallel_or_map:
            assert states[nested].get("Catch") or nested == "CleanPage", f"{name}.{nested} has no Catch"


def test_cleanup_queries_the_index_directly_and_maps_with_the_configured_concurrency(
    any_stage: SynthesizedStage,
) -> None:
    states = _states(_machines(any_stage)["Cleanup"]["definition"])
    assert states["QueryFirstPage"]["Resource"] == "arn:aws:states:::aws-sdk:dynamodb:query"
    assert states["QueryFirstPage"]["Parameters"]["IndexName"] == "CleanupIndex"
    assert states["QueryFirstPage"]["Parameters"]["KeyConditionExpression"] == "#shard = :shard AND #since < :cutoff"
    assert states["QueryNextPage"]["Parameters"]["ExclusiveStartKey.$"] == "$.page.LastEvaluatedKey"
    assert states["MorePages"]["Choices"][0] == {
        "Variable": "$.page.LastEvaluatedKey",
        "IsPresent": True,
        "Next": "QueryNextPage",
    }
    assert states["CleanPage"]["MaxConcurrency"] == any_stage.stage.config.map_max_concurrency
    assert states["SweepShards"]["MaxConcurrency"] == 1  # pages of one shard at a time: the bound holds overall
    assert states["CleanSession"]["Catch"][0]["Next"] == "SessionCleanupFailed"


def test_export_uses_native_export_with_kms_into_the_exports_prefix(dev: SynthesizedStage) -> None:
    states = _states(_machines(dev)["Export"]["definition"])
    start = states["StartExport"]
    assert start["Resource"] == "arn:aws:states:::aws-sdk:dynamodb:exportTableToPointInTime"
    assert start["Parameters"]["S3SseAlgorithm"] == "KMS"
    assert start["Parameters"]["S3Prefix.$"] == "States.Format('exports/{}', $$.Execution.Name)"
    assert states["DescribeExport"]["Resource"] == "arn:aws:states:::aws-sdk:dynamodb:describeExport"
    assert states["ExportFailed"]["Type"] == "Fail"
    assert "CausePath" in states["ExportFailed"]
    # the risk is scored first; rejection ends in its own Fail after telling the requester
    assert _machines(dev)["Export"]["definition"]["StartAt"] == "DescribeTable"
    assert states["NotifyRejected"]["Next"] == "ExportRejected"


def test_export_asks_a_person_from_the_stages_score_and_records_an_automatic_approval_otherwise(
    any_stage: SynthesizedStage,
) -> None:
    states = _states(_machines(any_stage)["Export"]["definition"])
    threshold = {"dev": 2, "prod": 0}[any_stage.stage.config.name]
    # the facts come from direct SDK calls: the table's counts, and one item of the customer index
    assert states["DescribeTable"]["Resource"] == "arn:aws:states:::aws-sdk:dynamodb:describeTable"
    scan = states["ScanCustomerIndex"]
    assert scan["Resource"] == "arn:aws:states:::aws-sdk:dynamodb:scan"
    assert (scan["Parameters"]["IndexName"], scan["Parameters"]["Limit"], scan["Parameters"]["Select"]) == (
        "GSI1",
        1,
        "COUNT",
    )
    assert states["ScanCustomerIndex"]["Next"] == "AssessRisk"
    # a score at or above the stage's threshold waits for the gate; below, the decision is recorded
    (rule,) = states["NeedsReview"]["Choices"]
    assert rule == {
        "Variable": "$.risk.score",
        "NumericGreaterThanEquals": threshold,
        "Next": "ExportApprovalRequestReview",
    }
    assert states["NeedsReview"]["Default"] == "RecordAutomaticApproval"
    record = states["RecordAutomaticApproval"]
    assert record["Resource"] == "arn:aws:states:::dynamodb:putItem"
    item = record["Parameters"]["Item"]
    assert item["PK"] == {"S.$": "States.Format('REVIEW#export-{}', $$.Execution.Name)"}
    assert (item["status"], item["decided_by"]) == ({"S": "approved"}, {"S": "automatic"})
    assert item["decision_reason"] == {"S.$": "$.risk.reason"}
    assert item["review_threshold"] == {"N": str(threshold)}
    assert record["Next"] == "StartExport"


def test_logging_tracing_and_alarms_per_stage(any_stage: SynthesizedStage) -> None:
    template = any_stage.template("Orchestration")
    config = any_stage.stage.config
    template.resource_properties_count_is(
        "AWS::StepFunctions::StateMachine",
        {
            "StateMachineType": "STANDARD",
            "TracingConfiguration": {"Enabled": True},
            "LoggingConfiguration": Match.object_like(
                {"Level": "ALL", "IncludeExecutionData": config.log_execution_data}
            ),
        },
        4,  # handoff, cleanup, export, erasure
    )
    template.resource_properties_count_is(
        "AWS::Logs::LogGroup",
        {"RetentionInDays": config.log_retention_days, "KmsKeyId": Match.any_value()},
        len(template.find_resources("AWS::Logs::LogGroup")),
    )
    for metric in ("ExecutionsFailed", "ExecutionsTimedOut"):
        template.resource_properties_count_is(
            "AWS::CloudWatch::Alarm", {"MetricName": metric, "Namespace": "AWS/States", "Threshold": 1}, 4
        )


def test_triggers_hourly_schedule_and_session_ended_rule_with_dlq_and_retries(any_stage: SynthesizedStage) -> None:
    template = any_stage.template("Orchestration")
    target = Match.object_like(
        {
            "DeadLetterConfig": Match.any_value(),
            "RetryPolicy": {"MaximumRetryAttempts": 4, "MaximumEventAgeInSeconds": 7200},
        }
    )
    template.has_resource_properties("AWS::Events::Rule", {"ScheduleExpression": "rate(1 hour)", "Targets": [target]})
    template.has_resource_properties(
        "AWS::Events::Rule",
        {
            "EventBusName": Match.any_value(),
            "EventPattern": {
                "source": ["mangaassist.sessions"],
                "detail-type": ["SessionStatusChanged"],
                "detail": {"new_status": ["disconnected"]},
            },
            "Targets": [target],
        },
    )


def test_assignment_queue_is_encrypted_ssl_only_and_dead_lettered(any_stage: SynthesizedStage) -> None:
    template = any_stage.template("Orchestration")
    template.has_resource_properties(
        "AWS::SQS::Queue",
        {"KmsMasterKeyId": Match.any_value(), "RedrivePolicy": Match.object_like({"maxReceiveCount": 5})},
    )
    template.has_resource_properties(
        "AWS::SQS::QueuePolicy",
        {
            "PolicyDocument": Match.object_like(
                {
                    "Statement": Match.array_with(
                        [Match.object_like({"Effect": "Deny", "Condition": {"Bool": {"aws:SecureTransport": "false"}}})]
                    )
                }
            )
        },
    )


def test_roles_hold_no_wildcard_actions_and_the_index_query_is_scoped(any_stage: SynthesizedStage) -> None:
    resources = any_stage.templates["Orchestration"]["Resources"]
    for lid, res in resources.items():
        if res["Type"] != "AWS::IAM::Policy":
            continue
        for statement in res["Properties"]["PolicyDocument"]["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            assert "*" not in actions, lid
            assert not any(a.endswith(":*") for a in actions), (lid, actions)
            if actions == ["dynamodb:Query"]:  # one index's Query, never the table's
                index = json.dumps(statement["Resource"])
                assert index.endswith(('"/index/CleanupIndex"]]}', '"/index/GSI1"]]}')), lid


def test_no_raw_asl_anywhere() -> None:
    workflows = [*ROOT.joinpath("stacks", "workflows").glob("*.py"), ROOT / "stacks" / "orchestration_stack.py"]
    assert len(workflows) > 4
    for path in workflows:
        text = path.read_text()
        assert "DefinitionBody.from_string" not in text, path
        assert "DefinitionBody.from_file" not in text, path
        assert "definition_string" not in text, path
    defaults = (ROOT / "constructs_lib" / "workflow_defaults.py").read_text()
    assert "definition_body=sfn.DefinitionBody.from_chainable(definition)" in defaults


def test_fails_on_both_existing_topic_and_topic_props() -> None:
    from aws_cdk import App, Stack
    from aws_cdk import aws_dynamodb as dynamodb
    from aws_cdk import aws_kms as kms
    from aws_cdk import aws_s3 as s3
    from aws_cdk import aws_sns as sns

    app = App()
    stack = Stack(app, "T")
    table = dynamodb.Table(stack, "T", partition_key=dynamodb.Attribute(name="PK", type=dynamodb.AttributeType.STRING))
    options = WorkflowOptions(encryption_key=kms.Key(stack, "K"))
    ExportWorkflow(
        stack,
        "E",
        table=table,
        bucket=s3.Bucket(stack, "B"),
        options=options,
        existing_topic=sns.Topic(stack, "Topic"),
        topic_props=sns.TopicProps(display_name="x"),
    )
    CleanupWorkflow(
        stack,
        "C",
        table=table,
        index_name="I",
        shard_attribute="s",
        eligible_since_attribute="c",
        plan=_fn(stack, "P"),
        worker=_fn(stack, "W"),
        tally=_fn(stack, "X"),
        options=options,
        max_concurrency=0,
    )

    with pytest.raises(RuntimeError) as raised:
        app.synth()

    assert re.search(r"\[T/E\] give existing_topic or topic_props", str(raised.value))
    assert re.search(r"\[T/C\] max_concurrency must be 1\.\.40 \(given 0\)", str(raised.value))


def test_fails_on_a_retry_policy_without_errors() -> None:
    # Given a policy that retries nothing, applied to a task
    app = App()
    stack = Stack(app, "T")
    RetryPolicy(errors=()).apply(sfn.Pass(stack, "Step"))  # type: ignore[arg-type]

    # Then the synthesis fails with the task's path and the fix
    with pytest.raises(RuntimeError, match=r"\[T/Step\] retry errors must name at least one error"):
        app.synth()
    assert RetryPolicy().interval.to_seconds() == Duration.seconds(1).to_seconds()
    assert RetryPolicy().problems() == []


def _fn(stack: Any, name: str) -> Any:
    from aws_cdk import aws_lambda as lambda_

    return lambda_.Function(
        stack,
        name,
        runtime=lambda_.Runtime.PYTHON_3_12,
        handler="x.h",
        code=lambda_.Code.from_inline("def h(e, c): pass"),
    )


def test_fails_on_both_existing_assignment_queue_and_its_props() -> None:
    from aws_cdk import App, Stack
    from aws_cdk import aws_dynamodb as dynamodb
    from aws_cdk import aws_kms as kms
    from aws_cdk import aws_sns as sns
    from aws_cdk import aws_sqs as sqs
    from aws_cdk import aws_stepfunctions_tasks as tasks

    from stacks.workflows import HandoffFunctions, HandoffWorkflow

    app = App()
    stack = Stack(app, "H")
    table = dynamodb.Table(stack, "T", partition_key=dynamodb.Attribute(name="PK", type=dynamodb.AttributeType.STRING))
    functions = HandoffFunctions(*[_fn(stack, f"F{n}") for n in range(7)])
    HandoffWorkflow(
        stack,
        "Handoff",
        table=table,
        session_key={"PK": tasks.DynamoAttributeValue.from_string("x")},
        functions=functions,
        customer_notification_queue=sqs.Queue(stack, "Customer"),
        agent_notification_topic=sns.Topic(stack, "Agents"),
        options=WorkflowOptions(encryption_key=kms.Key(stack, "K")),
        existing_assignment_queue=sqs.Queue(stack, "Mine"),
        assignment_queue_props=sqs.QueueProps(visibility_timeout=Duration.seconds(60)),
    )

    with pytest.raises(RuntimeError, match=r"\[H/Handoff\] give existing_assignment_queue or assignment_queue_props"):
        app.synth()


def test_direct_table_reads_may_decrypt_with_the_table_key(dev: SynthesizedStage) -> None:
    resources = dev.templates["Orchestration"]["Resources"]
    for machine in ("Handoff", "Cleanup", "Export"):
        policies = [
            res
            for lid, res in resources.items()
            if res["Type"] == "AWS::IAM::Policy" and re.match(rf"^{machine}RoleDefaultPolicy[0-9A-F]{{8}}$", lid)
        ]
        statements = [s for p in policies for s in p["Properties"]["PolicyDocument"]["Statement"]]
        table_key = [
            s
            for s in statements
            if "kms:Decrypt" in json.dumps(s["Action"])
            and "DataKey" in json.dumps(s["Resource"])
            and "-Storage" in json.dumps(s["Resource"])
        ]
        assert table_key, f"{machine} may not decrypt the sessions table's key"


def test_cleanup_sweeps_through_distributed_maps_and_runs_one_session_on_request(any_stage: SynthesizedStage) -> None:
    definition = _machines(any_stage)["Cleanup"]["definition"]
    states = _states(definition)
    assert definition["States"]["PlanCleanup"]["Next"] == "OneSession"
    assert states["OneSession"]["Choices"][0] == {
        "Variable": "$.session_id",
        "IsPresent": True,
        "Next": "CleanOneSession",
    }
    assert states["OneSession"]["Default"] == "SweepShards"
    assert states["CleanOneSession"]["Parameters"]["eligible_before.$"] == "$.plan.cutoff"
    for name in ("SweepShards", "CleanPage"):  # children keep their events out of the parent's history
        assert states[name]["ItemProcessor"]["ProcessorConfig"] == {"Mode": "DISTRIBUTED", "ExecutionType": "STANDARD"}
    assert set(states["CleanSession"]["ResultSelector"]) == {"session_id.$", "archived.$", "items_deleted.$"}


def test_session_ended_schedules_that_sessions_cleanup_through_its_own_group_and_role(
    any_stage: SynthesizedStage,
) -> None:
    template = any_stage.template("Orchestration")
    resources = any_stage.templates["Orchestration"]["Resources"]
    (rule,) = [
        r
        for lid, r in resources.items()
        if lid.startswith("CleanupTriggersSessionEnded") and r["Type"] == "AWS::Events::Rule"
    ]
    (target,) = rule["Properties"]["Targets"]
    scheduler_fn = target["Arn"]["Fn::GetAtt"][0]
    assert resources[scheduler_fn]["Properties"]["Handler"] == "lambdas.orchestration.cleanup_worker.schedule"
    assert target["InputPath"] == "$.detail"
    assert target["RetryPolicy"] == {"MaximumRetryAttempts": 4, "MaximumEventAgeInSeconds": 7200}
    assert "DeadLetterConfig" in target
    template.resource_count_is("AWS::Scheduler::ScheduleGroup", 1)
    template.has_resource_properties(
        "AWS::IAM::Role",
        {
            "AssumeRolePolicyDocument": Match.object_like(
                {
                    "Statement": [
                        Match.object_like(
                            {
                                "Principal": {"Service": "scheduler.amazonaws.com"},
                                "Condition": {"StringEquals": {"aws:SourceAccount": Match.any_value()}},
                            }
                        )
                    ]
                }
            )
        },
    )
    variables = resources[scheduler_fn]["Properties"]["Environment"]["Variables"]
    assert {
        "CLEANUP_SCHEDULE_GROUP",
        "CLEANUP_STATE_MACHINE_ARN",
        "CLEANUP_SCHEDULER_ROLE_ARN",
        "CLEANUP_DEAD_LETTER_QUEUE_ARN",
    } <= set(variables)


def test_the_watch_function_may_end_only_its_own_workflows_waits(dev: SynthesizedStage) -> None:
    # WatchAgent's function completes its own token when the handoff closed before the wait began
    resources = dev.templates["Orchestration"]["Resources"]
    machine = next(
        lid
        for lid, r in resources.items()
        if r["Type"] == "AWS::StepFunctions::StateMachine" and lid.startswith("Handoff")
    )
    policy = next(r for lid, r in resources.items() if lid.startswith("AwaitAgentReplyEndsItsWait"))
    (statement,) = policy["Properties"]["PolicyDocument"]["Statement"]
    assert (statement["Action"], statement["Resource"]) == ("states:SendTaskSuccess", {"Ref": machine})
    (role,) = policy["Properties"]["Roles"]
    assert "AwaitAgentReply" in role["Ref"]
