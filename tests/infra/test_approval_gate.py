"""HumanApprovalGate in the synthesized stages (export workflow, topic, secret, routes, IAM) and alone."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from aws_cdk import App, Duration, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sns as sns
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk.assertions import Match, Template

from constructs_lib.approval_gate import HumanApprovalGate
from embedded.synth import SynthesizedStage

# ---------------------------------------------------------------------------- helpers


def _flatten(value: Any) -> str:
    """A definition string with every CloudFormation token replaced by a placeholder."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        return "".join(_flatten(part) if isinstance(part, str) else "TOKEN" for part in value["Fn::Join"][1])
    raise AssertionError(f"unexpected definition shape: {value!r}")


def export_definition(stage: SynthesizedStage) -> dict[str, Any]:
    machines = stage.template("Orchestration").find_resources("AWS::StepFunctions::StateMachine")
    for machine in machines.values():
        text = _flatten(machine["Properties"]["DefinitionString"])
        if "ExportApprovalRequestReview" in text:
            document: dict[str, Any] = json.loads(text)
            return document
    raise AssertionError("no state machine runs the ExportApproval gate")


def _resource(template: Template, kind: str, prefix: str) -> tuple[str, dict[str, Any]]:
    found = {k: dict(v) for k, v in template.find_resources(kind).items() if k.startswith(prefix)}
    assert len(found) == 1, f"expected one {kind} named {prefix}*, found {sorted(found)}"
    return next(iter(found.items()))


def _statements(template: Template, role_prefix: str) -> list[dict[str, Any]]:
    role_id, _ = _resource(template, "AWS::IAM::Role", role_prefix)
    statements: list[dict[str, Any]] = []
    for policy in template.find_resources("AWS::IAM::Policy").values():
        if {"Ref": role_id} in policy["Properties"]["Roles"]:
            statements += policy["Properties"]["PolicyDocument"]["Statement"]
    return statements


def _actions(statement: dict[str, Any]) -> set[str]:
    actions = statement["Action"]
    return {actions} if isinstance(actions, str) else set(actions)


def _allows(statements: list[dict[str, Any]], action: str, resource_fragment: str) -> bool:
    return any(
        action in _actions(s) and resource_fragment in json.dumps(s["Resource"])
        for s in statements
        if s["Effect"] == "Allow"
    )


# ---------------------------------------------------------------------------- the stages


def test_the_export_waits_at_the_gate_before_exporting(any_stage: SynthesizedStage) -> None:
    definition = export_definition(any_stage)
    states = definition["States"]
    request = states["ExportApprovalRequestReview"]

    # A request scored at or above the stage's threshold goes to the reviewer (below it: recorded
    # as an automatic approval, tests/e2e/test_export_risk.py)
    (review,) = states["NeedsReview"]["Choices"]
    assert review["Variable"] == "$.risk.score"
    assert review["NumericGreaterThanEquals"] == any_stage.stage.config.export_review_min_score
    assert review["Next"] == "ExportApprovalRequestReview"
    assert request["Resource"].endswith(":states:::lambda:invoke.waitForTaskToken")
    assert request["Next"] == "StartExport"
    assert request["TimeoutSeconds"] == any_stage.stage.config.review_ttl_days * 86400
    payload = request["Parameters"]["Payload"]
    assert payload["task_token.$"] == "$$.Task.Token"
    assert payload["state.$"] == "$"
    assert payload["requested_by.$"] == "$.requested_by"
    assert payload["details.$"] == "$.reason"
    assert payload["entered_time.$"] == "$$.State.EnteredTime"
    assert request["Catch"] == [
        {"ErrorEquals": ["ReviewRejected"], "ResultPath": "$.approval", "Next": "ExportApprovalRejected"},
        {
            "ErrorEquals": ["States.Timeout", "ReviewWindowClosed"],
            "ResultPath": "$.approval",
            "Next": "ExportApprovalExpired",
        },
        {"ErrorEquals": ["States.ALL"], "ResultPath": "$.approval", "Next": "ExportApprovalFailed"},
    ]
    failed = states["ExportApprovalFailed"]
    assert failed["Parameters"] == {"outcome": "rejected", "reason": "failed", "error.$": "$.approval.Error"}
    assert failed["Next"] == states["ExportApprovalExpired"]["Next"], "a failure takes the rejection path"
    (retry,) = request["Retry"]
    assert retry["JitterStrategy"] == "FULL"
    assert not {"States.ALL", "States.TaskFailed", "ReviewRejected", "States.Timeout"} & set(retry["ErrorEquals"])
    rejected, expired = states["ExportApprovalRejected"], states["ExportApprovalExpired"]
    assert rejected["Parameters"] == {"outcome": "rejected", "reason": "rejected", "review_id.$": "$.approval.Cause"}
    assert expired["Parameters"] == {"outcome": "rejected", "reason": "expired"}
    assert rejected["Next"] == expired["Next"] == "NotifyRejected"
    assert states["NotifyRejected"]["Next"] == "ExportRejected"
    assert states["ExportRejected"]["Type"] == "Fail"


