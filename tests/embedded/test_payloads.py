"""Payload limits on the embedded stage: what AWS refuses as too large, refused with the service's error."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from embedded import payloads
from embedded.services.cognito import auth_flows_enforced

REGION = "us-east-1"


@pytest.fixture
def aws() -> Iterator[None]:
    with mock_aws(), payloads.enforced(), auth_flows_enforced():
        yield


def _error(call: Any) -> tuple[str, int]:
    with pytest.raises(ClientError) as refused:
        call()
    return refused.value.response["Error"]["Code"], refused.value.response["ResponseMetadata"]["HTTPStatusCode"]


def _machine() -> str:
    sfn = boto3.client("stepfunctions", region_name=REGION)
    definition = json.dumps({"StartAt": "P", "States": {"P": {"Type": "Pass", "End": True}}})
    arn: str = sfn.create_state_machine(name="m", definition=definition, roleArn="arn:aws:iam::123456789012:role/r")[
        "stateMachineArn"
    ]
    return arn


@pytest.mark.usefixtures("aws")
def test_an_execution_input_over_256_kib_is_refused_and_one_at_the_limit_starts() -> None:
    sfn, machine = boto3.client("stepfunctions", region_name=REGION), _machine()
    at_limit = json.dumps({"a": "x" * (262_144 - len('{"a": ""}'))})
    assert len(at_limit.encode()) == 262_144
    sfn.start_execution(stateMachineArn=machine, input=at_limit)
    over = json.dumps({"a": "x" * 262_144})
    assert _error(lambda: sfn.start_execution(stateMachineArn=machine, input=over)) == ("ValidationException", 400)


@pytest.mark.usefixtures("aws")
def test_put_events_entries_of_256_kb_or_more_are_refused() -> None:
    events = boto3.client("events", region_name=REGION)
    detail = json.dumps({"a": "x" * (256 * 1024)})
    entry = {"Source": "s", "DetailType": "d", "Detail": detail}
    assert _error(lambda: events.put_events(Entries=[entry])) == ("ValidationException", 400)
    small = {"Source": "s", "DetailType": "d", "Detail": json.dumps({"a": 1})}
    assert events.put_events(Entries=[small])["FailedEntryCount"] == 0


def test_an_entry_is_counted_as_eventbridge_counts_it() -> None:
    # Time 14 bytes, Source, DetailType, Detail and each resource in UTF-8
    entry = {"Time": 1, "Source": "ab", "DetailType": "é", "Detail": "{}", "Resources": ["r1", "r2"]}
    assert payloads.put_events_entry_bytes(entry) == 14 + 2 + 2 + 2 + 4


@pytest.mark.usefixtures("aws")
def test_a_lambda_payload_over_6_mb_synchronous_or_1_mb_asynchronous_is_refused() -> None:
    client = boto3.client("lambda", region_name=REGION)
    too_big_async = b"x" * (1024 * 1024 + 1)
    code, status = _error(lambda: client.invoke(FunctionName="f", InvocationType="Event", Payload=too_big_async))
    assert (code, status) == ("RequestEntityTooLargeException", 413)
    too_big_sync = b"x" * (6 * 1024 * 1024 + 1)
    assert _error(lambda: client.invoke(FunctionName="f", Payload=too_big_sync))[0] == "RequestEntityTooLargeException"


@pytest.mark.usefixtures("aws")
def test_moto_itself_refuses_a_dynamodb_item_over_400_kb() -> None:
    ddb = boto3.client("dynamodb", region_name=REGION)
    ddb.create_table(
        TableName="t",
        KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    item = {"k": {"S": "1"}, "v": {"S": "x" * 410_000}}
    assert _error(lambda: ddb.put_item(TableName="t", Item=item)) == ("ValidationException", 400)


@pytest.mark.usefixtures("aws")
def test_a_sign_in_flow_the_app_client_does_not_allow_is_refused() -> None:
    cognito = boto3.client("cognito-idp", region_name=REGION)
    pool = cognito.create_user_pool(PoolName="p", UsernameAttributes=["email"])["UserPool"]["Id"]
    srp_only = cognito.create_user_pool_client(
        UserPoolId=pool, ClientName="srp", ExplicitAuthFlows=["ALLOW_USER_SRP_AUTH", "ALLOW_REFRESH_TOKEN_AUTH"]
    )["UserPoolClient"]["ClientId"]
    password = cognito.create_user_pool_client(
        UserPoolId=pool, ClientName="pw", ExplicitAuthFlows=["ALLOW_USER_PASSWORD_AUTH", "ALLOW_REFRESH_TOKEN_AUTH"]
    )["UserPoolClient"]["ClientId"]
    cognito.admin_create_user(UserPoolId=pool, Username="a@example.com", MessageAction="SUPPRESS")
    cognito.admin_set_user_password(
        UserPoolId=pool, Username="a@example.com", Password="Passw0rd-Passw0rd!", Permanent=True
    )
    credentials = {"USERNAME": "a@example.com", "PASSWORD": "Passw0rd-Passw0rd!"}

    def sign_in(client_id: str) -> Any:
        return cognito.initiate_auth(ClientId=client_id, AuthFlow="USER_PASSWORD_AUTH", AuthParameters=credentials)

    assert _error(lambda: sign_in(srp_only)) == ("InvalidParameterException", 400)
    assert sign_in(password)["AuthenticationResult"]["IdToken"]
