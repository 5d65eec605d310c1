"""Rules every resource of every stage keeps, checked over the synthesized templates of dev and prod.

Each rule collects every violation as ``<stack>/<logical id>: <what is wrong>`` and fails with the
whole list, so one run names every resource that broke a rule.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from embedded.synth import PARTS, SynthesizedStage
from stacks.config import StageConfig
from tests.support.cold_imports import ALLOWED, handler_module

Resource = dict[str, Any]

# Actions AWS does not let a policy scope to a resource: the only ones allowed on Resource "*".
UNSCOPABLE_ACTIONS = {
    "xray:PutTraceSegments",
    "xray:PutTelemetryRecords",
    "xray:GetSamplingRules",
    "xray:GetSamplingTargets",
    "cloudwatch:PutMetricData",
    "logs:CreateLogDelivery",
    "logs:GetLogDelivery",
    "logs:UpdateLogDelivery",
    "logs:DeleteLogDelivery",
    "logs:ListLogDeliveries",
    "logs:PutResourcePolicy",
    "logs:DescribeResourcePolicies",
    "logs:DescribeLogGroups",
    "states:SendTaskSuccess",
    "states:SendTaskFailure",
    "states:SendTaskHeartbeat",
    "bedrock:ListFoundationModels",
    "dynamodb:ListStreams",  # stream event source mappings (CDK's grant); no resource-level permission
    "s3:GetBucketLocation",
    "s3:ListAllMyBuckets",
}

# Step Functions service integrations whose Task state has no retry/catch need: none. Every Task counts.
TRANSIENT_ERRORS = {
    "States.TaskFailed",
    "States.ALL",
    "Lambda.ServiceException",
    "Lambda.TooManyRequestsException",
    "Lambda.SdkClientException",
    "Lambda.AWSLambdaException",
    "DynamoDB.ProvisionedThroughputExceededException",
    "DynamoDB.ThrottlingException",
    "DynamoDb.ProvisionedThroughputExceededException",
    "DynamoDb.ThrottlingException",
    "DynamoDB.InternalServerErrorException",
    "DynamoDb.InternalServerErrorException",
    "DynamoDB.RequestLimitExceeded",
    "DynamoDb.RequestLimitExceeded",
    "SQS.SdkClientException",
    "Sqs.SdkClientException",
    "SNS.SdkClientException",
    "Sns.SdkClientException",
    "States.Timeout",
}


def _resources(stage: SynthesizedStage) -> Iterator[tuple[str, str, Resource]]:
    for part in PARTS:
        for logical_id, resource in stage.templates[part].get("Resources", {}).items():
            yield part, logical_id, resource


def _of_type(stage: SynthesizedStage, type_: str) -> list[tuple[str, str, Resource]]:
    return [(p, i, r) for p, i, r in _resources(stage) if r["Type"] == type_]


def _props(resource: Resource) -> dict[str, Any]:
    return resource.get("Properties", {})  # type: ignore[no-any-return]


def _refs(value: Any) -> set[str]:
    """Every logical id a template value refers to (Ref / Fn::GetAtt), across nesting."""
    found: set[str] = set()
    if isinstance(value, dict):
        if "Ref" in value and isinstance(value["Ref"], str):
            found.add(value["Ref"])
        if "Fn::GetAtt" in value:
            found.add(value["Fn::GetAtt"][0])
        if "Fn::ImportValue" in value:
            found.add(json.dumps(value["Fn::ImportValue"], sort_keys=True))
        for child in value.values():
            found |= _refs(child)
    elif isinstance(value, list):
        for child in value:
            found |= _refs(child)
    return found


def _cross_stack_targets(stage: SynthesizedStage) -> dict[str, str]:
    """Map each export name's JSON form to the logical id it exports (for Fn::ImportValue)."""
    exports: dict[str, str] = {}
    for part in PARTS:
        for output in stage.templates[part].get("Outputs", {}).values():
            name = output.get("Export", {}).get("Name")
            refs = _refs(output.get("Value"))
            if name is not None and len(refs) == 1:
                exports[json.dumps(name, sort_keys=True)] = next(iter(refs))
    return exports


def _resolve(stage: SynthesizedStage, refs: set[str]) -> set[str]:
    exports = _cross_stack_targets(stage)
    return {exports.get(r, r) for r in refs}


def _fail_if(violations: list[str], rule: str) -> None:
    if violations:
        pytest.fail(f"{rule}:\n  " + "\n  ".join(sorted(violations)), pytrace=False)


# --- every asynchronous path has a place for failures -------------------------------------------


