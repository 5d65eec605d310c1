"""The operation table: what IAM action on which resource each call of the stage's code needs."""

from __future__ import annotations

from typing import Any

import pytest

from embedded.iam.access import Access, Call, Resolver, UnmappedOperation, accesses, kms_accesses

REGION, ACCOUNT = "us-east-1", "123456789012"
TABLE = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/Sessions"


class _Stage(Resolver):
    def queue_arn(self, queue_url: str) -> str:
        return f"arn:aws:sqs:{REGION}:{ACCOUNT}:{queue_url.rsplit('/', 1)[-1]}"

    def state_machine_of_token(self, task_token: str) -> str | None:
        return f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:Handoff" if task_token == "known" else None

    def email_identity_arn(self, from_address: str, region: str, account: str) -> str:
        return f"arn:aws:ses:{region}:{account}:identity/{from_address.rsplit('@', 1)[-1]}"

    def secret_arn(self, secret_id: str) -> str:
        return f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:{secret_id}-AbCdEf"


def _of(service: str, operation: str, url: str = "", **params: Any) -> list[tuple[str, str]]:
    found = accesses(Call(service, operation, params, REGION, ACCOUNT, url), _Stage())
    return [(a.action, a.resource) for a in found]


def test_each_item_of_a_transaction_is_its_own_action_on_its_table() -> None:
    items = [
        {"Put": {"TableName": "Sessions", "Item": {}}},
        {"ConditionCheck": {"TableName": "Sessions", "Key": {}, "ConditionExpression": "x"}},
        {"Update": {"TableName": "Agents", "Key": {}}},
        {"Delete": {"TableName": TABLE, "Key": {}}},
    ]
    assert _of("dynamodb", "TransactWriteItems", TransactItems=items) == [
        ("dynamodb:PutItem", TABLE),
        ("dynamodb:ConditionCheckItem", TABLE),
        ("dynamodb:UpdateItem", f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/Agents"),
        ("dynamodb:DeleteItem", TABLE),
    ]


def test_a_query_on_an_index_is_authorized_on_the_index() -> None:
    assert _of("dynamodb", "Query", TableName="Sessions", IndexName="GSI1") == [
        ("dynamodb:Query", f"{TABLE}/index/GSI1")
    ]


def test_a_batch_is_one_action_per_table() -> None:
    assert _of("dynamodb", "BatchWriteItem", RequestItems={"Sessions": [], "Agents": []}) == [
        ("dynamodb:BatchWriteItem", TABLE),
        ("dynamodb:BatchWriteItem", f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/Agents"),
    ]


def test_publish_batch_is_sns_publish() -> None:
    topic = f"arn:aws:sns:{REGION}:{ACCOUNT}:handoffs"
    assert _of("sns", "PublishBatch", TopicArn=topic, PublishBatchRequestEntries=[]) == [("sns:Publish", topic)]


def test_batched_queue_calls_are_the_single_actions() -> None:
    url = f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/jobs"
    queue = f"arn:aws:sqs:{REGION}:{ACCOUNT}:jobs"
    assert _of("sqs", "SendMessageBatch", QueueUrl=url, Entries=[]) == [("sqs:SendMessage", queue)]
    assert _of("sqs", "DeleteMessageBatch", QueueUrl=url, Entries=[]) == [("sqs:DeleteMessage", queue)]


def test_streamed_and_plain_conversations_are_different_actions() -> None:
    model = f"arn:aws:bedrock:{REGION}::foundation-model/anthropic.claude-haiku-4-5-20251001-v1:0"
    assert _of("bedrock-runtime", "Converse", modelId="anthropic.claude-haiku-4-5-20251001-v1:0") == [
        ("bedrock:InvokeModel", model)
    ]
    assert _of("bedrock-runtime", "ConverseStream", modelId="anthropic.claude-haiku-4-5-20251001-v1:0") == [
        ("bedrock:InvokeModelWithResponseStream", model)
    ]


def test_a_call_that_names_a_guardrail_also_needs_apply_guardrail_on_it() -> None:
    model = f"arn:aws:bedrock:{REGION}::foundation-model/anthropic.claude-haiku-4-5-20251001-v1:0"
    guardrail = f"arn:aws:bedrock:{REGION}:{ACCOUNT}:guardrail/gr0abc123"
    for identifier in ("gr0abc123", guardrail):
        config = {"guardrailIdentifier": identifier, "guardrailVersion": "1"}
        assert _of(
            "bedrock-runtime",
            "ConverseStream",
            modelId="anthropic.claude-haiku-4-5-20251001-v1:0",
            guardrailConfig=config,
        ) == [("bedrock:InvokeModelWithResponseStream", model), ("bedrock:ApplyGuardrail", guardrail)]


def test_an_inference_profile_is_authorized_on_the_profile_and_its_model() -> None:
    assert _of("bedrock-runtime", "Converse", modelId="us.anthropic.claude-haiku-4-5-20251001-v1:0") == [
        (
            "bedrock:InvokeModel",
            f"arn:aws:bedrock:{REGION}:{ACCOUNT}:inference-profile/us.anthropic.claude-haiku-4-5-20251001-v1:0",
        ),
        ("bedrock:InvokeModel", f"arn:aws:bedrock:{REGION}::foundation-model/anthropic.claude-haiku-4-5-20251001-v1:0"),
    ]


def test_creating_a_schedule_passes_its_role_to_the_scheduler() -> None:
    role = f"arn:aws:iam::{ACCOUNT}:role/cleanup"
    found = accesses(
        Call(
            "scheduler", "CreateSchedule", {"Name": "s", "GroupName": "g", "Target": {"RoleArn": role}}, REGION, ACCOUNT
        ),
        _Stage(),
    )
    assert found == [
        Access("scheduler:CreateSchedule", f"arn:aws:scheduler:{REGION}:{ACCOUNT}:schedule/g/s"),
        Access("iam:PassRole", role, {"iam:PassedToService": "scheduler.amazonaws.com"}),
    ]


def test_a_post_to_a_connection_is_manage_connections_on_that_connection_of_the_stage() -> None:
    url = f"https://abc123.execute-api.{REGION}.amazonaws.com/dev"
    assert _of("apigatewaymanagementapi", "PostToConnection", url, ConnectionId="Xy=", Data=b"") == [
        ("execute-api:ManageConnections", f"arn:aws:execute-api:{REGION}:{ACCOUNT}:abc123/dev/POST/@connections/Xy=")
    ]


def test_a_task_token_is_authorized_on_its_state_machine_and_an_unknown_one_is_left_to_the_service() -> None:
    machine = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:Handoff"
    assert _of("stepfunctions", "SendTaskSuccess", taskToken="known", output="{}") == [
        ("states:SendTaskSuccess", machine)
    ]
    assert _of("stepfunctions", "SendTaskSuccess", taskToken="forged", output="{}") == []


def test_object_versions_are_their_own_actions() -> None:
    assert _of("s3", "GetObject", Bucket="b", Key="k/1.json") == [("s3:GetObject", "arn:aws:s3:::b/k/1.json")]
    assert _of("s3", "GetObject", Bucket="b", Key="k", VersionId="v") == [("s3:GetObjectVersion", "arn:aws:s3:::b/k")]
    assert _of("s3", "DeleteObject", Bucket="b", Key="k", VersionId="v") == [
        ("s3:DeleteObjectVersion", "arn:aws:s3:::b/k")
    ]


def test_an_unknown_operation_is_refused_loudly_never_allowed() -> None:
    with pytest.raises(UnmappedOperation, match="sqs:TagQueue"):
        _of("sqs", "TagQueue", QueueUrl="https://x/1/q")


def test_sending_to_an_encrypted_queue_asks_kms_for_a_data_key_and_decrypt_through_sqs() -> None:
    queue = f"arn:aws:sqs:{REGION}:{ACCOUNT}:jobs"
    key = f"arn:aws:kms:{REGION}:{ACCOUNT}:key/1"
    found = kms_accesses(Access("sqs:SendMessage", queue), key, REGION, ACCOUNT)
    assert [a.action for a in found] == ["kms:GenerateDataKey", "kms:Decrypt"]
    assert {a.resource for a in found} == {key}
    assert found[0].context["kms:ViaService"] == f"sqs.{REGION}.amazonaws.com"
    assert found[0].context["kms:EncryptionContext:aws:sqs:arn"] == queue