def test_the_reviewer_topic_is_kms_encrypted_and_ssl_only(any_stage: SynthesizedStage) -> None:
    template = any_stage.template("Orchestration")
    topic_id, topic = _resource(template, "AWS::SNS::Topic", "ExportApprovalTopic")

    assert "KmsMasterKeyId" in topic["Properties"]
    template.has_resource_properties(
        "AWS::SNS::TopicPolicy",
        {
            "Topics": [{"Ref": topic_id}],
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [Match.object_like({"Effect": "Deny", "Condition": {"Bool": {"aws:SecureTransport": "false"}}})]
                )
            },
        },
    )


def test_the_reviewer_email_comes_from_the_stage(dev: SynthesizedStage, prod: SynthesizedStage) -> None:
    # dev names a reviewer too, so a team's dev deploy can approve an export (its own address replaces it)
    assert dev.stage.config.reviewer_email != prod.stage.config.reviewer_email
    for stage in (dev, prod):
        template = stage.template("Orchestration")
        topic_id, _ = _resource(template, "AWS::SNS::Topic", "ExportApprovalTopic")
        template.has_resource_properties(
            "AWS::SNS::Subscription",
            {"Protocol": "email", "Endpoint": stage.stage.config.reviewer_email, "TopicArn": {"Ref": topic_id}},
        )


def test_the_signing_secret_is_generated_and_encrypted(any_stage: SynthesizedStage) -> None:
    _, secret = _resource(
        any_stage.template("Orchestration"), "AWS::SecretsManager::Secret", "ExportApprovalSigningSecret"
    )

    assert secret["Properties"]["GenerateSecretString"] == {"ExcludePunctuation": True, "PasswordLength": 64}
    assert "KmsKeyId" in secret["Properties"]


def test_the_request_function_has_its_settings_and_only_its_permissions(any_stage: SynthesizedStage) -> None:
    template = any_stage.template("Orchestration")
    _, function = _resource(template, "AWS::Lambda::Function", "ExportApprovalRequestFunction")
    variables = function["Properties"]["Environment"]["Variables"]
    config = any_stage.stage.config

    assert function["Properties"]["Handler"] == "gate_runtime.request.handler"
    assert variables["REVIEW_TIMEOUT_SECONDS"] == str(config.review_ttl_days * 86400)
    assert variables["REVIEW_DECISION_MARGIN_SECONDS"] == "60"
    assert variables["REVIEW_TTL_DAYS"] == str(config.review_ttl_days)
    assert variables["LINK_BASE_URL_PARAMETER"] == f"/mangaassist/{config.name}/rest-api-url"
    assert {"TABLE_NAME", "REVIEW_SECRET_ARN", "REVIEWER_TOPIC_ARN", "REVIEW_SUBJECT"} <= set(variables)
    # the gate keeps its reviews where the app's stream router recognises them: REVIEW#<id> / META
    assert {k: variables[k] for k in variables if k.startswith("REVIEW_") and "KEY" in k} == {
        "REVIEW_PARTITION_KEY": "PK",
        "REVIEW_SORT_KEY": "SK",
        "REVIEW_KEY_PREFIX": "REVIEW#",
        "REVIEW_SORT_KEY_VALUE": "META",
    }
    statements = _statements(template, "ExportApprovalRequestFunctionServiceRole")
    assert _allows(statements, "sns:Publish", "ExportApprovalTopic")
    assert _allows(statements, "secretsmanager:GetSecretValue", "ExportApprovalSigningSecret")
    assert _allows(statements, "ssm:GetParameter", "rest-api-url")
    assert _allows(statements, "dynamodb:PutItem", "SessionsTable")
    assert not any("states:" in json.dumps(s["Action"]) for s in statements)
    assert not any(s["Resource"] == "*" for s in statements if "xray:PutTraceSegments" not in _actions(s))