def _dead_letter_queues(stage: SynthesizedStage) -> set[str]:
    """Queues that are themselves a place for failures (DLQs and on-failure destinations)."""
    dlqs: set[str] = set()
    for _, _, queue in _of_type(stage, "AWS::SQS::Queue"):
        dlqs |= _refs(_props(queue).get("RedrivePolicy", {}).get("deadLetterTargetArn"))
    for _, _, mapping in _of_type(stage, "AWS::Lambda::EventSourceMapping"):
        dlqs |= _refs(_props(mapping).get("DestinationConfig"))
    for _, _, config in _of_type(stage, "AWS::Lambda::EventInvokeConfig"):
        dlqs |= _refs(_props(config).get("DestinationConfig"))
    for _, _, rule in _of_type(stage, "AWS::Events::Rule"):
        for target in _props(rule).get("Targets", []):
            dlqs |= _refs(target.get("DeadLetterConfig"))
    for _, _, subscription in _of_type(stage, "AWS::SNS::Subscription"):
        dlqs |= _refs(_props(subscription).get("RedrivePolicy"))
    for _, _, function in _of_type(stage, "AWS::Lambda::Function"):
        dlqs |= _refs(_props(function).get("DeadLetterConfig"))
    return _resolve(stage, dlqs)


def check_every_queue_has_a_redrive_policy_except_dead_letter_queues(stage: SynthesizedStage) -> list[str]:
    dlqs = _dead_letter_queues(stage)
    violations = [
        f"{part}/{logical_id}: SQS queue without RedrivePolicy (and not used as a DLQ)"
        for part, logical_id, queue in _of_type(stage, "AWS::SQS::Queue")
        if logical_id not in dlqs and "RedrivePolicy" not in _props(queue)
    ]
    return violations


def test_every_queue_has_a_redrive_policy_except_dead_letter_queues(any_stage: SynthesizedStage) -> None:
    _fail_if(
        check_every_queue_has_a_redrive_policy_except_dead_letter_queues(any_stage),
        "every queue sends poison messages to a DLQ",
    )


def check_every_event_source_mapping_has_a_place_for_failures(stage: SynthesizedStage) -> list[str]:
    queues = {logical_id: q for _, logical_id, q in _of_type(stage, "AWS::SQS::Queue")}
    violations = []
    for part, logical_id, mapping in _of_type(stage, "AWS::Lambda::EventSourceMapping"):
        props = _props(mapping)
        if "StartingPosition" in props:  # streams: the mapping itself needs an on-failure destination
            if not props.get("DestinationConfig", {}).get("OnFailure"):
                violations.append(f"{part}/{logical_id}: stream mapping without DestinationConfig.OnFailure")
            if "ReportBatchItemFailures" not in props.get("FunctionResponseTypes", []):
                violations.append(f"{part}/{logical_id}: stream mapping without ReportBatchItemFailures")
        else:  # SQS: failures go to the source queue's DLQ; partial batch responses keep the rest
            sources = _resolve(stage, _refs(props.get("EventSourceArn")))
            for source in sources:
                if source in queues and "RedrivePolicy" not in _props(queues[source]):
                    violations.append(f"{part}/{logical_id}: source queue {source} has no RedrivePolicy")
            if "ReportBatchItemFailures" not in props.get("FunctionResponseTypes", []):
                violations.append(f"{part}/{logical_id}: SQS mapping without ReportBatchItemFailures")
    return violations


def test_every_event_source_mapping_has_a_place_for_failures(any_stage: SynthesizedStage) -> None:
    _fail_if(
        check_every_event_source_mapping_has_a_place_for_failures(any_stage),
        "every event source mapping has a place for failures",
    )


def check_every_eventbridge_target_has_a_dlq_and_retry_policy(stage: SynthesizedStage) -> list[str]:
    violations = []
    for part, logical_id, rule in _of_type(stage, "AWS::Events::Rule"):
        for target in _props(rule).get("Targets", []):
            missing = [key for key in ("DeadLetterConfig", "RetryPolicy") if key not in target]
            if missing:
                violations.append(f"{part}/{logical_id} target {target.get('Id')}: missing {', '.join(missing)}")
    return violations


def test_every_eventbridge_target_has_a_dlq_and_retry_policy(any_stage: SynthesizedStage) -> None:
    _fail_if(
        check_every_eventbridge_target_has_a_dlq_and_retry_policy(any_stage),
        "every EventBridge target has a DLQ and a retry policy",
    )


