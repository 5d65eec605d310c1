"""The harness's intrinsic resolution, dependency order and assembly reading (no moto needed)."""

from __future__ import annotations

from typing import Any

import pytest

from embedded.cloudformation.deploy import DeploymentError, dependency_order, references
from embedded.cloudformation.intrinsics import NO_VALUE, Deployed, Pseudo, Resolver, Unresolvable

PSEUDO = Pseudo(region="eu-west-1", account="111122223333", stack_name="App-Events")


def _resolver(**overrides: Any) -> Resolver:
    options: dict[str, Any] = {
        "pseudo": PSEUDO,
        "resources": {
            "Queue": Deployed("Queue", "AWS::SQS::Queue", "https://q/url", {"Arn": "arn:aws:sqs:eu-west-1:1:q"}),
            "Fn": Deployed("Fn", "AWS::Lambda::Function", "fn-name", {"Arn": "arn:aws:lambda:eu-west-1:1:function:fn"}),
            "Policy": Deployed("Policy", "AWS::IAM::Policy", "passive-Policy", live=False),
        },
        "parameters": {"Layer": "arn:layer:1"},
        "exports": {"Storage:TableName": "sessions"},
        "conditions": {"IsProd": {"Fn::Equals": ["prod", "dev"]}},
    }
    options.update(overrides)
    return Resolver(**options)


def test_ref_getatt_and_pseudo_parameters() -> None:
    r = _resolver()
    assert r.resolve({"Ref": "Queue"}) == "https://q/url"
    assert r.resolve({"Fn::GetAtt": ["Fn", "Arn"]}) == "arn:aws:lambda:eu-west-1:1:function:fn"
    assert r.resolve({"Fn::GetAtt": "Queue.Arn"}) == "arn:aws:sqs:eu-west-1:1:q"
    assert r.resolve({"Ref": "AWS::Region"}) == "eu-west-1"
    assert r.resolve({"Ref": "AWS::AccountId"}) == "111122223333"
    assert r.resolve({"Ref": "AWS::Partition"}) == "aws"
    assert r.resolve({"Ref": "AWS::URLSuffix"}) == "amazonaws.com"
    assert r.resolve({"Ref": "Layer"}) == "arn:layer:1"


def test_join_sub_select_split_import() -> None:
    r = _resolver()
    assert r.resolve({"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":s3:::b"]]}) == "arn:aws:s3:::b"
    assert r.resolve({"Fn::Sub": "cdk-${AWS::AccountId}-${AWS::Region}"}) == "cdk-111122223333-eu-west-1"
    assert r.resolve({"Fn::Sub": "${Fn.Arn}/${Queue}"}) == "arn:aws:lambda:eu-west-1:1:function:fn/https://q/url"
    assert r.resolve({"Fn::Sub": ["${x}-${!Literal}", {"x": {"Ref": "AWS::Region"}}]}) == "eu-west-1-${Literal}"
    assert r.resolve({"Fn::Select": [1, {"Fn::Split": [":", "a:b:c"]}]}) == "b"
    assert r.resolve({"Fn::ImportValue": "Storage:TableName"}) == "sessions"


def test_conditions_and_no_value_drop_properties() -> None:
    r = _resolver()
    value = r.resolve({"A": {"Fn::If": ["IsProd", "yes", {"Ref": "AWS::NoValue"}]}, "B": [1, {"Ref": "AWS::NoValue"}]})
    assert value == {"B": [1]}
    assert r.resolve({"Ref": "AWS::NoValue"}) is NO_VALUE


def test_passive_resources_resolve_to_placeholders() -> None:
    assert "Policy" in _resolver().resolve({"Fn::GetAtt": ["Policy", "Id"]})


@pytest.mark.parametrize(
    "value",
    [
        {"Ref": "Missing"},
        {"Fn::GetAtt": ["Queue", "Nope"]},
        {"Fn::ImportValue": "Nobody:Exports"},
        {"Fn::Transform": {}},
        {"Fn::Join": ["", [{"a": 1}]]},
    ],
)
def test_fails_loudly_on_what_it_cannot_resolve(value: Any) -> None:
    with pytest.raises(Unresolvable):
        _resolver().resolve(value)


def test_dependency_order_follows_refs_getatts_subs_and_depends_on() -> None:
    resources: dict[str, dict[str, Any]] = {
        "Rule": {"Properties": {"Targets": [{"Arn": {"Fn::GetAtt": ["Machine", "Arn"]}}]}},
        "Machine": {"Properties": {"DefinitionString": {"Fn::Sub": "${Fn.Arn} ${Queue}"}}},
        "Fn": {"Properties": {}, "DependsOn": "Role"},
        "Role": {"Properties": {}},
        "Queue": {"Properties": {}},
    }
    order = dependency_order(resources)
    assert order.index("Role") < order.index("Fn") < order.index("Machine") < order.index("Rule")
    assert order.index("Queue") < order.index("Machine")
    assert set(references({"Fn::Sub": ["${a} ${B.Arn}", {"a": "x"}]})) == {"B"}


def test_fails_on_circular_dependencies() -> None:
    with pytest.raises(DeploymentError, match="circular"):
        dependency_order({"A": {"Properties": {"x": {"Ref": "B"}}}, "B": {"Properties": {"y": {"Ref": "A"}}}})
