"""EventsStack templates (dev and prod): stream mapping, async failure paths, fan-out filters, rules,
archive, encryption, grants; the template's SNS filter policies exercised on moto's delivery; and
the constructs' fail-fast validation."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from aws_cdk import App, Duration, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sqs as sqs
from aws_cdk.assertions import Match, Template
from moto import mock_aws

from constructs_lib import FanoutTopic, S3DeliveryStream, SecureEventBus, SecureQueue, StreamConsumer
from embedded.events import StreamRecords
from embedded.synth import SynthesizedStage
from lambdas.events import routing
from lambdas.events.delivery import Backoff, Entry, TopicWriter
from lambdas.shared.records import Handoff, HandoffStatus
from stacks.config import foundation_model_of
from stacks.events_stack import ROUTED_SORT_KEYS


def resources(stage: SynthesizedStage, type_: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in stage.templates["Events"]["Resources"].items() if v["Type"] == type_}


def only(stage: SynthesizedStage, type_: str, id_part: str) -> tuple[str, dict[str, Any]]:
    (found,) = [(k, v) for k, v in resources(stage, type_).items() if id_part in k]
    return found


def function_id(stage: SynthesizedStage, name: str) -> str:
    return only(stage, "AWS::Lambda::Function", name)[0]


# -- stream router mapping --------------------------------------------------------------------


def test_stream_mapping_is_bounded_partial_bisecting_and_filtered(any_stage: SynthesizedStage) -> None:
    config = any_stage.stage.config
    _, mapping = only(any_stage, "AWS::Lambda::EventSourceMapping", "StreamRouter")
    props = mapping["Properties"]
    assert props["BatchSize"] == config.capacity.limits.stream_batch_size
    assert props["MaximumBatchingWindowInSeconds"] == config.capacity.limits.stream_batching_window_seconds
    assert props["ParallelizationFactor"] == config.capacity.limits.stream_parallelization_factor
    assert props["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert props["BisectBatchOnFunctionError"] is True
    assert props["MaximumRetryAttempts"] == config.stream_max_retries
    assert props["MaximumRecordAgeInSeconds"] == config.stream_max_record_age_seconds < 86400
    assert props["StartingPosition"] == "TRIM_HORIZON"
    (dlq_id,) = [props["DestinationConfig"]["OnFailure"]["Destination"]["Fn::GetAtt"][0]]
    assert "KmsMasterKeyId" in resources(any_stage, "AWS::SQS::Queue")[dlq_id]["Properties"]
    (criteria,) = props["FilterCriteria"]["Filters"]
    assert json.loads(criteria["Pattern"]) == {"dynamodb": {"Keys": {"SK": {"S": ROUTED_SORT_KEYS}}}}


def test_stream_consumer_alarms_on_iterator_age_and_on_its_dlq(any_stage: SynthesizedStage) -> None:
    alarms = resources(any_stage, "AWS::CloudWatch::Alarm")
    (age,) = [a["Properties"] for k, a in alarms.items() if "IteratorAge" in k]
    assert (age["MetricName"], age["Threshold"], age["Statistic"]) == ("IteratorAge", 60000, "Maximum")
    assert age["Dimensions"] == [{"Name": "FunctionName", "Value": {"Ref": function_id(any_stage, "StreamRouter")}}]
    (dlq,) = [a["Properties"] for k, a in alarms.items() if "StreamRouterSourceDeadLetter" in k]
    assert (dlq["MetricName"], dlq["Threshold"]) == ("ApproximateNumberOfMessagesVisible", 0)


def test_router_reaches_every_target_through_grants(dev: SynthesizedStage) -> None:
    router_role = dev.templates["Events"]["Resources"][function_id(dev, "StreamRouter")]["Properties"]["Role"]
    (policy,) = [
        p["Properties"]
        for logical_id, p in resources(dev, "AWS::IAM::Policy").items()
        if p["Properties"]["Roles"] == [{"Ref": router_role["Fn::GetAtt"][0]}] and "DefaultPolicy" in logical_id
    ]
    by_action: dict[str, list[Any]] = {}
    for statement in policy["PolicyDocument"]["Statement"]:
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        found = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        for action in actions:
            by_action.setdefault(action, []).extend(found)
    analytics_id, _ = only(dev, "AWS::KinesisFirehose::DeliveryStream", "AnalyticsDeliveryStream")
    audit_id, _ = only(dev, "AWS::KinesisFirehose::DeliveryStream", "AuditDeliveryStream")
    bus_id, _ = only(dev, "AWS::Events::EventBus", "SessionEvents")
    topic_id, _ = only(dev, "AWS::SNS::Topic", "HandoffTopic")
    streams = [{"Fn::GetAtt": [analytics_id, "Arn"]}, {"Fn::GetAtt": [audit_id, "Arn"]}]
    assert sorted(map(json.dumps, by_action["firehose:PutRecordBatch"])) == sorted(map(json.dumps, streams))
    assert by_action["events:PutEvents"] == [{"Fn::GetAtt": [bus_id, "Arn"]}]
    assert by_action["sns:Publish"] == [{"Ref": topic_id}]
    assert {"Fn::GetAtt": [function_id(dev, "SummaryGenerator"), "Arn"]} in by_action["lambda:InvokeFunction"]
    # The audit trail goes through its delivery stream only: the router cannot touch S3
    assert not [a for a in by_action if a.startswith("s3:")]
    # Nothing broader: no wildcard resource except ListStreams (no resource-level permission)
    assert [a for a, r in by_action.items() if "*" in r] == ["dynamodb:ListStreams"]


def test_summary_generator_may_invoke_only_the_configured_model_and_its_fallback(dev: SynthesizedStage) -> None:
    model = dev.stage.config.bedrock_model_id
    fallback = dev.stage.config.model_resilience.fallback_model_id
    assert model is not None
    assert fallback is not None
    partition = {"Ref": "AWS::Partition"}

    def profile(model_id: str) -> dict[str, Any]:
        return {
            "Fn::Join": [
                "",
                ["arn:", partition, ":bedrock:", {"Ref": "AWS::Region"}, ":", {"Ref": "AWS::AccountId"},
                 f":inference-profile/{model_id}"],
            ]
        }  # fmt: skip

    def every_region(model_id: str) -> dict[str, Any]:
        return {"Fn::Join": ["", ["arn:", partition, f":bedrock:*::foundation-model/{foundation_model_of(model_id)}"]]}

    statements = [
        statement
        for policy in dev.template("Events").find_resources("AWS::IAM::Policy").values()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if "bedrock" in json.dumps(statement["Action"])
    ]
    # The stage's guardrail, which screens the summaries as it screens the replies
    guardrail = [s for s in statements if s["Action"] == "bedrock:ApplyGuardrail"]
    assert len(guardrail) == 1
    assert "GuardrailArn" in json.dumps(guardrail[0]["Resource"])
    # Converse only; dev names cross-region inference profiles: each profile, and its model in every
    # region the profile may route to, for the model and for its fallback
    models = [s for s in statements if s not in guardrail]
    assert {json.dumps(s["Action"]) for s in models} == {'"bedrock:InvokeModel"'}
    granted = sorted(json.dumps(r) for s in models for r in s["Resource"])
    expected = [profile(model), every_region(model), profile(fallback), every_region(fallback)]
    assert granted == sorted(json.dumps(r) for r in expected)


# -- asynchronous paths have DLQs -------------------------------------------------------------


@pytest.mark.parametrize("name", ["SummaryGenerator", "SessionMetrics"])
def test_async_invoked_functions_have_an_on_failure_queue(any_stage: SynthesizedStage, name: str) -> None:
    fn = function_id(any_stage, name)
    (config,) = [
        c["Properties"]
        for c in resources(any_stage, "AWS::Lambda::EventInvokeConfig").values()
        if c["Properties"]["FunctionName"] == {"Ref": fn}
    ]
    assert config["MaximumRetryAttempts"] == 2
    destination = config["DestinationConfig"]["OnFailure"]["Destination"]["Fn::GetAtt"][0]
    assert destination in resources(any_stage, "AWS::SQS::Queue")


def test_every_queue_is_encrypted_ssl_only_and_work_queues_redrive_after_3(any_stage: SynthesizedStage) -> None:
    queues = resources(any_stage, "AWS::SQS::Queue")
    ssl_only = {
        ref["Ref"]
        for policy in resources(any_stage, "AWS::SQS::QueuePolicy").values()
        if any(
            s.get("Condition", {}).get("Bool", {}).get("aws:SecureTransport") == "false"
            for s in policy["Properties"]["PolicyDocument"]["Statement"]
        )
        for ref in policy["Properties"]["Queues"]
    }
    assert set(queues) <= ssl_only
    for logical_id, queue in queues.items():
        assert "KmsMasterKeyId" in queue["Properties"], logical_id
        redrive = queue["Properties"].get("RedrivePolicy")
        if redrive is not None:
            assert redrive["maxReceiveCount"] == 3, logical_id
    work = [q for q in queues if "DeadLetterQueue" not in q]
    assert work
    assert all("RedrivePolicy" in queues[q]["Properties"] for q in work)


def test_queue_visibility_is_at_least_six_times_the_consumer_timeout(any_stage: SynthesizedStage) -> None:
    functions = resources(any_stage, "AWS::Lambda::Function")
    queues = resources(any_stage, "AWS::SQS::Queue")
    mappings = [
        m["Properties"]
        for m in resources(any_stage, "AWS::Lambda::EventSourceMapping").values()
        if "StartingPosition" not in m["Properties"]
    ]
    assert len(mappings) == 2  # dashboard and escalation; the customer notifier is in ApiStack
    for mapping in mappings:
        queue = queues[mapping["EventSourceArn"]["Fn::GetAtt"][0]]["Properties"]
        timeout = functions[mapping["FunctionName"]["Ref"]]["Properties"]["Timeout"]
        assert queue["VisibilityTimeout"] >= 6 * timeout
    _, customer = only(any_stage, "AWS::SQS::Queue", "CustomerNotificationQueue6")
    assert (
        customer["Properties"]["VisibilityTimeout"] >= 6 * any_stage.stage.events.customer_notifier_timeout.to_seconds()
    )


# -- fan-out ----------------------------------------------------------------------------------


def handoff_subscriptions(stage: SynthesizedStage) -> dict[str, dict[str, Any]]:
    """Subscriptions of the handoff topic by the queue they feed (queue construct id)."""
    topic_id, _ = only(stage, "AWS::SNS::Topic", "HandoffTopic")
    found = {}
    for sub in resources(stage, "AWS::SNS::Subscription").values():
        props = sub["Properties"]
        if props["TopicArn"] == {"Ref": topic_id}:
            queue = props["Endpoint"]["Fn::GetAtt"][0]
            found[queue] = props
    return found


def test_filter_policies_select_each_consumers_messages(any_stage: SynthesizedStage) -> None:
    """The three handoff queues' filters, and where they part from the specification's table.

    The specification filters the agent dashboard on "agent_id exists", the customer queue on "all
    handoffs" and the escalation queue on ``reason = 'escalated'``. Here the customer queue takes
    only the router's changes the workflow does not announce itself (a customer told of every
    handoff record would hear "an agent was assigned" twice and the agent-only context once), and
    escalation is matched on ``event_type``: ``escalated`` is a handoff's status, never a reason a
    caller may give (``contracts.messages.REASON_ESCALATED``), so a reason filter would match nothing.
    """
    subs = {
        next(name for name in ("AgentDashboard", "CustomerNotification", "Escalation") if name in queue): props
        for queue, props in handoff_subscriptions(any_stage).items()
    }
    # The seed's "agent_id exists", or the broadcast that a customer waits for any agent
    assert subs["AgentDashboard"]["FilterPolicy"] == {
        "$or": [{"agent_id": [{"exists": True}]}, {"event_type": ["handoff_waiting"]}]
    }
    assert subs["AgentDashboard"]["FilterPolicyScope"] == "MessageAttributes"
    # The router's handoff changes the customer is told of (the workflow tells started and failed
    # itself); agent-only messages never reach customers
    assert subs["CustomerNotification"]["FilterPolicy"] == {"event_type": ["queued", "escalated", "completed"]}
    assert subs["CustomerNotification"]["RawMessageDelivery"] is True
    # The escalation branch hears the router's event for a handoff that became escalated
    assert subs["Escalation"]["FilterPolicy"] == {"event_type": ["escalated"]}
    assert all("RedrivePolicy" in s for s in subs.values())


def test_topics_are_encrypted_and_ssl_only(any_stage: SynthesizedStage) -> None:
    topics = resources(any_stage, "AWS::SNS::Topic")
    assert len(topics) == 2  # handoffs, managers
    assert all("KmsMasterKeyId" in t["Properties"] for t in topics.values())
    secured = {
        ref["Ref"]
        for p in resources(any_stage, "AWS::SNS::TopicPolicy").values()
        if any(
            s.get("Condition", {}).get("Bool", {}).get("aws:SecureTransport") == "false"
            for s in p["Properties"]["PolicyDocument"]["Statement"]
        )
        for ref in p["Properties"]["Topics"]
    }
    assert set(topics) <= secured


def _stream_handoff(
    records: StreamRecords, name: str, old: HandoffStatus | None, new: HandoffStatus, **attrs: Any
) -> dict[str, Any]:
    """The router's message for one HANDOFF# change (``old`` None: the record's creation)."""

    def item(status: HandoffStatus, **extra: Any) -> dict[str, Any]:
        return {**Handoff("s-1", f"h-{name}", "billing", "normal", status, 1, 1, 2).to_item(), **extra}

    record = records.insert(item(new, **attrs)) if old is None else records.modify(item(old), item(new, **attrs))
    from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecord

    actions = routing.classify(DynamoDBRecord(record), summary_interval=10, bus_name="bus")
    assert actions.handoff is not None
    return actions.handoff


def test_the_templates_filter_policies_route_the_routers_messages_on_moto(dev: SynthesizedStage) -> None:
    # Given the handoff topic and its three queues on moto, subscribed with the template's policies
    subscriptions = handoff_subscriptions(dev)
    with mock_aws():
        sns = boto3.client("sns", region_name="us-east-1")
        sqs = boto3.client("sqs", region_name="us-east-1")
        topic = sns.create_topic(Name="handoffs")["TopicArn"]
        urls = {}
        for queue_id, props in subscriptions.items():
            name = next(n for n in ("AgentDashboard", "CustomerNotification", "Escalation") if n in queue_id)
            urls[name] = sqs.create_queue(QueueName=name)["QueueUrl"]
            arn = sqs.get_queue_attributes(QueueUrl=urls[name], AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
            attributes = {"RawMessageDelivery": str(props.get("RawMessageDelivery", False)).lower()}
            if "FilterPolicy" in props:
                attributes["FilterPolicy"] = json.dumps(props["FilterPolicy"])
            sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn, Attributes=attributes)
        # When the router publishes one message for each kind of handoff change
        records = StreamRecords()
        queued, escalated = HandoffStatus.QUEUED, HandoffStatus.ESCALATED
        assigned, completed = HandoffStatus.ASSIGNED, HandoffStatus.COMPLETED
        messages = {
            "created": _stream_handoff(records, "created", None, assigned, agent_id="a-4"),
            "queued": _stream_handoff(records, "queued", None, queued),
            "escalated": _stream_handoff(records, "escalated", queued, escalated),
            "assigned": _stream_handoff(records, "assigned", queued, assigned, agent_id="a-1"),
            "manager-assigned": _stream_handoff(records, "manager-assigned", escalated, assigned, agent_id="a-2"),
            "completed": _stream_handoff(records, "completed", assigned, completed, agent_id="a-1", outcome="active"),
        }
        writer = TopicWriter(sns, topic, Backoff(sleep=lambda _: None))
        assert writer.write([Entry(name, message, 0) for name, message in messages.items()]) == set()

        def received(queue: str) -> set[str]:
            got = sqs.receive_message(QueueUrl=urls[queue], MaxNumberOfMessages=10).get("Messages", [])
            return {json.loads(m["Body"])["handoff_id"] for m in got}

        def ids(*names: str) -> set[str]:
            return {json.loads(messages[n]["Message"])["handoff_id"] for n in names}

        # And the handoff workflow publishes its agent-only messages (attributes as it sends them)
        agent_only = {
            "handoff_waiting": {"event_type": "handoff_waiting", "reason": "billing"},
            "handoff_assigned": {"event_type": "handoff_assigned", "agent_id": "a-3", "reason": "billing"},
            "handoff_context": {"event_type": "handoff_context", "agent_id": "a-3"},
        }
        for event_type, attributes in agent_only.items():
            sns.publish(
                TopicArn=topic,
                Message=json.dumps({"handoff_id": event_type, "session_id": "s-1", "event_type": event_type}),
                MessageAttributes={k: {"DataType": "String", "StringValue": v} for k, v in attributes.items()},
            )

        # Then each queue got exactly what the seed's table says, and no agent-only message
        # reached the customer (whose notices the workflow sends straight to the queue)
        customer, dashboard, escalation = (
            received("CustomerNotification"),
            received("AgentDashboard"),
            received("Escalation"),
        )
        assert customer == ids("queued", "escalated", "completed")
        assert dashboard == ids("created", "assigned", "manager-assigned", "completed") | set(agent_only)
        assert escalation == ids("escalated")
        # And every message the router publishes reaches some queue: none is sent for nobody
        assert ids(*messages) <= customer | dashboard | escalation


def test_a_queued_handoffs_creation_is_for_its_customer_alone() -> None:
    # A handoff created without an agent: the customer hears they wait; the workflow's
    # handoff_waiting broadcast tells the agents, so the message names no agent (no dashboard takes it)
    from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecord

    item = Handoff("s-1", "h-q", "billing", "normal", HandoffStatus.QUEUED, 1, 1, 2).to_item()
    actions = routing.classify(DynamoDBRecord(StreamRecords().insert(item)), summary_interval=10, bus_name="bus")
    assert actions.handoff is not None
    assert actions.handoff["MessageAttributes"]["event_type"]["StringValue"] == "queued"
    assert "agent_id" not in actions.handoff["MessageAttributes"]


# -- bus --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("rule", "status"), [("SessionStartedRule", "active")])
def test_rules_match_the_status_and_deliver_with_dlq_and_retries(
    any_stage: SynthesizedStage, rule: str, status: str
) -> None:
    _, resource = only(any_stage, "AWS::Events::Rule", rule)
    props = resource["Properties"]
    assert props["EventPattern"] == {
        "source": ["mangaassist.sessions"],
        "detail-type": ["SessionStatusChanged"],
        "detail": {"new_status": [status]},
    }
    (target,) = props["Targets"]
    assert target["RetryPolicy"] == {"MaximumRetryAttempts": 8, "MaximumEventAgeInSeconds": 7200}
    assert "DeadLetterConfig" in target
    bus_id, _ = only(any_stage, "AWS::Events::EventBus", "SessionEvents")
    assert props["EventBusName"] == {"Ref": bus_id}


def test_no_bus_rule_for_handoffs_agents_hear_of_them_through_the_dashboard_queue(any_stage: SynthesizedStage) -> None:
    patterns = [r["Properties"].get("EventPattern", {}) for r in resources(any_stage, "AWS::Events::Rule").values()]
    assert all(p.get("detail", {}).get("new_status") != ["handoff"] for p in patterns)
    assert not [q for q in resources(any_stage, "AWS::SQS::Queue") if q.startswith("AgentNotificationQueue")]


def test_no_session_ended_rule_here_the_cleanup_stack_owns_it(any_stage: SynthesizedStage) -> None:
    patterns = [r["Properties"].get("EventPattern", {}) for r in resources(any_stage, "AWS::Events::Rule").values()]
    assert all(p.get("detail", {}).get("new_status") != ["disconnected"] for p in patterns)


def test_bus_is_encrypted_archived_and_only_this_account_puts(any_stage: SynthesizedStage) -> None:
    _, bus = only(any_stage, "AWS::Events::EventBus", "SessionEvents")
    assert bus["Properties"]["Name"] == f"MangaAssist-{any_stage.stage.config.name}-sessions"
    assert "KmsKeyIdentifier" in bus["Properties"]
    _, archive = only(any_stage, "AWS::Events::Archive", "Archive")
    assert archive["Properties"]["RetentionDays"] == any_stage.stage.config.event_archive_retention_days
    assert archive["Properties"]["EventPattern"] == {"account": [{"Ref": "AWS::AccountId"}]}
    # Encrypted with a customer key of its own (the bus's key would make a dependency cycle)
    archive_key = archive["Properties"]["KmsKeyIdentifier"]["Fn::GetAtt"][0]
    assert archive_key.startswith("SessionEventsArchiveKey")
    assert any_stage.templates["Events"]["Resources"][archive_key]["Properties"]["EnableKeyRotation"] is True
    (policy,) = resources(any_stage, "AWS::Events::EventBusPolicy").values()
    statement = policy["Properties"]["Statement"]
    assert statement["Principal"]["AWS"]["Fn::Join"][1][-1] == ":root"
    assert {"Ref": "AWS::AccountId"} in statement["Principal"]["AWS"]["Fn::Join"][1]


# -- analytics --------------------------------------------------------------------------------


def test_analytics_stream_is_gzip_date_partitioned_encrypted_and_buffered_from_config(
    any_stage: SynthesizedStage,
) -> None:
    config = any_stage.stage.config
    _, stream = only(any_stage, "AWS::KinesisFirehose::DeliveryStream", "AnalyticsDeliveryStream")
    props = stream["Properties"]
    assert props["DeliveryStreamEncryptionConfigurationInput"]["KeyType"] == "CUSTOMER_MANAGED_CMK"
    s3_config = props["ExtendedS3DestinationConfiguration"]
    assert s3_config["CompressionFormat"] == "GZIP"
    assert s3_config["Prefix"] == "sessions/year=!{timestamp:yyyy}/month=!{timestamp:MM}/day=!{timestamp:dd}/"
    assert s3_config["ErrorOutputPrefix"].startswith("errors/!{firehose:error-output-type}/year=")
    assert s3_config["BufferingHints"] == {
        "IntervalInSeconds": config.firehose_buffer_seconds,
        "SizeInMBs": config.firehose_buffer_mb,
    }
    assert "KMSEncryptionConfig" in s3_config["EncryptionConfiguration"]
    assert s3_config["CloudWatchLoggingOptions"]["Enabled"] is True


def test_audit_trail_has_its_own_stream_into_the_object_lock_bucket(any_stage: SynthesizedStage) -> None:
    config = any_stage.stage.config
    _, stream = only(any_stage, "AWS::KinesisFirehose::DeliveryStream", "AuditDeliveryStream")
    props = stream["Properties"]
    assert props["DeliveryStreamType"] == "DirectPut"
    assert props["DeliveryStreamEncryptionConfigurationInput"]["KeyType"] == "CUSTOMER_MANAGED_CMK"
    s3_config = props["ExtendedS3DestinationConfiguration"]
    # Into the audit bucket (Storage's export, read across stacks), not the analytics bucket
    storage_outputs = any_stage.templates["Storage"]["Outputs"]
    bucket_ref = json.dumps(s3_config["BucketARN"])
    (audit_output,) = [
        name
        for name, out in storage_outputs.items()
        if "AuditBucket" in json.dumps(out["Value"]) and name in bucket_ref
    ]
    assert "Analytics" not in audit_output
    assert s3_config["CompressionFormat"] == "GZIP"
    assert s3_config["Prefix"].startswith("audit/year=!{timestamp:yyyy}/")
    assert s3_config["ErrorOutputPrefix"].startswith("audit-errors/!{firehose:error-output-type}/")
    assert s3_config["BufferingHints"] == {
        "IntervalInSeconds": config.firehose_buffer_seconds,
        "SizeInMBs": config.firehose_buffer_mb,
    }
    assert "KMSEncryptionConfig" in s3_config["EncryptionConfiguration"]
    # And the router is told which stream that is
    router = resources(any_stage, "AWS::Lambda::Function")[function_id(any_stage, "StreamRouter")]
    variables = router["Properties"]["Environment"]["Variables"]
    assert variables["AUDIT_STREAM_NAME"] == {
        "Ref": only(any_stage, "AWS::KinesisFirehose::DeliveryStream", "AuditDeliveryStream")[0]
    }
    assert "AUDIT_BUCKET_NAME" not in variables


def test_the_audit_locker_locks_every_new_audit_object_with_the_stages_mode_and_days(
    any_stage: SynthesizedStage,
) -> None:
    config = any_stage.stage.config
    locker_id = function_id(any_stage, "AuditLocker")
    locker = resources(any_stage, "AWS::Lambda::Function")[locker_id]["Properties"]
    variables = locker["Environment"]["Variables"]
    assert (variables["AUDIT_LOCK_MODE"], variables["AUDIT_RETENTION_DAYS"]) == (
        config.audit_object_lock_mode.upper(),
        str(config.audit_retention_days),
    )
    # Every Object Created event of the audit bucket (on the default bus, where S3 sends them)
    _, rule = only(any_stage, "AWS::Events::Rule", "AuditLockObjectCreated")
    pattern = rule["Properties"]["EventPattern"]
    assert "EventBusName" not in rule["Properties"]
    assert (pattern["source"], pattern["detail-type"]) == (["aws.s3"], ["Object Created"])
    (bucket_name,) = pattern["detail"]["bucket"]["name"]
    assert "AuditBucket" in bucket_name["Fn::GetStackOutput"]["OutputName"]
    (target,) = rule["Properties"]["Targets"]
    assert target["Arn"] == {"Fn::GetAtt": [locker_id, "Arn"]}
    dlq = target["DeadLetterConfig"]["Arn"]
    # Failed deliveries and failed invocations end in the same alarmed queue
    (config_id,) = [
        k
        for k, v in resources(any_stage, "AWS::Lambda::EventInvokeConfig").items()
        if v["Properties"]["FunctionName"] == {"Ref": locker_id}
    ]
    invoke = resources(any_stage, "AWS::Lambda::EventInvokeConfig")[config_id]["Properties"]
    assert invoke["DestinationConfig"]["OnFailure"]["Destination"] == dlq
    # It may set and read the retention of the audit bucket's objects and nothing else of S3 (not the objects)
    role = locker["Role"]["Fn::GetAtt"][0]
    statements = [
        st
        for p in resources(any_stage, "AWS::IAM::Policy").values()
        if {"Ref": role} in p["Properties"]["Roles"]
        for st in p["Properties"]["PolicyDocument"]["Statement"]
    ]
    s3_actions = {
        a
        for st in statements
        for a in ([st["Action"]] if isinstance(st["Action"], str) else st["Action"])
        if a.startswith("s3:")
    }
    assert s3_actions == {"s3:GetObjectRetention", "s3:PutObjectRetention"}


# -- constructs fail fast ---------------------------------------------------------------------


@pytest.fixture
def stack() -> Stack:
    return Stack(App(), "Probe")


def _table(stack: Stack) -> dynamodb.Table:
    return dynamodb.Table(
        stack,
        "T",
        partition_key=dynamodb.Attribute(name="PK", type=dynamodb.AttributeType.STRING),
        stream=dynamodb.StreamViewType.NEW_AND_OLD_IMAGES,
    )


def _fn(stack: Stack) -> lambda_.Function:
    return lambda_.Function(
        stack, "F", runtime=lambda_.Runtime.PYTHON_3_13, handler="x.h", code=lambda_.Code.from_inline("x")
    )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"batch_size": 0}, r"batch_size must be 1\.\.1000"),
        ({"batch_size": 5000}, r"batch_size must be 1\.\.1000"),
        ({"max_record_age": Duration.hours(24)}, "below the stream's 24 h retention"),
        ({"retry_attempts": -1}, "never infinite"),
        ({"max_batching_window": Duration.seconds(301)}, r"0\.\.300 seconds"),
    ],
)
def test_fails_on_stream_consumer_settings_out_of_range(stack: Stack, overrides: dict[str, Any], message: str) -> None:
    key = kms.Key(stack, "K")
    StreamConsumer(stack, "C", function=_fn(stack), table=_table(stack), encryption_key=key, **overrides)
    with pytest.raises(RuntimeError, match=r"\[Probe/C\] .*" + message):
        Template.from_stack(stack)


def test_fails_on_a_stream_consumer_given_both_a_dlq_and_its_shape(stack: Stack) -> None:
    key = kms.Key(stack, "K")
    dlq = SecureQueue(stack, "Q", encryption_key=key, dead_letter_queue=False).queue
    StreamConsumer(
        stack,
        "C",
        function=_fn(stack),
        table=_table(stack),
        encryption_key=key,
        existing_dead_letter_queue=dlq,
        dead_letter_queue_props=sqs.QueueProps(retention_period=Duration.days(3)),
    )
    with pytest.raises(RuntimeError, match=r"\[Probe/C\] give existing_dead_letter_queue .*not both"):
        Template.from_stack(stack)


def test_fails_on_one_key_for_a_topic_and_its_queues(stack: Stack) -> None:
    key = kms.Key(stack, "K")
    FanoutTopic(stack, "T", encryption_key=key, queue_encryption_key=key)
    with pytest.raises(RuntimeError, match=r"\[Probe/T\] .*dependency cycle"):
        Template.from_stack(stack)


def test_fails_on_a_duplicate_subscriber_or_batch_size(stack: Stack) -> None:
    topic = FanoutTopic(stack, "T", encryption_key=kms.Key(stack, "K1"), queue_encryption_key=kms.Key(stack, "K2"))
    topic.add_queue_subscriber("A")
    topic.add_queue_subscriber("A")
    topic.add_queue_subscriber("B", batch_size=11)
    with pytest.raises(
        RuntimeError, match=r"(?s)\[Probe/T\] a subscriber 'A' exists already.*batch_size must be 1\.\.10"
    ):
        Template.from_stack(stack)


def test_fails_on_bus_settings_out_of_range(stack: Stack) -> None:
    key = kms.Key(stack, "K")
    SecureEventBus(stack, "B1", encryption_key=key, target_retry_attempts=200)
    SecureEventBus(
        stack,
        "B2",
        encryption_key=key,
        existing_dead_letter_queue=SecureQueue(stack, "Q", encryption_key=key, dead_letter_queue=False).queue,
        dead_letter_queue_props=sqs.QueueProps(encryption_master_key=key),
    )
    with pytest.raises(
        RuntimeError, match=r"(?s)\[Probe/B1\] target_retry_attempts must be 0\.\.185.*\[Probe/B2\] .*not both"
    ):
        Template.from_stack(stack)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"prefix": "/abs/"}, "relative prefix"),
        ({"prefix": "x", "error_prefix": "errors/"}, "ending in '/'"),
        ({"prefix": "same/", "error_prefix": "same/"}, "must differ"),
        ({"buffering_interval": Duration.seconds(901)}, r"0\.\.900"),
    ],
)
def test_fails_on_delivery_stream_settings_out_of_range(stack: Stack, overrides: dict[str, Any], message: str) -> None:
    bucket = s3.Bucket(stack, "B")
    S3DeliveryStream(stack, "D", bucket=bucket, encryption_key=kms.Key(stack, "K"), **overrides)
    with pytest.raises(RuntimeError, match=r"\[Probe/D\] .*" + message):
        Template.from_stack(stack)


def test_fails_on_a_queue_receive_count_out_of_range(stack: Stack) -> None:
    SecureQueue(stack, "Q", encryption_key=kms.Key(stack, "K"), max_receive_count=0)

    with pytest.raises(RuntimeError, match=r"\[Probe/Q\] max_receive_count must be 1\.\.1000"):
        Template.from_stack(stack)


def test_queue_props_shape_the_queue_over_its_defaults(stack: Stack) -> None:
    SecureQueue(
        stack,
        "Q",
        encryption_key=kms.Key(stack, "K"),
        queue_props=sqs.QueueProps(delivery_delay=Duration.seconds(5), visibility_timeout=Duration.seconds(90)),
    )

    template = Template.from_stack(stack)

    template.has_resource_properties(
        "AWS::SQS::Queue", {"DelaySeconds": 5, "VisibilityTimeout": 90, "KmsMasterKeyId": Match.any_value()}
    )


def test_a_delivery_stream_leaves_no_unused_mapping(stack: Stack) -> None:
    S3DeliveryStream(stack, "D", bucket=s3.Bucket(stack, "B"), encryption_key=kms.Key(stack, "K"))
    assert Template.from_stack(stack).to_json().get("Mappings", {}) == {}


def test_a_delivery_stream_error_log_group_uses_the_given_key_and_by_default_none(stack: Stack) -> None:
    # Given one stream with a log key and one without
    logs_key = kms.Key(stack, "LogsKey")
    S3DeliveryStream(
        stack, "Keyed", bucket=s3.Bucket(stack, "B1"), encryption_key=kms.Key(stack, "K1"), log_encryption_key=logs_key
    )
    S3DeliveryStream(stack, "Plain", bucket=s3.Bucket(stack, "B2"), encryption_key=kms.Key(stack, "K2"))

    groups = Template.from_stack(stack).find_resources("AWS::Logs::LogGroup")

    # Then only the first stream's log group is encrypted, with exactly that key
    keys = {logical_id[:5]: group["Properties"].get("KmsKeyId") for logical_id, group in groups.items()}
    assert keys == {
        "Keyed": {"Fn::GetAtt": [stack.resolve(logs_key.node.default_child.logical_id), "Arn"]},
        "Plain": None,
    }


# -- the pseudonym key --------------------------------------------------------------------------


def test_the_pseudonym_key_is_generated_encrypted_with_the_stage_key_and_read_by_the_router_only(
    any_stage: SynthesizedStage,
) -> None:
    secret_id, secret = only(any_stage, "AWS::SecretsManager::Secret", "Pseudonyms")
    props = secret["Properties"]
    assert "SecretString" not in props
    assert props["GenerateSecretString"] == {"PasswordLength": 64, "ExcludePunctuation": True}
    assert "DataKey" in json.dumps(props["KmsKeyId"])  # the Storage stack's key, imported
    assert secret["DeletionPolicy"] == ("Retain" if any_stage.stage.config.is_production else "Delete")
    # Only the router names the secret, and reads it through its own policy
    functions = resources(any_stage, "AWS::Lambda::Function")
    naming = sorted(k for k, f in functions.items() if secret_id in json.dumps(f["Properties"].get("Environment")))
    assert naming == [function_id(any_stage, "StreamRouter")]
    readers = [
        p["Properties"]
        for p in resources(any_stage, "AWS::IAM::Policy").values()
        if {"Ref": secret_id} in _resources_of(p["Properties"], "secretsmanager:GetSecretValue")
    ]
    router_role = functions[function_id(any_stage, "StreamRouter")]["Properties"]["Role"]["Fn::GetAtt"][0]
    assert [p["Roles"] for p in readers] == [[{"Ref": router_role}]]
    (decrypt,) = [
        s
        for s in readers[0]["PolicyDocument"]["Statement"]
        if s["Action"] == "kms:Decrypt" and "DataKey" in json.dumps(s["Resource"])
    ]
    assert list(decrypt["Condition"]) == ["StringEquals"]
    assert "secretsmanager." in json.dumps(decrypt["Condition"]["StringEquals"]["kms:ViaService"])


def _resources_of(policy: dict[str, Any], action: str) -> list[Any]:
    found: list[Any] = []
    for statement in policy["PolicyDocument"]["Statement"]:
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        if action in actions:
            found.extend(statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]])
    return found
