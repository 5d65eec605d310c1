"""lambdas.api.customers: a customer's erasure asked for and read back, with API Gateway events on moto."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from embedded.events import Api, authorizer_context, lambda_context, rest_proxy_event
from embedded.services.dynamodb import atomic_requests, create_sessions_table
from lambdas.api import customers
from lambdas.shared import env as lambda_env
from lambdas.shared import keys
from lambdas.shared.store import DynamoSessionStore

TABLE = "customer-data"
API = Api(stage="prod")
CONTEXT = lambda_context("customer-data")
ALICE = "5f0c3a52-7c1e-4d0b-9a55-0d6f1b7e2c11"
BOB = "8b1d2e33-0a4f-4c6e-b2d7-3e9a5c6f7d80"
WAIT = {"StartAt": "Wait", "States": {"Wait": {"Type": "Wait", "Seconds": 3600, "End": True}}}


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> Iterator[DynamoSessionStore]:
    with mock_aws(), atomic_requests():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_sessions_table(client, TABLE)
        machine = boto3.client("stepfunctions", region_name="us-east-1").create_state_machine(
            name="Erasure", definition=json.dumps(WAIT), roleArn="arn:aws:iam::123456789012:role/r"
        )["stateMachineArn"]
        monkeypatch.setenv("TABLE_NAME", TABLE)
        monkeypatch.setenv("ERASURE_STATE_MACHINE_ARN", machine)
        lambda_env.reset()
        yield DynamoSessionStore(TABLE, client=client)
        lambda_env.reset()


def call(
    method: str, resource: str, customer_id: str, *, sub: str, role: str, headers: dict[str, str] | None = None
) -> tuple[int, Any]:
    path = resource.replace("{id}", customer_id)
    event = rest_proxy_event(
        method,
        resource,
        path,
        api=API,
        path_parameters={"id": customer_id},
        headers=headers or {},
        authorizer=authorizer_context(sub, role=role, sub=sub),
    )
    response = customers.handler(event, CONTEXT)
    return int(response["statusCode"]), json.loads(response["body"])


def erase(customer_id: str, *, sub: str = ALICE, role: str = "customer", key: str | None = None) -> tuple[int, Any]:
    headers = {"Idempotency-Key": key} if key is not None else None
    return call("DELETE", customers.ERASE_ROUTE, customer_id, sub=sub, role=role, headers=headers)


def receipt(customer_id: str, *, sub: str = ALICE, role: str = "customer") -> tuple[int, Any]:
    return call("GET", customers.STATUS_ROUTE, customer_id, sub=sub, role=role)


def _executions() -> list[dict[str, Any]]:
    sfn = boto3.client("stepfunctions", region_name="us-east-1")
    machine = sfn.list_state_machines()["stateMachines"][0]["stateMachineArn"]
    return list(sfn.list_executions(stateMachineArn=machine)["executions"])


def test_a_customer_erases_herself_once_however_often_she_asks(store: DynamoSessionStore) -> None:
    # When alice asks twice for her erasure
    status, first = erase(ALICE)
    again_status, again = erase(ALICE)
    # Then both answers name one execution, whose name holds no customer id, and the record says requested
    assert (status, again_status) == (202, 202)
    assert first["execution_arn"] == again["execution_arn"]
    assert ALICE not in first["execution_arn"]
    assert first["status_url"] == f"/customers/{ALICE}/data/erasure"
    assert first["erasure_status"] == "requested"
    executions = _executions()
    assert len(executions) == 1
    # The answered ARN is the one Step Functions gave the execution: the status page reads it
    assert first["execution_arn"] == executions[0]["executionArn"]
    sfn = boto3.client("stepfunctions", region_name="us-east-1")
    started = json.loads(sfn.describe_execution(executionArn=executions[0]["executionArn"])["input"])
    assert started == {"customer_id": ALICE, "record": keys.erasure_key(ALICE)}
    assert receipt(ALICE) == (200, {**_shown(store), "erasure_status": "requested"})
    # And a new request key is a new run
    _, other = erase(ALICE, key="second")
    assert other["execution_arn"] != first["execution_arn"]
    assert len(_executions()) == 2


def _shown(store: DynamoSessionStore) -> dict[str, Any]:
    item = store.table.get(keys.erasure_key(ALICE))
    assert item is not None
    assert ALICE not in json.dumps(item, default=str)
    return {"execution_arn": item["execution_arn"], "requested_at": int(item["requested_at"])}


def test_the_receipt_shows_the_counts_the_workflow_wrote(store: DynamoSessionStore) -> None:
    erase(ALICE, sub="root", role="admin")
    store.table.client.update_item(
        TableName=TABLE,
        Key={"PK": {"S": keys.erasure_key(ALICE)["PK"]}, "SK": {"S": "META"}},
        UpdateExpression="SET erasure_status = :s, counts_json = :c, finished_at = :t",
        ExpressionAttributeValues={":s": {"S": "completed"}, ":c": {"S": '{"sessions": 2}'}, ":t": {"S": "then"}},
    )
    status, body = receipt(ALICE, sub="root", role="admin")
    assert status == 200
    assert (body["erasure_status"], body["counts"], body["finished_at"]) == ("completed", {"sessions": 2}, "then")


def test_a_repeat_after_the_erasure_ended_leaves_its_record_as_the_workflow_wrote_it(
    store: DynamoSessionStore,
) -> None:
    # Given an admin's erasure of alice that failed
    status, first = erase(ALICE, sub="root", role="admin", key="k-1")
    assert (status, first["request_key"]) == (202, "k-1")
    assert store.table.get(keys.erasure_key(ALICE))["requested_by_role"] == "admin"  # type: ignore[index]
    store.table.client.update_item(
        TableName=TABLE,
        Key={"PK": {"S": keys.erasure_key(ALICE)["PK"]}, "SK": {"S": "META"}},
        UpdateExpression="SET erasure_status = :s, failure = :f",
        ExpressionAttributeValues={":s": {"S": "failed"}, ":f": {"S": "States.Timeout"}},
    )
    # When the same request is repeated, Then it answers the same execution and changes nothing
    assert erase(ALICE, sub="root", role="admin", key="k-1")[1]["execution_arn"] == first["execution_arn"]
    status, body = receipt(ALICE, sub="root", role="admin")
    assert (status, body["erasure_status"], body["failure"]) == (200, "failed", "States.Timeout")


def test_another_customers_erasure_is_404_and_starts_nothing(store: DynamoSessionStore) -> None:
    assert erase(BOB)[0] == 404
    assert receipt(BOB)[0] == 404
    assert _executions() == []
    assert store.table.get(keys.erasure_key(BOB)) is None


def test_an_agent_is_refused_and_before_any_erasure_the_receipt_is_404(store: DynamoSessionStore) -> None:
    assert erase(ALICE, sub="agent-1", role="agent")[0] == 403
    assert receipt(ALICE)[0] == 404


def test_a_caller_without_a_subject_is_refused_whatever_its_role(store: DynamoSessionStore) -> None:
    assert erase(ALICE, sub="", role="admin")[0] == 403
    assert receipt(ALICE, sub="", role="admin")[0] == 403
    assert _executions() == []


@pytest.mark.parametrize(("customer_id", "key"), [("a b", None), ("x" * 65, None), (ALICE, "bad key!")])
def test_fails_with_400_on_a_malformed_id_or_key(store: DynamoSessionStore, customer_id: str, key: str | None) -> None:
    status, body = erase(customer_id, sub="root", role="admin", key=key)
    assert status == 400, body
    # The message names what is wrong: the path's id, or the header
    assert body["error"]["message"].startswith("header.Idempotency-Key" if key else "path.id"), body
    assert _executions() == []
