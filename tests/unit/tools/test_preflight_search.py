"""``make preflight`` on a stage with the analytics search collection: its network path, with Stubber."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from stacks.search_config import AnalyticsSearchConfig
from tools.preflight import check_search

REGION = "eu-west-1"
ENDPOINT = "vpce-0123456789abcdef0"
PRIVATE = AnalyticsSearchConfig(
    enabled=True, vpc_endpoint_id=ENDPOINT, subnet_ids=("subnet-0abc1234",), security_group_ids=("sg-0abc1234",)
)


@pytest.fixture
def clients() -> Iterator[tuple[Any, Stubber, Any, Stubber]]:
    session = boto3.session.Session(region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing")
    aoss, ec2 = session.client("opensearchserverless"), session.client("ec2")
    stubs = Stubber(aoss), Stubber(ec2)
    for stub in stubs:
        stub.activate()
    yield aoss, stubs[0], ec2, stubs[1]
    for stub in stubs:
        stub.assert_no_pending_responses()
        stub.deactivate()


def _endpoint(stub: Stubber, status: str = "ACTIVE", vpc: str = "vpc-0aaa1111") -> None:
    stub.add_response(
        "batch_get_vpc_endpoint",
        {"vpcEndpointDetails": [{"id": ENDPOINT, "vpcId": vpc, "status": status}], "vpcEndpointErrorDetails": []},
        {"ids": [ENDPOINT]},
    )


def _network(stub: Stubber, subnet_vpc: str = "vpc-0aaa1111", group_vpc: str = "vpc-0aaa1111") -> None:
    stub.add_response(
        "describe_subnets",
        {"Subnets": [{"SubnetId": "subnet-0abc1234", "VpcId": subnet_vpc}]},
        {"SubnetIds": ["subnet-0abc1234"]},
    )
    stub.add_response(
        "describe_security_groups",
        {"SecurityGroups": [{"GroupId": "sg-0abc1234", "VpcId": group_vpc}]},
        {"GroupIds": ["sg-0abc1234"]},
    )


def test_an_active_endpoint_with_subnets_and_groups_of_its_vpc_is_ok(clients: tuple[Any, ...]) -> None:
    aoss, aoss_stub, ec2, ec2_stub = clients
    _endpoint(aoss_stub)
    _network(ec2_stub)
    finding = check_search(aoss, ec2, PRIVATE)
    assert (finding.check, finding.status) == ("search collection", "OK")
    assert (
        finding.detail
        == f"VPC endpoint {ENDPOINT} ACTIVE in vpc-0aaa1111; 1 subnet(s) and 1 security group(s) in that VPC"
    )


def test_a_missing_endpoint_blocks_and_says_how_to_create_one(clients: tuple[Any, ...]) -> None:
    aoss, aoss_stub, ec2, _ = clients
    aoss_stub.add_response(
        "batch_get_vpc_endpoint",
        {"vpcEndpointDetails": [], "vpcEndpointErrorDetails": [{"id": ENDPOINT, "errorCode": "NotFound"}]},
        {"ids": [ENDPOINT]},
    )
    finding = check_search(aoss, ec2, PRIVATE)
    assert finding.status == "BLOCKER"
    assert finding.detail == f"no OpenSearch Serverless VPC endpoint {ENDPOINT} in this account and region"
    assert "create-vpc-endpoint" in finding.fix


def test_an_endpoint_not_yet_active_blocks(clients: tuple[Any, ...]) -> None:
    aoss, aoss_stub, ec2, _ = clients
    _endpoint(aoss_stub, status="PENDING")
    finding = check_search(aoss, ec2, PRIVATE)
    assert (finding.status, finding.detail) == ("BLOCKER", f"VPC endpoint {ENDPOINT} is PENDING")


def test_a_security_group_of_another_vpc_blocks_and_is_named(clients: tuple[Any, ...]) -> None:
    aoss, aoss_stub, ec2, ec2_stub = clients
    _endpoint(aoss_stub)
    _network(ec2_stub, group_vpc="vpc-0bbb2222")
    finding = check_search(aoss, ec2, PRIVATE)
    assert (finding.status, finding.detail) == ("BLOCKER", "sg-0abc1234 not in the endpoint's VPC vpc-0aaa1111")


def test_a_subnet_that_does_not_exist_blocks(clients: tuple[Any, ...]) -> None:
    aoss, aoss_stub, ec2, ec2_stub = clients
    _endpoint(aoss_stub)
    ec2_stub.add_client_error("describe_subnets", "InvalidSubnetID.NotFound", "The subnet ID does not exist")
    finding = check_search(aoss, ec2, PRIVATE)
    assert finding.status == "BLOCKER"
    assert "InvalidSubnetID.NotFound" in finding.detail


def test_a_public_collection_is_a_warning_and_reads_nothing() -> None:
    finding = check_search(None, None, AnalyticsSearchConfig(enabled=True, public_access=True))
    assert finding.status == "WARN"
    assert "public networks" in finding.detail
