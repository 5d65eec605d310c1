"""The analytics search collection's network path: what a private collection needs from the account."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from stacks.search_config import AnalyticsSearchConfig
from tools.preflight.findings import Finding, _message

CHECK = "search collection"


def check_search(aoss: Any, ec2: Any, settings: AnalyticsSearchConfig) -> Finding:
    """A private collection's VPC endpoint (ACTIVE) and the subnets and security groups in its VPC.

    The stage names these and creates none of them; a missing or foreign one fails the deploy
    late (the collection and its policies first, then the delivery stream), so it is a blocker.
    """
    if settings.public_access:
        return Finding(
            CHECK,
            "WARN",
            "open to public networks (analytics_search.public_access); IAM and the data-access policy still apply",
            "name an OpenSearch Serverless VPC endpoint, subnets and security groups to keep it private",
        )
    endpoint_id = str(settings.vpc_endpoint_id)
    answer = aoss.batch_get_vpc_endpoint(ids=[endpoint_id])
    details = answer.get("vpcEndpointDetails", [])
    if not details:
        return Finding(
            CHECK,
            "BLOCKER",
            f"no OpenSearch Serverless VPC endpoint {endpoint_id} in this account and region",
            "create one (aws opensearchserverless create-vpc-endpoint) in the subnets' VPC and name it in "
            "analytics_search.vpc_endpoint_id",
        )
    endpoint = details[0]
    if endpoint.get("status") != "ACTIVE":
        return Finding(
            CHECK,
            "BLOCKER",
            f"VPC endpoint {endpoint_id} is {endpoint.get('status')}",
            "wait until it is ACTIVE, or create another",
        )
    vpc = endpoint.get("vpcId")
    try:
        subnets = ec2.describe_subnets(SubnetIds=list(settings.subnet_ids))["Subnets"]
        groups = ec2.describe_security_groups(GroupIds=list(settings.security_group_ids))["SecurityGroups"]
    except ClientError as error:
        return Finding(
            CHECK,
            "BLOCKER",
            f"a subnet or security group does not exist ({_message(error)})",
            "name existing ones in analytics_search.subnet_ids / security_group_ids",
        )
    foreign = sorted(
        [s["SubnetId"] for s in subnets if s.get("VpcId") != vpc]
        + [g["GroupId"] for g in groups if g.get("VpcId") != vpc]
    )
    if foreign:
        return Finding(
            CHECK,
            "BLOCKER",
            f"{', '.join(foreign)} not in the endpoint's VPC {vpc}",
            "name subnets and security groups of the endpoint's VPC",
        )
    return Finding(
        CHECK,
        "OK",
        f"VPC endpoint {endpoint_id} ACTIVE in {vpc}; {len(subnets)} subnet(s) and "
        f"{len(groups)} security group(s) in that VPC",
    )