def check_every_sns_to_sqs_subscription_has_a_redrive_policy(stage: SynthesizedStage) -> list[str]:
    violations = [
        f"{part}/{logical_id}: SNS subscription to SQS without RedrivePolicy"
        for part, logical_id, subscription in _of_type(stage, "AWS::SNS::Subscription")
        if _props(subscription).get("Protocol") == "sqs" and "RedrivePolicy" not in _props(subscription)
    ]
    return violations


def test_every_sns_to_sqs_subscription_has_a_redrive_policy(any_stage: SynthesizedStage) -> None:
    _fail_if(
        check_every_sns_to_sqs_subscription_has_a_redrive_policy(any_stage), "every SNS -> SQS subscription has a DLQ"
    )


def _async_invoked_functions(stage: SynthesizedStage) -> set[str]:
    """Functions invoked asynchronously: rule targets, SNS lambda subscriptions, function-to-function invokes."""
    functions = {logical_id for _, logical_id, _ in _of_type(stage, "AWS::Lambda::Function")}
    invoked: set[str] = set()
    for _, _, rule in _of_type(stage, "AWS::Events::Rule"):
        for target in _props(rule).get("Targets", []):
            invoked |= _refs(target.get("Arn")) & functions
    for _, _, subscription in _of_type(stage, "AWS::SNS::Subscription"):
        if _props(subscription).get("Protocol") == "lambda":
            invoked |= _refs(_props(subscription).get("Endpoint")) & functions
    lambda_roles = {
        ref
        for _, _, function in _of_type(stage, "AWS::Lambda::Function")
        for ref in _refs(_props(function).get("Role"))
    }
    for _, _, policy in _of_type(stage, "AWS::IAM::Policy"):
        if not _refs(_props(policy).get("Roles")) & lambda_roles:
            continue
        for statement in _props(policy)["PolicyDocument"]["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            if "lambda:InvokeFunction" in actions:
                invoked |= _resolve(stage, _refs(statement.get("Resource"))) & functions
    return invoked


def check_every_async_invoked_function_has_a_failure_destination(stage: SynthesizedStage) -> list[str]:
    with_destination = {
        ref
        for _, _, config in _of_type(stage, "AWS::Lambda::EventInvokeConfig")
        if _props(config).get("DestinationConfig", {}).get("OnFailure")
        for ref in _refs(_props(config).get("FunctionName"))
    }
    violations = [
        f"{logical_id}: invoked asynchronously but has no EventInvokeConfig OnFailure destination"
        for logical_id in _async_invoked_functions(stage) - with_destination
    ]
    return violations


def test_every_async_invoked_function_has_a_failure_destination(any_stage: SynthesizedStage) -> None:
    _fail_if(
        check_every_async_invoked_function_has_a_failure_destination(any_stage),
        "every asynchronously invoked function has a failure destination",
    )


# --- encryption at rest and in transit ------------------------------------------------------------


def check_every_data_store_and_channel_uses_a_customer_managed_key(stage: SynthesizedStage) -> list[str]:
    violations = []
    for part, logical_id, resource in _resources(stage):
        props, type_ = _props(resource), resource["Type"]
        where = f"{part}/{logical_id}"
        if type_ == "AWS::DynamoDB::Table" and props.get("SSESpecification", {}).get("SSEType") != "KMS":
            violations.append(f"{where}: table not encrypted with a customer key")
        elif type_ == "AWS::SQS::Queue" and "KmsMasterKeyId" not in props:
            violations.append(f"{where}: queue not encrypted with a customer key")
        elif type_ == "AWS::SNS::Topic" and "KmsMasterKeyId" not in props:
            violations.append(f"{where}: topic not encrypted with a customer key")
        elif type_ == "AWS::S3::Bucket":
            rule = props.get("BucketEncryption", {}).get("ServerSideEncryptionConfiguration", [{}])[0]
            algorithm = rule.get("ServerSideEncryptionByDefault", {}).get("SSEAlgorithm")
            is_log_target = "LoggingConfiguration" not in props and algorithm == "AES256"
            if algorithm != "aws:kms" and not is_log_target:
                violations.append(f"{where}: bucket not encrypted with a customer key")
        elif type_ == "AWS::KinesisFirehose::DeliveryStream":
            encryption = props.get("DeliveryStreamEncryptionConfigurationInput", {}).get("KeyType")
            destination = props.get("ExtendedS3DestinationConfiguration", {})
            kms = destination.get("EncryptionConfiguration", {}).get("KMSEncryptionConfig")
            if encryption != "CUSTOMER_MANAGED_CMK" and not kms:
                violations.append(f"{where}: delivery stream not encrypted with a customer key")
        elif type_ == "AWS::Events::Archive" and "KmsKeyIdentifier" not in props:
            violations.append(f"{where}: event archive not encrypted with a customer key")
        elif type_ == "AWS::Logs::LogGroup" and "KmsKeyId" not in props:
            violations.append(f"{where}: log group not encrypted with a customer key")
        elif type_ == "AWS::StepFunctions::StateMachine":
            encryption = props.get("EncryptionConfiguration", {})
            if encryption.get("Type") != "CUSTOMER_MANAGED_KMS_KEY" or not encryption.get("KmsKeyId"):
                violations.append(f"{where}: state machine history not encrypted with a customer key")
    return violations


def test_every_data_store_and_channel_uses_a_customer_managed_key(any_stage: SynthesizedStage) -> None:
    _fail_if(
        check_every_data_store_and_channel_uses_a_customer_managed_key(any_stage),
        "data at rest is encrypted with the customer-managed key",
    )


def _ssl_only_targets(stage: SynthesizedStage, policy_type: str, target_key: str) -> set[str]:
    secured: set[str] = set()
    for _, _, policy in _of_type(stage, policy_type):
        statements = _props(policy)["PolicyDocument"]["Statement"]
        denies_plain_http = any(
            s["Effect"] == "Deny" and s.get("Condition", {}).get("Bool", {}).get("aws:SecureTransport") == "false"
            for s in statements
        )
        if denies_plain_http:
            targets = _props(policy)[target_key]
            secured |= _refs(targets)
    return secured


SSL_ONLY = [
    ("AWS::S3::Bucket", "AWS::S3::BucketPolicy", "Bucket"),
    ("AWS::SQS::Queue", "AWS::SQS::QueuePolicy", "Queues"),
    ("AWS::SNS::Topic", "AWS::SNS::TopicPolicy", "Topics"),
]


def check_every_bucket_queue_and_topic_refuses_plain_http(stage: SynthesizedStage) -> list[str]:
    violations = []
    for resource_type, policy_type, target_key in SSL_ONLY:
        secured = _ssl_only_targets(stage, policy_type, target_key)
        violations += [
            f"{part}/{logical_id}: no policy denying aws:SecureTransport=false"
            for part, logical_id, _ in _of_type(stage, resource_type)
            if logical_id not in secured
        ]
    return violations


def test_every_bucket_queue_and_topic_refuses_plain_http(any_stage: SynthesizedStage) -> None:
    _fail_if(
        check_every_bucket_queue_and_topic_refuses_plain_http(any_stage),
        "every bucket, queue and topic refuses plain HTTP",
    )


#: Words in an environment variable's name that say it may hold a credential.
SECRET_WORDS = ("SECRET", "PASSWORD", "TOKEN", "CREDENTIAL", "PRIVATE_KEY", "API_KEY")


def check_no_function_environment_holds_a_secret(stage: SynthesizedStage) -> list[str]:
    """A variable named like a secret holds a Secrets Manager secret's reference or a number, never a value.

    Function environments are in the template and readable with lambda:GetFunctionConfiguration,
    so a secret is read at run time from Secrets Manager by its ARN.
    """
    secrets = {logical_id for _, logical_id, _ in _of_type(stage, "AWS::SecretsManager::Secret")}
    violations = []
    for part, logical_id, function in _of_type(stage, "AWS::Lambda::Function"):
        for name, value in _props(function).get("Environment", {}).get("Variables", {}).items():
            if not any(word in name for word in SECRET_WORDS):
                continue
            if isinstance(value, str) and value.isdigit():
                continue  # a setting such as SECRET_CACHE_SECONDS
            if isinstance(value, dict) and _refs(value) and _refs(value) <= secrets:
                continue
            violations.append(f"{part}/{logical_id}: {name} is neither a secret's reference nor a number")
    return violations


def test_no_function_environment_holds_a_secret(any_stage: SynthesizedStage) -> None:
    _fail_if(check_no_function_environment_holds_a_secret(any_stage), "no function environment holds a secret")


# --- logs, tracing and function settings ---------------------------------------------------------


def check_every_log_group_has_a_retention(stage: SynthesizedStage) -> list[str]:
    violations = [
        f"{part}/{logical_id}: log group without RetentionInDays"
        for part, logical_id, group in _of_type(stage, "AWS::Logs::LogGroup")
        if "RetentionInDays" not in _props(group)
    ]
    return violations


def test_every_log_group_has_a_retention(any_stage: SynthesizedStage) -> None:
    _fail_if(check_every_log_group_has_a_retention(any_stage), "every log group has a retention")


def check_every_function_has_a_log_group_tracing_timeout_and_memory(stage: SynthesizedStage) -> list[str]:
    violations = []
    for part, logical_id, function in _of_type(stage, "AWS::Lambda::Function"):
        props = _props(function)
        if logical_id.startswith(("CustomS3AutoDeleteObjects", "LogRetention", "AWS679f53fac002430cb0da5b7982bd2287")):
            continue  # CDK's own custom-resource providers: not our code, not configurable
        where = f"{part}/{logical_id}"
        if "LogGroup" not in props.get("LoggingConfig", {}):
            violations.append(f"{where}: no log group of its own")
        if props.get("TracingConfig", {}).get("Mode") != "Active":
            violations.append(f"{where}: X-Ray tracing not active")
        for key in ("Timeout", "MemorySize"):
            if key not in props:
                violations.append(f"{where}: no explicit {key}")
    return violations


def test_every_function_has_a_log_group_tracing_timeout_and_memory(any_stage: SynthesizedStage) -> None:
    _fail_if(
        check_every_function_has_a_log_group_tracing_timeout_and_memory(any_stage),
        "every function has a log group, tracing, a timeout and a memory size",
    )


def _python_handler_modules(stage: SynthesizedStage) -> set[str]:
    return {
        handler_module(str(_props(function)["Handler"]))
        for _, _, function in _of_type(stage, "AWS::Lambda::Function")
        if str(_props(function).get("Runtime", "")).startswith("python")
    }


def test_every_python_handler_has_an_import_allow_list(dev: SynthesizedStage, prod: SynthesizedStage) -> None:
    # The allow-lists of tests/support/cold_imports.py cover exactly the deployed handler modules:
    # a new function is checked from its first commit, and a removed one leaves no stale entry.
    deployed = _python_handler_modules(dev) | _python_handler_modules(prod)
    assert sorted(deployed - set(ALLOWED)) == [], "handler modules without an import allow-list"
    assert sorted(set(ALLOWED) - deployed) == [], "import allow-lists of modules no function runs"


# --- IAM -------------------------------------------------------------------------------------------


def _policy_documents(stage: SynthesizedStage) -> Iterator[tuple[str, dict[str, Any]]]:
    for part, logical_id, resource in _resources(stage):
        props = _props(resource)
        if resource["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            yield f"{part}/{logical_id}", props["PolicyDocument"]
        elif resource["Type"] == "AWS::IAM::Role":
            for inline in props.get("Policies", []):
                yield f"{part}/{logical_id}/{inline['PolicyName']}", inline["PolicyDocument"]


def check_no_statement_allows_every_action_of_a_service(stage: SynthesizedStage) -> list[str]:
    violations = []
    for where, document in _policy_documents(stage):
        for statement in document["Statement"]:
            if statement["Effect"] != "Allow":
                continue
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            for action in actions:
                if action == "*" or action.endswith(":*"):
                    violations.append(f"{where}: allows {action}")
    return violations


def test_no_statement_allows_every_action_of_a_service(any_stage: SynthesizedStage) -> None:
    _fail_if(
        check_no_statement_allows_every_action_of_a_service(any_stage), "no IAM statement allows '*' or a whole service"
    )


def check_wildcard_resources_only_for_actions_that_cannot_be_scoped(stage: SynthesizedStage) -> list[str]:
    violations = []
    for where, document in _policy_documents(stage):
        for statement in document["Statement"]:
            if statement["Effect"] != "Allow" or statement.get("Resource") != "*":
                continue
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            scopable = sorted(set(actions) - UNSCOPABLE_ACTIONS)
            if scopable:
                violations.append(f"{where}: Resource '*' for scopable actions {scopable}")
    return violations


def test_wildcard_resources_only_for_actions_that_cannot_be_scoped(any_stage: SynthesizedStage) -> None:
    _fail_if(
        check_wildcard_resources_only_for_actions_that_cannot_be_scoped(any_stage),
        "wildcard resources only where the action cannot be scoped",
    )


# --- workflows --------------------------------------------------------------------------------------


def _render(value: Any) -> str:
    """A template string expression with every token replaced by a placeholder, for parsing."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(_render(p) for p in parts)
    return "TOKEN"


def _catches_all(state: dict[str, Any]) -> bool:
    return any("States.ALL" in c.get("ErrorEquals", []) for c in state.get("Catch", []))


def _states(definition: dict[str, Any], enclosed: bool = False) -> Iterator[tuple[str, dict[str, Any], bool]]:
    """Every state, nested ones included, with whether an enclosing Parallel/Map catches States.ALL."""
    for name, state in definition.get("States", {}).items():
        yield name, state, enclosed
        inner = enclosed or _catches_all(state)
        for branch in state.get("Branches", []):
            yield from _states(branch, inner)
        for key in ("Iterator", "ItemProcessor"):
            if key in state:
                yield from _states(state[key], inner)


def state_machine_definitions(stage: SynthesizedStage) -> Iterator[tuple[str, dict[str, Any]]]:
    for part, logical_id, machine in _of_type(stage, "AWS::StepFunctions::StateMachine"):
        props = _props(machine)
        raw = props.get("DefinitionString")
        if raw is None:
            pytest.fail(f"{part}/{logical_id}: state machine without DefinitionString", pytrace=False)
        yield f"{part}/{logical_id}", json.loads(_render(raw))


def check_every_task_retries_transient_errors_and_catches_the_rest(stage: SynthesizedStage) -> list[str]:
    violations = []
    for where, definition in state_machine_definitions(stage):
        for name, state, enclosed in _states(definition):
            if state.get("Type") != "Task":
                continue
            retried = {e for r in state.get("Retry", []) for e in r.get("ErrorEquals", [])}
            caught = {e for c in state.get("Catch", []) for e in c.get("ErrorEquals", [])}
            if not retried & TRANSIENT_ERRORS:
                violations.append(f"{where} state {name!r}: no Retry for transient errors (has {sorted(retried)})")
            # A Task inside a Parallel or Map is covered by the enclosing state's catch-all.
            if "States.ALL" not in caught and not enclosed:
                violations.append(f"{where} state {name!r}: no Catch of States.ALL (has {sorted(caught)})")
    return violations


def test_every_task_retries_transient_errors_and_catches_the_rest(any_stage: SynthesizedStage) -> None:
    _fail_if(
        check_every_task_retries_transient_errors_and_catches_the_rest(any_stage),
        "every Task state retries transient errors and catches the rest",
    )


def check_every_state_machine_logs_traces_and_has_a_timeout(stage: SynthesizedStage) -> list[str]:
    include_data = stage.stage.config.log_execution_data
    violations = []
    for part, logical_id, machine in _of_type(stage, "AWS::StepFunctions::StateMachine"):
        props = _props(machine)
        where = f"{part}/{logical_id}"
        logging = props.get("LoggingConfiguration", {})
        if logging.get("Level") != "ALL":
            violations.append(f"{where}: logging level {logging.get('Level')} (want ALL)")
        if logging.get("IncludeExecutionData", False) != include_data:
            violations.append(f"{where}: IncludeExecutionData must be {include_data} in this stage")
        if not props.get("TracingConfiguration", {}).get("Enabled"):
            violations.append(f"{where}: X-Ray tracing off")
    for where, definition in state_machine_definitions(stage):
        if "TimeoutSeconds" not in definition:
            violations.append(f"{where}: no overall TimeoutSeconds")
    return violations


def test_every_state_machine_logs_traces_and_has_a_timeout(any_stage: SynthesizedStage) -> None:
    _fail_if(
        check_every_state_machine_logs_traces_and_has_a_timeout(any_stage),
        "every workflow logs, traces and has an overall timeout",
    )


# --- alarms ------------------------------------------------------------------------------------------


def check_every_alarm_notifies_with_a_runbook(stage: SynthesizedStage) -> list[str]:
    violations = []
    for part, logical_id, alarm in _of_type(stage, "AWS::CloudWatch::Alarm"):
        props = _props(alarm)
        where = f"{part}/{logical_id}"
        if not props.get("AlarmActions") or props.get("OKActions") != props.get("AlarmActions"):
            violations.append(f"{where}: no ALARM and OK actions to the ops topic")
        if "\nRunbook: " not in str(props.get("AlarmDescription", "")):
            violations.append(f"{where}: description has no runbook line")
        if not str(props.get("AlarmName", "")).startswith("MangaAssist-"):
            violations.append(f"{where}: no clear MangaAssist-<stage>-<stack>-<what> name")
    return violations


def test_every_alarm_notifies_with_a_runbook(any_stage: SynthesizedStage) -> None:
    _fail_if(check_every_alarm_notifies_with_a_runbook(any_stage), "every alarm is named, has a runbook, notifies")


def check_every_dead_letter_queue_has_an_alarm(stage: SynthesizedStage) -> list[str]:
    watched: set[str] = set()
    for _, _, alarm in _of_type(stage, "AWS::CloudWatch::Alarm"):
        props = _props(alarm)
        if props.get("MetricName") == "ApproximateNumberOfMessagesVisible":
            for dimension in props.get("Dimensions", []):
                watched |= _resolve(stage, _refs(dimension.get("Value")))
    queues = {logical_id for _, logical_id, _ in _of_type(stage, "AWS::SQS::Queue")}
    return [
        f"{logical_id}: dead-letter queue without an alarm on visible messages"
        for logical_id in sorted(_dead_letter_queues(stage) & queues)
        if logical_id not in watched
    ]


def test_every_dead_letter_queue_has_an_alarm(any_stage: SynthesizedStage) -> None:
    _fail_if(check_every_dead_letter_queue_has_an_alarm(any_stage), "every dead-letter queue is alarmed")


# --- the rules themselves catch what they are meant to catch --------------------------------------


def _broken_stage() -> Any:
    """A stage whose Storage template breaks every rule once; the other stacks are empty."""
    key = {"Fn::GetAtt": ["Key", "Arn"]}
    naked_definition = {
        "StartAt": "Work",
        "States": {
            "Work": {"Type": "Task", "Resource": "arn:aws:states:::lambda:invoke", "Next": "Fan"},
            "Fan": {  # catches nothing, so the Task inside is not covered either
                "Type": "Parallel",
                "Branches": [
                    {
                        "StartAt": "Inner",
                        "States": {
                            "Inner": {"Type": "Task", "Resource": "arn:aws:states:::sqs:sendMessage", "End": True}
                        },
                    }
                ],
                "End": True,
            },
        },
    }
    resources: dict[str, Resource] = {
        "Queue": {"Type": "AWS::SQS::Queue", "Properties": {}},
        "Dlq": {"Type": "AWS::SQS::Queue", "Properties": {}},
        "Redriven": {
            "Type": "AWS::SQS::Queue",
            "Properties": {"RedrivePolicy": {"deadLetterTargetArn": {"Fn::GetAtt": ["Dlq", "Arn"]}}},
        },
        "Silent": {
            "Type": "AWS::CloudWatch::Alarm",
            "Properties": {"AlarmName": "x", "AlarmDescription": "no runbook", "MetricName": "Errors"},
        },
        "Topic": {"Type": "AWS::SNS::Topic", "Properties": {"KmsMasterKeyId": key}},
        "Subscription": {
            "Type": "AWS::SNS::Subscription",
            "Properties": {"Protocol": "sqs", "Endpoint": {"Fn::GetAtt": ["Queue", "Arn"]}},
        },
        "Table": {"Type": "AWS::DynamoDB::Table", "Properties": {"SSESpecification": {"SSEEnabled": True}}},
        "Bucket": {
            "Type": "AWS::S3::Bucket",
            "Properties": {
                "LoggingConfiguration": {},
                "BucketEncryption": {
                    "ServerSideEncryptionConfiguration": [{"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]
                },
            },
        },
        "Logs": {"Type": "AWS::Logs::LogGroup", "Properties": {}},
        "Archive": {"Type": "AWS::Events::Archive", "Properties": {}},
        "Role": {"Type": "AWS::IAM::Role", "Properties": {}},
        "Fn": {
            "Type": "AWS::Lambda::Function",
            "Properties": {
                "Role": {"Fn::GetAtt": ["Role", "Arn"]},
                "Environment": {"Variables": {"SIGNING_SECRET": "hunter2", "TABLE_NAME": "t"}},
            },
        },
        "Worker": {"Type": "AWS::Lambda::Function", "Properties": {"Role": {"Fn::GetAtt": ["Role", "Arn"]}}},
        "Policy": {
            "Type": "AWS::IAM::Policy",
            "Properties": {
                "Roles": [{"Ref": "Role"}],
                "PolicyDocument": {
                    "Statement": [
                        {"Effect": "Allow", "Action": "dynamodb:*", "Resource": {"Fn::GetAtt": ["Table", "Arn"]}},
                        {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": "*"},
                        {
                            "Effect": "Allow",
                            "Action": "lambda:InvokeFunction",
                            "Resource": {"Fn::GetAtt": ["Worker", "Arn"]},
                        },
                    ]
                },
            },
        },
        "StreamMapping": {
            "Type": "AWS::Lambda::EventSourceMapping",
            "Properties": {"StartingPosition": "LATEST", "FunctionName": {"Ref": "Fn"}},
        },
        "QueueMapping": {
            "Type": "AWS::Lambda::EventSourceMapping",
            "Properties": {"EventSourceArn": {"Fn::GetAtt": ["Queue", "Arn"]}, "FunctionName": {"Ref": "Fn"}},
        },
        "Rule": {
            "Type": "AWS::Events::Rule",
            "Properties": {"Targets": [{"Id": "Target0", "Arn": {"Fn::GetAtt": ["Fn", "Arn"]}}]},
        },
        "Machine": {
            "Type": "AWS::StepFunctions::StateMachine",
            "Properties": {
                "DefinitionString": json.dumps(naked_definition),
                "LoggingConfiguration": {"Level": "ERROR"},
            },
        },
    }
    empty: dict[str, Any] = {"Resources": {}}
    templates = dict.fromkeys(PARTS, empty) | {"Storage": {"Resources": resources}}
    return SimpleNamespace(templates=templates, stage=SimpleNamespace(config=StageConfig(name="broken")))


@pytest.mark.parametrize(
    ("check", "expected"),
    [
        (check_every_queue_has_a_redrive_policy_except_dead_letter_queues, ["Storage/Queue: SQS queue without"]),
        (
            check_every_event_source_mapping_has_a_place_for_failures,
            [
                "Storage/QueueMapping: SQS mapping without ReportBatchItemFailures",
                "Storage/QueueMapping: source queue Queue has no RedrivePolicy",
                "Storage/StreamMapping: stream mapping without DestinationConfig.OnFailure",
                "Storage/StreamMapping: stream mapping without ReportBatchItemFailures",
            ],
        ),
        (check_every_eventbridge_target_has_a_dlq_and_retry_policy, ["Storage/Rule target Target0: missing"]),
        (check_every_sns_to_sqs_subscription_has_a_redrive_policy, ["Storage/Subscription: SNS subscription"]),
        (
            check_every_async_invoked_function_has_a_failure_destination,
            ["Fn: invoked asynchronously", "Worker: invoked asynchronously"],
        ),
        (
            check_every_data_store_and_channel_uses_a_customer_managed_key,
            [
                "Storage/Archive: event archive not encrypted",
                "Storage/Bucket: bucket not encrypted",
                "Storage/Logs: log group not encrypted",
                "Storage/Queue: queue not encrypted",
                "Storage/Table: table not encrypted",
            ],
        ),
        (
            check_every_bucket_queue_and_topic_refuses_plain_http,
            ["Storage/Bucket: no policy", "Storage/Queue: no policy", "Storage/Topic: no policy"],
        ),
        (check_every_log_group_has_a_retention, ["Storage/Logs: log group without RetentionInDays"]),
        (check_no_function_environment_holds_a_secret, ["Storage/Fn: SIGNING_SECRET is neither"]),
        (
            check_every_alarm_notifies_with_a_runbook,
            [
                "Storage/Silent: no ALARM and OK",
                "Storage/Silent: description has no runbook",
                "Storage/Silent: no clear",
            ],
        ),
        (check_every_dead_letter_queue_has_an_alarm, ["Dlq: dead-letter queue without an alarm"]),
        (
            check_every_function_has_a_log_group_tracing_timeout_and_memory,
            ["Storage/Fn: no log group", "Storage/Fn: X-Ray", "Storage/Fn: no explicit Timeout"],
        ),
        (check_no_statement_allows_every_action_of_a_service, ["Storage/Policy: allows dynamodb:*"]),
        (
            check_wildcard_resources_only_for_actions_that_cannot_be_scoped,
            ["Storage/Policy: Resource '*' for scopable"],
        ),
        (
            check_every_task_retries_transient_errors_and_catches_the_rest,
            [
                "Storage/Machine state 'Work': no Retry",
                "Storage/Machine state 'Work': no Catch",
                "Storage/Machine state 'Inner': no Catch",
            ],
        ),
        (
            check_every_state_machine_logs_traces_and_has_a_timeout,
            [
                "Storage/Machine: logging level ERROR",
                "Storage/Machine: X-Ray tracing off",
                "Storage/Machine: no overall",
            ],
        ),
    ],
)
def test_fails_on_a_template_that_breaks_the_rule(check: Any, expected: list[str]) -> None:
    # Given a stage that breaks every rule once / When the rule runs
    violations = check(_broken_stage())
    # Then it names each broken resource, and nothing the rule is not about
    for prefix in expected:
        assert any(v.startswith(prefix) for v in violations), f"{prefix!r} not reported in {violations}"
    assert len(violations) >= len(expected)
