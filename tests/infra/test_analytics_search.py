"""The analytics search collection: nothing of it in dev and prod (off), all of it where a stage turns it on.

On: a TIMESERIES collection, its encryption (the stage's customer key), network (private through
one VPC endpoint, or public when the setting says so) and data-access (the delivery role writes
the one index) policies, and a delivery stream with refused documents backed up encrypted to the
analytics bucket, delivery logs and a least-privilege role; the router feeds it. cdk-nag and
cfn-lint pass on that stage.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest

from embedded.synth import SynthesizedStage, stage_config, synthesize
from stacks.config import with_overrides
from stacks.search_config import AnalyticsSearchConfig
from tests.support.cfn_lint import findings as cfn_lint_findings

PRIVATE = AnalyticsSearchConfig(
    enabled=True,
    vpc_endpoint_id="vpce-0123456789abcdef0",
    subnet_ids=("subnet-0abc1234", "subnet-0def5678"),
    security_group_ids=("sg-0abc1234",),
)
PUBLIC = AnalyticsSearchConfig(enabled=True, public_access=True, standby_replicas=False, index="changes")
ROUTER = "lambdas.events.router.handler"


@functools.cache
def private_stage() -> SynthesizedStage:
    """A dev stage with a private collection, synthesized with cdk-nag on (it fails on any finding)."""
    return synthesize(with_overrides(stage_config("dev"), name="search", analytics_search=PRIVATE), nag=True)["search"]


@functools.cache
def public_stage() -> SynthesizedStage:
    return synthesize(with_overrides(stage_config("dev"), name="public", analytics_search=PUBLIC))["public"]


def _resources(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {lid: r for lid, r in template["Resources"].items() if r["Type"] == kind}


def _one(template: dict[str, Any], kind: str, **properties: Any) -> tuple[str, dict[str, Any]]:
    found = [
        (lid, r)
        for lid, r in _resources(template, kind).items()
        if all(r["Properties"].get(k) == v for k, v in properties.items())
    ]
    assert len(found) == 1, f"{kind} {properties}: {[lid for lid, _ in found]}"
    return found[0]


def _policy(value: Any) -> Any:
    """A policy document property as JSON, each token inside it kept as the token itself."""
    if isinstance(value, str):
        return json.loads(value)
    tokens: dict[str, Any] = {}
    text = ""
    for part in value["Fn::Join"][1]:
        if isinstance(part, str):
            text += part
        else:
            marker = f"@token{len(tokens)}@"
            tokens[marker] = part
            text += marker
    return json.loads(text, object_hook=lambda o: {k: _untoken(v, tokens) for k, v in o.items()})


def _untoken(value: Any, tokens: dict[str, Any]) -> Any:
    if isinstance(value, list):
        return [_untoken(v, tokens) for v in value]
    return tokens.get(value, value) if isinstance(value, str) else value


def _router(template: dict[str, Any]) -> dict[str, Any]:
    (_, router) = next(
        (lid, r)
        for lid, r in _resources(template, "AWS::Lambda::Function").items()
        if r["Properties"].get("Handler") == ROUTER
    )
    return router


def _statements(template: dict[str, Any], role_id: str) -> list[dict[str, Any]]:
    return [
        s
        for policy in _resources(template, "AWS::IAM::Policy").values()
        if {"Ref": role_id} in policy["Properties"]["Roles"]
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def _actions(statement: dict[str, Any]) -> list[str]:
    action = statement["Action"]
    return [action] if isinstance(action, str) else list(action)


# ------------------------------------------------------------------ off


def test_off_in_dev_and_prod_leaves_no_trace(any_stage: SynthesizedStage) -> None:
    for part, template in any_stage.templates.items():
        kinds = {r["Type"] for r in template["Resources"].values()}
        assert not {k for k in kinds if k.startswith("AWS::OpenSearchServerless::")}, part
    events = any_stage.templates["Events"]
    streams = _resources(events, "AWS::KinesisFirehose::DeliveryStream")
    assert len(streams) == 2  # analytics and audit, both into S3
    assert all("ExtendedS3DestinationConfiguration" in s["Properties"] for s in streams.values())
    assert "SEARCH_STREAM_NAME" not in _router(events)["Properties"]["Environment"]["Variables"]


# ------------------------------------------------------------------ on, private


@pytest.mark.slow
def test_the_collection_is_timeseries_with_standby_replicas_after_its_policies() -> None:
    events = private_stage().templates["Events"]
    _, collection = _one(events, "AWS::OpenSearchServerless::Collection")
    assert collection["Properties"]["Name"] == "mangaassist-search"
    assert collection["Properties"]["Type"] == "TIMESERIES"
    assert collection["Properties"]["StandbyReplicas"] == "ENABLED"
    encryption, _ = _one(events, "AWS::OpenSearchServerless::SecurityPolicy", Type="encryption")
    network, _ = _one(events, "AWS::OpenSearchServerless::SecurityPolicy", Type="network")
    assert {encryption, network} <= set(collection["DependsOn"])
    assert collection["DeletionPolicy"] == "Delete"  # dev's removal policy


@pytest.mark.slow
def test_the_encryption_policy_names_the_stages_customer_key() -> None:
    stage = private_stage()
    _, policy = _one(stage.templates["Events"], "AWS::OpenSearchServerless::SecurityPolicy", Type="encryption")
    document = _policy(policy["Properties"]["Policy"])
    assert document["Rules"] == [{"ResourceType": "collection", "Resource": ["collection/mangaassist-search"]}]
    assert document["AWSOwnedKey"] is False
    key_output = document["KmsARN"]["Fn::GetStackOutput"]
    assert key_output["StackName"] == "MangaAssist-search-Storage"
    assert key_output["OutputName"].startswith("PublishOutputFnGetAttDataKey")


@pytest.mark.slow
def test_the_network_policy_admits_only_the_vpc_endpoint() -> None:
    _, policy = _one(private_stage().templates["Events"], "AWS::OpenSearchServerless::SecurityPolicy", Type="network")
    assert _policy(policy["Properties"]["Policy"]) == [
        {
            "Rules": [
                {"ResourceType": "collection", "Resource": ["collection/mangaassist-search"]},
                {"ResourceType": "dashboard", "Resource": ["collection/mangaassist-search"]},
            ],
            "AllowFromPublic": False,
            "SourceVPCEs": ["vpce-0123456789abcdef0"],
        }
    ]


@pytest.mark.slow
def test_the_data_access_policy_lets_only_the_delivery_role_write_the_one_index() -> None:
    events = private_stage().templates["Events"]
    _, policy = _one(events, "AWS::OpenSearchServerless::AccessPolicy")
    assert policy["Properties"]["Type"] == "data"
    (rule_set,) = _policy(policy["Properties"]["Policy"])
    assert rule_set["Rules"] == [
        {
            "ResourceType": "index",
            "Resource": ["index/mangaassist-search/sessions"],
            "Permission": ["aoss:CreateIndex", "aoss:DescribeIndex", "aoss:UpdateIndex", "aoss:WriteDocument"],
        }
    ]
    _, stream = _search_stream(events)
    role = stream["Properties"]["AmazonOpenSearchServerlessDestinationConfiguration"]["RoleARN"]
    assert rule_set["Principal"] == [role]


@pytest.mark.slow
def test_the_index_keeps_documents_as_long_as_the_analytics_bucket_and_no_longer() -> None:
    _, policy = _one(private_stage().templates["Events"], "AWS::OpenSearchServerless::LifecyclePolicy")
    assert policy["Properties"]["Type"] == "retention"
    assert _policy(policy["Properties"]["Policy"]) == {
        "Rules": [
            {"ResourceType": "index", "Resource": ["index/mangaassist-search/sessions"], "MinIndexRetention": "90d"}
        ]
    }


def _search_stream(template: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    (found,) = [
        (lid, r)
        for lid, r in _resources(template, "AWS::KinesisFirehose::DeliveryStream").items()
        if "AmazonOpenSearchServerlessDestinationConfiguration" in r["Properties"]
    ]
    return found


@pytest.mark.slow
def test_the_delivery_stream_indexes_backs_up_refusals_encrypted_and_logs() -> None:
    events = private_stage().templates["Events"]
    collection, _ = _one(events, "AWS::OpenSearchServerless::Collection")
    _, stream = _search_stream(events)
    props = stream["Properties"]
    assert props["DeliveryStreamType"] == "DirectPut"
    assert props["DeliveryStreamEncryptionConfigurationInput"]["KeyType"] == "CUSTOMER_MANAGED_CMK"
    destination = props["AmazonOpenSearchServerlessDestinationConfiguration"]
    assert destination["CollectionEndpoint"] == {"Fn::GetAtt": [collection, "CollectionEndpoint"]}
    assert destination["IndexName"] == "sessions"
    assert destination["BufferingHints"] == {"IntervalInSeconds": 60, "SizeInMBs": 5}
    assert destination["RetryOptions"] == {"DurationInSeconds": 300}
    assert destination["S3BackupMode"] == "FailedDocumentsOnly"
    backup = destination["S3Configuration"]
    assert backup["Prefix"] == "search-failed/"
    assert backup["CompressionFormat"] == "GZIP"
    assert "AnalyticsBucket" in backup["BucketARN"]["Fn::GetStackOutput"]["OutputName"]
    assert "DataKey" in json.dumps(backup["EncryptionConfiguration"]["KMSEncryptionConfig"]["AWSKMSKeyARN"])
    for logging in (destination["CloudWatchLoggingOptions"], backup["CloudWatchLoggingOptions"]):
        assert logging["Enabled"] is True
    assert destination["VpcConfiguration"] == {
        "RoleARN": destination["RoleARN"],
        "SubnetIds": ["subnet-0abc1234", "subnet-0def5678"],
        "SecurityGroupIds": ["sg-0abc1234"],
    }


@pytest.mark.slow
def test_the_delivery_role_reaches_the_collection_the_backup_prefix_and_its_log_group_only() -> None:
    events = private_stage().templates["Events"]
    collection, _ = _one(events, "AWS::OpenSearchServerless::Collection")
    _, stream = _search_stream(events)
    role = stream["Properties"]["AmazonOpenSearchServerlessDestinationConfiguration"]["RoleARN"]["Fn::GetAtt"][0]
    statements = _statements(events, role)
    aoss = [s for s in statements if any(a.startswith("aoss:") for a in _actions(s))]
    assert aoss == [{"Action": "aoss:APIAccessAll", "Effect": "Allow", "Resource": {"Fn::GetAtt": [collection, "Arn"]}}]
    writes = [s for s in statements if "s3:PutObject" in _actions(s)]
    assert len(writes) == 1
    assert json.dumps(writes[0]["Resource"]).endswith('"/search-failed/*"]]}')
    assert not [s for s in statements if "s3:DeleteObject*" in _actions(s)]
    logs = [s for s in statements if "logs:PutLogEvents" in _actions(s)]
    assert [s["Resource"]["Fn::GetAtt"][0].startswith("AnalyticsSearchLogGroup") for s in logs] == [True]
    ec2 = sorted(a for s in statements for a in _actions(s) if a.startswith("ec2:"))
    assert ec2 == [
        "ec2:CreateNetworkInterface",
        "ec2:CreateNetworkInterfacePermission",
        "ec2:DeleteNetworkInterface",
        "ec2:DescribeNetworkInterfaces",
        "ec2:DescribeSecurityGroups",
        "ec2:DescribeSubnets",
        "ec2:DescribeVpcAttribute",
        "ec2:DescribeVpcs",
    ]
    assert not [a for s in statements for a in _actions(s) if a in ("*", "aoss:*", "s3:*", "kms:*")]


@pytest.mark.slow
def test_the_router_feeds_the_search_stream_and_may_put_records_into_it() -> None:
    events = private_stage().templates["Events"]
    stream_id, _ = _search_stream(events)
    router = _router(events)
    assert router["Properties"]["Environment"]["Variables"]["SEARCH_STREAM_NAME"] == {"Ref": stream_id}
    role = router["Properties"]["Role"]["Fn::GetAtt"][0]
    arn = {"Fn::GetAtt": [stream_id, "Arn"]}
    granted = [s for s in _statements(events, role) if arn in _resources_of(s)]
    assert [sorted(_actions(s)) for s in granted] == [["firehose:PutRecord", "firehose:PutRecordBatch"]]


def _resources_of(statement: dict[str, Any]) -> list[Any]:
    resource = statement["Resource"]
    return resource if isinstance(resource, list) else [resource]


@pytest.mark.slow
def test_cfn_lint_passes_on_the_stage_with_the_collection(tmp_path: Path) -> None:
    paths = []
    for part, template in private_stage().templates.items():
        paths.append(tmp_path / f"{part}.template.json")
        paths[-1].write_text(json.dumps(template))
    assert cfn_lint_findings(paths) == []


# ------------------------------------------------------------------ on, public


@pytest.mark.slow
def test_a_public_collection_says_so_in_its_network_policy_and_delivers_without_the_vpc() -> None:
    events = public_stage().templates["Events"]
    _, policy = _one(events, "AWS::OpenSearchServerless::SecurityPolicy", Type="network")
    (rule,) = _policy(policy["Properties"]["Policy"])
    assert rule["AllowFromPublic"] is True
    assert "SourceVPCEs" not in rule
    _, collection = _one(events, "AWS::OpenSearchServerless::Collection")
    assert collection["Properties"]["StandbyReplicas"] == "DISABLED"
    _, stream = _search_stream(events)
    destination = stream["Properties"]["AmazonOpenSearchServerlessDestinationConfiguration"]
    assert destination["IndexName"] == "changes"
    assert "VpcConfiguration" not in destination
    role = destination["RoleARN"]["Fn::GetAtt"][0]
    assert not [a for s in _statements(events, role) for a in _actions(s) if a.startswith("ec2:")]