def test_the_review_routes_are_public_gets_into_the_gates_decision_function(any_stage: SynthesizedStage) -> None:
    template = any_stage.template("Api")
    function_id, function = _resource(
        any_stage.template("Orchestration"), "AWS::Lambda::Function", "ExportApprovalDecisionFunction"
    )
    for decision in ("approve", "reject"):
        resource_id, _ = _resource(template, "AWS::ApiGateway::Resource", f"RestApireviewsid{decision}")
        template.has_resource_properties(
            "AWS::ApiGateway::Method",
            {
                "HttpMethod": "GET",
                "AuthorizationType": "NONE",
                "ResourceId": {"Ref": resource_id},
                "Integration": Match.object_like(
                    {
                        "Type": "AWS_PROXY",
                        "Uri": Match.serialized_json(Match.any_value()) if False else Match.any_value(),
                    }
                ),
            },
        )
        methods = [
            m
            for m in template.find_resources("AWS::ApiGateway::Method").values()
            if m["Properties"]["ResourceId"] == {"Ref": resource_id} and m["Properties"]["HttpMethod"] == "GET"
        ]
        assert function_id in json.dumps(methods[0]["Properties"]["Integration"]["Uri"])
        # The confirmation page's button POSTs to the same resource, into the same function
        posts = [
            m
            for m in template.find_resources("AWS::ApiGateway::Method").values()
            if m["Properties"]["ResourceId"] == {"Ref": resource_id} and m["Properties"]["HttpMethod"] == "POST"
        ]
        assert len(posts) == 1
        assert posts[0]["Properties"]["AuthorizationType"] == "NONE"
        assert function_id in json.dumps(posts[0]["Properties"]["Integration"]["Uri"])
    assert set(function["Properties"]["Environment"]["Variables"]) >= {"TABLE_NAME", "REVIEW_SECRET_ARN"}
    assert function["Properties"]["Handler"] == "gate_runtime.decide.handler"


def test_the_decision_function_can_decide_and_read_the_key_protected_secret(any_stage: SynthesizedStage) -> None:
    statements = _statements(any_stage.template("Orchestration"), "ExportApprovalDecisionFunctionServiceRole")

    assert _allows(statements, "states:SendTaskSuccess", "Export")
    assert _allows(statements, "states:SendTaskFailure", "Export")
    assert _allows(statements, "secretsmanager:GetSecretValue", "ExportApprovalSigningSecret")
    assert _allows(statements, "dynamodb:UpdateItem", "SessionsTable")
    # the secret is encrypted with the gate's key: without kms:Decrypt, GetSecretValue is denied
    decrypt = [
        s for s in statements if "kms:Decrypt" in _actions(s) and "ExportApprovalKey" in json.dumps(s["Resource"])
    ]
    assert decrypt
    assert decrypt[0]["Condition"]["StringEquals"]["kms:ViaService"]


# ---------------------------------------------------------------------------- the construct alone


