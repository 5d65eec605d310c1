"""HumanApprovalGate as another team uses it: its own table, key layouts, review routes, bind."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk.assertions import Match, Template

from constructs_lib import HumanApprovalGate

LINKS = "https://api.example.org/v1"


def _stack() -> tuple[App, Stack]:
    app = App()
    return app, Stack(app, "Gate")


def _machine(stack: Stack, gate: HumanApprovalGate) -> sfn.StateMachine:
    gate.on_rejected(sfn.Fail(stack, "Declined"))
    return sfn.StateMachine(stack, "Machine", definition_body=sfn.DefinitionBody.from_chainable(gate))


def _functions(template: Template) -> dict[str, dict[str, Any]]:
    return {lid: r["Properties"] for lid, r in template.find_resources("AWS::Lambda::Function").items()}


def _variables(template: Template, handler: str) -> dict[str, Any]:
    (props,) = [p for p in _functions(template).values() if p["Handler"] == handler]
    return dict(props["Environment"]["Variables"])


def _synth_error(app: App) -> str:
    with pytest.raises(RuntimeError) as raised:
        app.synth()
    return str(raised.value)


def test_without_a_table_the_gate_keeps_reviews_in_a_small_table_of_its_own() -> None:
    _, stack = _stack()
    _machine(stack, HumanApprovalGate(stack, "Approval", link_base_url=LINKS))
    template = Template.from_stack(stack)

    template.resource_count_is("AWS::DynamoDB::Table", 1)
    template.has_resource(
        "AWS::DynamoDB::Table",
        {
            "Properties": {
                "KeySchema": [{"AttributeName": "PK", "KeyType": "HASH"}],
                "BillingMode": "PAY_PER_REQUEST",
                "SSESpecification": Match.object_like({"SSEEnabled": True, "SSEType": "KMS"}),
                "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
                "TimeToLiveSpecification": {"AttributeName": "ttl", "Enabled": True},
            },
            "DeletionPolicy": "Delete",
        },
    )
    variables = _variables(template, "gate_runtime.request.handler")
    assert variables["REVIEW_PARTITION_KEY"] == "PK"
    assert variables["REVIEW_KEY_PREFIX"] == "REVIEW#"
    assert "REVIEW_SORT_KEY" not in variables


def test_both_functions_run_the_gates_own_code_asset_and_no_app_handler() -> None:
    _, stack = _stack()
    _machine(stack, HumanApprovalGate(stack, "Approval", link_base_url=LINKS))
    functions = _functions(Template.from_stack(stack))

    assert {p["Handler"] for p in functions.values()} == {"gate_runtime.request.handler", "gate_runtime.decide.handler"}
    assert len({json.dumps(p["Code"]) for p in functions.values()}) == 1


def test_a_table_of_the_app_lends_its_key_names() -> None:
    _, stack = _stack()
    table = dynamodb.Table(
        stack,
        "Table",
        partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
        sort_key=dynamodb.Attribute(name="sk", type=dynamodb.AttributeType.STRING),
    )
    _machine(
        stack, HumanApprovalGate(stack, "Approval", existing_table=table, link_base_url=LINKS, sort_key_value="REVIEW")
    )

    variables = _variables(Template.from_stack(stack), "gate_runtime.decide.handler")
    assert (variables["REVIEW_PARTITION_KEY"], variables["REVIEW_SORT_KEY"]) == ("pk", "sk")
    assert variables["REVIEW_SORT_KEY_VALUE"] == "REVIEW"


def test_an_imported_table_takes_its_key_names_as_props() -> None:
    _, stack = _stack()
    table = dynamodb.Table.from_table_name(stack, "Imported", "orders")
    gate = HumanApprovalGate(stack, "Approval", existing_table=table, partition_key="id", link_base_url=LINKS)
    _machine(stack, gate)

    variables = _variables(Template.from_stack(stack), "gate_runtime.request.handler")
    assert variables["REVIEW_PARTITION_KEY"] == "id"
    assert "REVIEW_SORT_KEY" not in variables


def test_fails_for_an_imported_table_without_its_partition_key() -> None:
    app, stack = _stack()
    table = dynamodb.Table.from_table_name(stack, "Imported", "orders")
    _machine(stack, HumanApprovalGate(stack, "Approval", existing_table=table, link_base_url=LINKS))

    assert "[Gate/Approval] partition_key is required for an imported table" in _synth_error(app)


def test_fails_when_the_key_names_given_differ_from_the_tables() -> None:
    app, stack = _stack()
    table = dynamodb.Table(
        stack, "Table", partition_key=dynamodb.Attribute(name="PK", type=dynamodb.AttributeType.STRING)
    )
    _machine(stack, HumanApprovalGate(stack, "Approval", existing_table=table, partition_key="id", link_base_url=LINKS))

    assert "[Gate/Approval] partition_key must be the table's partition key 'PK' (given 'id')" in _synth_error(app)


def test_review_routes_are_public_gets_into_the_decision_function() -> None:
    # Given a gate and a REST API
    _, stack = _stack()
    gate = HumanApprovalGate(stack, "Approval", link_base_url=LINKS)
    _machine(stack, gate)
    api = apigw.RestApi(stack, "Api")

    # When the review links are mounted with an operation name prefix
    methods = gate.add_review_routes(api.root, method_options=apigw.MethodOptions(operation_name="Review"))
    template = Template.from_stack(stack)

    # Then there are two GETs (the confirmation pages) and two POSTs (the decisions), without
    # authorizer, that need the id and proxy to the decision function
    assert sorted(methods) == ["approve", "approve_post", "reject", "reject_post"]
    for name in ("ReviewApproveConfirmed", "ReviewRejectConfirmed"):
        template.has_resource_properties(
            "AWS::ApiGateway::Method",
            {"HttpMethod": "POST", "OperationName": name, "AuthorizationType": "NONE"},
        )
    decision_id = next(lid for lid, p in _functions(template).items() if p["Handler"] == "gate_runtime.decide.handler")
    for name in ("ReviewApprove", "ReviewReject"):
        template.has_resource_properties(
            "AWS::ApiGateway::Method",
            {
                "HttpMethod": "GET",
                "OperationName": name,
                "AuthorizationType": "NONE",
                "RequestParameters": {"method.request.path.id": True},
                "Integration": Match.object_like({"Type": "AWS_PROXY"}),
            },
        )
    uris = [
        json.dumps(m["Properties"]["Integration"]["Uri"])
        for m in template.find_resources("AWS::ApiGateway::Method").values()
    ]
    assert len(uris) == 4  # GET and POST of approve and reject
    assert all(decision_id in uri for uri in uris)


def test_bind_lets_the_decision_function_complete_the_machines_tasks() -> None:
    _, stack = _stack()
    gate = HumanApprovalGate(stack, "Approval", link_base_url=LINKS)
    gate.bind(_machine(stack, gate))
    template = Template.from_stack(stack)

    role_id = next(
        lid
        for lid in template.find_resources("AWS::IAM::Role")
        if lid.startswith("ApprovalDecisionFunctionServiceRole")
    )
    statements = [
        s
        for p in template.find_resources("AWS::IAM::Policy").values()
        if {"Ref": role_id} in p["Properties"]["Roles"]
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]
    granted = [s for s in statements if "states:SendTaskSuccess" in json.dumps(s["Action"])]
    assert granted
    assert "Machine" in json.dumps(granted[0]["Resource"])


def test_the_gate_with_its_own_table_is_nag_clean(tmp_path: Any) -> None:
    from aws_cdk import Stage, Validations
    from cdk_nag import AwsSolutionsChecks

    app = App(outdir=str(tmp_path))
    stage = Stage(app, "NagGate")
    Validations.of(stage).add_plugins(AwsSolutionsChecks(stage))
    stack = Stack(stage, "Gate")
    gate = HumanApprovalGate(stack, "Approval", link_base_url=LINKS, reviewer_email="approver@example.com")
    gate.on_rejected(sfn.Fail(stack, "Declined"))
    sfn.Chain.start(gate)  # a caller's state machine is not under test here

    app.synth()  # raises on any unacknowledged AwsSolutions finding
