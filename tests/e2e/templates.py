"""Small hand-made templates, shaped like CDK's output, for the harness's own tests."""

from __future__ import annotations

import json
from typing import Any

from embedded.cloudformation.assembly import StackTemplate


def stack(name: str, part: str, resources: dict[str, Any], outputs: dict[str, Any] | None = None) -> StackTemplate:
    template: dict[str, Any] = {"Resources": resources}
    if outputs:
        template["Outputs"] = outputs
    return StackTemplate(name, part, template)


def role(service: str = "lambda.amazonaws.com") -> dict[str, Any]:
    return {
        "Type": "AWS::IAM::Role",
        "Properties": {
            "AssumeRolePolicyDocument": {
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}],
            }
        },
    }


def function(handler: str, role_id: str = "Role", environment: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "Type": "AWS::Lambda::Function",
        "Properties": {
            "Code": {
                "S3Bucket": {"Fn::Sub": "cdk-hnb659fds-assets-${AWS::AccountId}-${AWS::Region}"},
                "S3Key": "x.zip",
            },
            "Handler": handler,
            "Role": {"Fn::GetAtt": [role_id, "Arn"]},
            "Runtime": "python3.14",
            "Environment": {"Variables": environment or {}},
        },
        "DependsOn": [role_id],
    }


def table(*, gsi: bool = True) -> dict[str, Any]:
    props: dict[str, Any] = {
        "KeySchema": [{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
        "AttributeDefinitions": [
            {"AttributeName": "PK", "AttributeType": "S"},
            {"AttributeName": "SK", "AttributeType": "S"},
            {"AttributeName": "owner", "AttributeType": "S"},
        ],
        "BillingMode": "PAY_PER_REQUEST",
        "StreamSpecification": {"StreamViewType": "NEW_AND_OLD_IMAGES"},
        "TimeToLiveSpecification": {"AttributeName": "ttl", "Enabled": True},
        "SSESpecification": {"SSEEnabled": True, "SSEType": "KMS", "KMSMasterKeyId": {"Fn::GetAtt": ["Key", "Arn"]}},
    }
    if gsi:
        props["GlobalSecondaryIndexes"] = [
            {
                "IndexName": "ByOwner",
                "KeySchema": [
                    {"AttributeName": "owner", "KeyType": "HASH"},
                    {"AttributeName": "SK", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            }
        ]
    return {"Type": "AWS::DynamoDB::Table", "Properties": props}


KEY = {"Type": "AWS::KMS::Key", "Properties": {"KeyPolicy": {"Version": "2012-10-17", "Statement": []}}}


def queue(dlq: str | None = None, max_receives: int = 2) -> dict[str, Any]:
    props: dict[str, Any] = {"VisibilityTimeout": 30}
    if dlq:
        props["RedrivePolicy"] = {"deadLetterTargetArn": {"Fn::GetAtt": [dlq, "Arn"]}, "maxReceiveCount": max_receives}
    return {"Type": "AWS::SQS::Queue", "Properties": props}


def mapping(function_id: str, source: Any, **settings: Any) -> dict[str, Any]:
    return {
        "Type": "AWS::Lambda::EventSourceMapping",
        "Properties": {"FunctionName": {"Ref": function_id}, "EventSourceArn": source, **settings},
    }


def state_machine(definition: dict[str, Any], substitutions: dict[str, Any]) -> dict[str, Any]:
    text = json.dumps(definition)
    # as CDK emits it: a Fn::Join whose parts interleave literal JSON and tokens
    parts: list[Any] = []
    for key in substitutions:
        head, _, text = text.partition("${" + key + "}")
        parts += [head, substitutions[key]]
    parts.append(text)
    return {
        "Type": "AWS::StepFunctions::StateMachine",
        "Properties": {
            "DefinitionString": {"Fn::Join": ["", parts]},
            "RoleArn": {"Fn::GetAtt": ["SfnRole", "Arn"]},
        },
    }