def _stack() -> tuple[App, Stack, dynamodb.Table]:
    app = App()
    stack = Stack(app, "Gate")
    table = dynamodb.Table(
        stack, "Table", partition_key=dynamodb.Attribute(name="PK", type=dynamodb.AttributeType.STRING)
    )
    return app, stack, table


def _gate(stack: Stack, table: dynamodb.ITable, **props: Any) -> HumanApprovalGate:
    options: dict[str, Any] = {"existing_table": table, "link_base_url": "https://api.example/prod"}
    options.update(props)
    return HumanApprovalGate(stack, "Approval", **options)


def _synth_error(app: App) -> str:
    """The message CDK's validation fails the synthesis with."""
    with pytest.raises(RuntimeError) as raised:
        app.synth()
    return str(raised.value)


def test_fails_with_both_an_existing_topic_and_an_email() -> None:
    app, stack, table = _stack()
    _gate(stack, table, existing_topic=sns.Topic(stack, "T"), reviewer_email="a@b.cd").on_rejected(
        sfn.Fail(stack, "No")
    )
    assert "[Gate/Approval] give existing_topic or reviewer_email, not both" in _synth_error(app)


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"timeout": Duration.days(8)}, r"must not exceed review_ttl_days \(7 d\)"),
        ({"timeout": Duration.millis(10)}, r"timeout must be whole seconds in 1 s..365 days \(given 10 ms\)"),
        ({"timeout": Duration.millis(1500)}, r"timeout must be whole seconds in 1 s..365 days \(given 1500 ms\)"),
        ({"review_ttl_days": 0}, r"review_ttl_days must be an int in 1..365 \(given 0\)"),
        ({"link_base_url": "http://api.example"}, "link_base_url must be an https:// URL"),
        ({"subject": "x" * 101}, r"subject must be 1..100 characters \(given 101\)"),
        ({"outcome_path": "$.a.b"}, "outcome_path must be a top-level path"),
    ],
)
def test_fails_on_invalid_props_with_the_value_and_the_fix(props: dict[str, Any], message: str) -> None:
    app, stack, table = _stack()
    _gate(stack, table, **props).on_rejected(sfn.Fail(stack, "No"))
    assert re.search(r"\[Gate/Approval\] .*" + message, _synth_error(app))


def test_fails_to_synthesize_without_a_rejection_path() -> None:
    app, stack, table = _stack()
    gate = _gate(stack, table)
    sfn.StateMachine(stack, "Machine", definition_body=sfn.DefinitionBody.from_chainable(gate))

    with pytest.raises(Exception, match=r"no rejection path; attach one with gate.on_rejected"):
        app.synth()


def test_fails_when_the_rejection_path_is_attached_twice() -> None:
    app, stack, table = _stack()
    gate = _gate(stack, table).on_rejected(sfn.Fail(stack, "No"))
    gate.on_rejected(sfn.Fail(stack, "Again"))
    sfn.StateMachine(stack, "Machine", definition_body=sfn.DefinitionBody.from_chainable(gate))

    assert "[Gate/Approval] on_rejected was called twice: the rejection path is attached already" in _synth_error(app)


