"""The erasure workflow and its routes in the synthesized stages: states, catches, grants, the gateway methods."""

from __future__ import annotations

import json
from typing import Any

from embedded.synth import SynthesizedStage
from tests.infra.test_orchestration import _machines, _states

ERASURE_STATES = {
    "EraseObjects",
    "EraseItems",
    "DeleteUser",
    "ShapeReceipt",
    "WriteReceipt",
    "ErasureComplete",
    "RecordFailure",
    "ErasureFailed",
}


def _erasure(stage: SynthesizedStage) -> dict[str, Any]:
    machines = _machines(stage)
    (name,) = [lid for lid in machines if lid.startswith("Erasure")]
    return machines[name]


def _role_statements(stage: SynthesizedStage, handler: str) -> list[dict[str, Any]]:
    """Every statement of the policies attached to the role of the function whose Handler is ``handler``."""
    resources = stage.templates["Orchestration"]["Resources"]
    (function,) = [
        r
        for r in resources.values()
        if r["Type"] == "AWS::Lambda::Function" and r["Properties"].get("Handler") == handler
    ]
    role = function["Properties"]["Role"]["Fn::GetAtt"][0]
    found: list[dict[str, Any]] = []
    for res in resources.values():
        if res["Type"] == "AWS::IAM::Policy" and {"Ref": role} in res["Properties"]["Roles"]:
            found += res["Properties"]["PolicyDocument"]["Statement"]
    return found


def _actions(statements: list[dict[str, Any]]) -> set[str]:
    actions: set[str] = set()
    for statement in statements:
        named = statement["Action"]
        actions.update([named] if isinstance(named, str) else named)
    return actions


def test_the_erasure_runs_objects_items_user_then_the_receipt_and_every_step_records_a_failure(
    any_stage: SynthesizedStage,
) -> None:
    machine = _erasure(any_stage)
    definition = machine["definition"]
    states = _states(definition)
    assert set(states) == ERASURE_STATES
    assert definition["StartAt"] == "EraseObjects"
    order = [states["EraseObjects"]["Next"], states["EraseItems"]["Next"], states["DeleteUser"]["Next"]]
    assert order == ["EraseItems", "DeleteUser", "ShapeReceipt"]
    for name in ("EraseObjects", "EraseItems", "DeleteUser", "WriteReceipt"):
        assert [c["Next"] for c in states[name]["Catch"]] == ["RecordFailure"], name
        assert states[name]["Retry"], name
    # The receipt and the failure are direct DynamoDB writes of the erasure record, no Lambda.
    for name in ("WriteReceipt", "RecordFailure"):
        assert states[name]["Resource"].endswith(":states:::dynamodb:updateItem"), name
    assert states["RecordFailure"]["Next"] == "ErasureFailed"
    assert [c["Next"] for c in states["RecordFailure"]["Catch"]] == ["ErasureFailed"]
    assert states["ErasureFailed"]["Type"] == "Fail"


def test_every_erasure_function_has_exactly_the_grants_of_its_calls(dev: SynthesizedStage) -> None:
    objects = _actions(_role_statements(dev, "lambdas.orchestration.erasure.objects"))
    assert {"s3:DeleteObjectVersion", "s3:ListBucketVersions", "dynamodb:Query"} <= objects
    # Object Lock is never touched: no bypass of a retention, and no statement on the audit bucket.
    assert "s3:BypassGovernanceRetention" not in objects
    statements = json.dumps(_role_statements(dev, "lambdas.orchestration.erasure.objects"))
    assert "AuditBucket" not in statements
    assert "ArchiveBucket" in statements
    items = _actions(_role_statements(dev, "lambdas.orchestration.erasure.table"))
    assert {"dynamodb:Scan", "dynamodb:BatchWriteItem", "states:SendTaskFailure"} <= items
    user = _actions(_role_statements(dev, "lambdas.orchestration.erasure.user"))
    assert "cognito-idp:AdminDeleteUser" in user
    assert not any(action.startswith("s3:") or action.startswith("dynamodb:") for action in user)


def test_the_customer_data_routes_use_the_authorizer_and_validate_the_id(dev: SynthesizedStage) -> None:
    resources = dev.templates["Api"]["Resources"]
    methods = {
        r["Properties"]["OperationName"]: r["Properties"]
        for r in resources.values()
        if r["Type"] == "AWS::ApiGateway::Method" and "OperationName" in r["Properties"]
    }
    for name in ("DeleteCustomersIdData", "GetCustomersIdDataErasure"):
        method = methods[name]
        assert method["AuthorizationType"] == "CUSTOM", name
        assert method["RequestParameters"]["method.request.path.id"] is True, name
        assert "RequestValidatorId" in method, name
    assert methods["DeleteCustomersIdData"]["RequestParameters"]["method.request.header.Idempotency-Key"] is False