def test_fails_to_grant_decide_without_a_state_machine() -> None:
    app, stack, table = _stack()
    gate = _gate(stack, table).on_rejected(sfn.Fail(stack, "No"))
    role = iam.Role(stack, "Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    gate.grant_decide(role)

    assert re.search(r"\[Gate/Approval\] grant_decide needs the state machine .*gate.bind", _synth_error(app))


def test_grant_decide_returns_its_grant() -> None:
    _, stack, table = _stack()
    gate = _gate(stack, table).on_rejected(sfn.Fail(stack, "No"))
    machine = sfn.StateMachine(stack, "Machine", definition_body=sfn.DefinitionBody.from_chainable(gate))
    role = iam.Role(stack, "Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))

    grant = gate.grant_decide(role, machine)

    assert isinstance(grant, iam.Grant)
    assert grant.success


def test_defaults_a_new_key_topic_and_secret_and_a_week_long_wait() -> None:
    _, stack, table = _stack()
    gate = _gate(stack, table).on_rejected(sfn.Fail(stack, "No"))
    sfn.StateMachine(stack, "Machine", definition_body=sfn.DefinitionBody.from_chainable(gate))
    template = Template.from_stack(stack)

    template.resource_count_is("AWS::KMS::Key", 1)
    template.has_resource_properties("AWS::KMS::Key", {"EnableKeyRotation": True})
    template.resource_count_is("AWS::SNS::Topic", 1)
    template.resource_count_is("AWS::SNS::Subscription", 0)
    template.resource_count_is("AWS::SecretsManager::Secret", 1)
    template.has_resource_properties(
        "AWS::Lambda::Function",
        {
            "Environment": {
                "Variables": Match.object_like(
                    {
                        "LINK_BASE_URL": "https://api.example/prod",
                        "REVIEW_TIMEOUT_SECONDS": str(7 * 86400),
                        "REVIEW_TTL_DAYS": "7",
                        "REVIEW_SUBJECT": "Approval needed",
                    }
                )
            }
        },
    )
    assert gate.timeout.to_days() == 7


def test_an_existing_topic_and_secret_are_used_as_given() -> None:
    from aws_cdk import aws_secretsmanager as secretsmanager

    _, stack, table = _stack()
    topic = sns.Topic(stack, "Mine")
    secret = secretsmanager.Secret(stack, "MySecret")
    gate = _gate(stack, table, existing_topic=topic, existing_signing_secret=secret).on_rejected(sfn.Fail(stack, "No"))

    assert gate.topic is topic
    assert gate.signing_secret is secret
    Template.from_stack(stack).resource_count_is("AWS::KMS::Key", 0)


def test_grant_decide_from_a_later_stack_creates_no_cycle() -> None:
    # Given the gate in one stack and the link handler's role in a stack that depends on it
    app, stack, table = _stack()
    gate = _gate(stack, table).on_rejected(sfn.Fail(stack, "No"))
    machine = sfn.StateMachine(stack, "Machine", definition_body=sfn.DefinitionBody.from_chainable(gate))
    api = Stack(app, "Api")
    role = iam.Role(api, "LinkRole", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))

    # When the later stack is granted what deciding needs
    gate.grant_decide(role, machine)
    assembly = app.synth()  # a cycle would fail here

    # Then every permission sits on the role, and the gate's stack does not reference the role
    api_template = assembly.get_stack_by_name("Api").template
    gate_template = json.dumps(assembly.get_stack_by_name("Gate").template)
    statements = [
        s
        for r in api_template["Resources"].values()
        if r["Type"] == "AWS::IAM::Policy"
        for s in r["Properties"]["PolicyDocument"]["Statement"]
    ]
    granted = set().union(*(_actions(s) for s in statements))
    assert {
        "states:SendTaskSuccess",
        "states:SendTaskFailure",
        "secretsmanager:GetSecretValue",
        "kms:Decrypt",
    } <= granted
    assert {"dynamodb:GetItem", "dynamodb:UpdateItem"} <= granted
    assert "LinkRole" not in gate_template


def test_the_gate_with_its_defaults_is_nag_clean(tmp_path: Any) -> None:
    from aws_cdk import Stage, Validations
    from cdk_nag import AwsSolutionsChecks

    app = App(outdir=str(tmp_path))
    stage = Stage(app, "NagGate")
    Validations.of(stage).add_plugins(AwsSolutionsChecks(stage))
    stack = Stack(stage, "Gate")
    table = dynamodb.Table(
        stack,
        "Table",
        partition_key=dynamodb.Attribute(name="PK", type=dynamodb.AttributeType.STRING),
        point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
            point_in_time_recovery_enabled=True
        ),
    )
    gate = _gate(stack, table, reviewer_email="a@b.cd").on_rejected(sfn.Fail(stack, "No"))
    # a gate runs inside a caller's state machine; the caller's machine is not under test here
    sfn.Chain.start(gate)

    app.synth()  # raises on any unacknowledged AwsSolutions finding
