"""Erasing a customer's data on the embedded stage, as its policies allow it.

A customer chats, asks for a person, has archived versions and rows in an export; ``DELETE
/customers/{id}/data`` ends the handoff and removes every trace, another customer's data stays,
the audit trail holds no personal data, and a second run erases nothing more.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from embedded import EmbeddedStage, embedded_stage
from embedded.services.cognito import Directory
from embedded.services.firehose import read_lines
from embedded.synth import StageAssembly
from lambdas.shared.store import DynamoSessionStore
from local.story.base import token_subject
from local.story.chat import Chat, open_chat, sign_in, table_name
from local.story.erasure import handoff_waits, traces

HER_WORDS = "please ship to 4 Sakura Lane, flat 12"
OTHER_WORDS = "is volume 5 out yet"


@pytest.fixture(scope="module")
def stage(synthesized: StageAssembly) -> Iterator[EmbeddedStage]:
    with embedded_stage(synthesized.assembly_dir) as stage, stage.clock.frozen():
        yield stage


def _bucket(stage: EmbeddedStage, handler: str, variable: str) -> str:
    return stage.function(handler).environment[variable]


def _archive_versions(stage: EmbeddedStage, session_id: str) -> str:
    """Two versions and a delete marker of the session's archive, as the cleanup's reruns leave them."""
    bucket = _bucket(stage, "lambdas.orchestration.erasure.objects", "ARCHIVE_BUCKET")
    prefix = stage.function("lambdas.orchestration.cleanup_worker.handler").environment["ARCHIVE_PREFIX"]
    s3 = stage.client("s3")
    for body in (HER_WORDS, HER_WORDS + " (again)"):
        s3.put_object(Bucket=bucket, Key=f"{prefix}/{session_id}.jsonl", Body=body.encode())
    s3.delete_object(Bucket=bucket, Key=f"{prefix}/{session_id}.jsonl")
    return bucket


def _export(stage: EmbeddedStage, bucket: str) -> None:
    """A DynamoDB export of the whole table into the export prefix (as the export workflow writes it)."""
    arn = stage.client("dynamodb").describe_table(TableName=table_name(stage))["Table"]["TableArn"]
    stage.client("dynamodb").export_table_to_point_in_time(TableArn=arn, S3Bucket=bucket, S3Prefix="exports/by-test")


def _erase(stage: EmbeddedStage, token: str, customer_id: str, key: str | None = None) -> Any:
    headers = {"Authorization": f"Bearer {token}"}
    if key:
        headers["Idempotency-Key"] = key
    return stage.rest.request("DELETE", f"/customers/{customer_id}/data", headers=headers)


def _receipt(stage: EmbeddedStage, token: str, customer_id: str) -> Any:
    return stage.rest.request(
        "GET", f"/customers/{customer_id}/data/erasure", headers={"Authorization": f"Bearer {token}"}
    )


def _asks_for_a_person(stage: EmbeddedStage, chat: Chat) -> None:
    response = stage.rest.request(
        "POST", f"/sessions/{chat.session_id}/handoff", headers=chat.auth(), body={"reason": "billing"}
    )
    assert response.status == 202, response.body
    stage.settle(timeout=120, until=handoff_waits(DynamoSessionStore(table_name(stage)), chat.session_id))
    stage.settle(timeout=60, wait_executions=False)


def test_a_customer_is_erased_everywhere_and_only_she(stage: EmbeddedStage) -> None:
    # Given a customer who chatted, asked for a person (still waiting), has archive versions and export rows
    refused_before = len(stage.refusals)
    her = open_chat(stage, "erased-emma")
    other = open_chat(stage, "kept-kenji")
    her.say(HER_WORDS)
    other.say(OTHER_WORDS)
    _asks_for_a_person(stage, her)
    bucket = _archive_versions(stage, her.session_id)
    _export(stage, bucket)
    customer_id, email = token_subject(her.token), "erased-emma@example.com"
    before = traces(stage, [HER_WORDS])
    assert any(place.startswith("table:") for place in before), before  # the search reads stored turns
    assert any("/exports/" in place for place in before), before  # and export files
    # When another customer asks to erase her, nothing starts
    assert _erase(stage, other.token, customer_id).status == 404
    # When she asks for her own erasure
    response = _erase(stage, her.token, customer_id)
    # Then 202 names the execution, and the receipt counts every kind it erased
    assert response.status == 202, response.body
    answer = response.json()
    assert answer["status_url"] == f"/customers/{customer_id}/data/erasure"
    execution = stage.wait_execution(answer["execution_arn"], timeout=60)
    refused = [str(r) for r in stage.refusals[refused_before:]]
    assert execution["status"] == "SUCCEEDED", (stage.execution_errors(answer["execution_arn"]), refused)
    stage.settle(timeout=60, wait_executions=False)
    admin = sign_in(stage, "erasing-admin", "admin")
    record = _receipt(stage, admin, customer_id).json()
    counts = record["counts"]
    assert record["erasure_status"] == "completed"
    assert counts["sessions"] == 1
    assert counts["turns"] >= 3
    assert counts["handoffs"] == 1
    assert counts["handoffs_ended"] == 1
    assert counts["connections"] == 1
    assert counts["rate_buckets"] >= 1
    assert counts["archive_versions"] == 3
    assert counts["export_files"] == 1
    assert counts["export_rows"] >= 4
    assert counts["users"] == 1
    # And no trace of her is left anywhere the stage holds data, while the other customer's stays
    assert traces(stage, [customer_id, email, HER_WORDS]) == []
    kept = traces(stage, [OTHER_WORDS])
    assert any("/exports/" in place for place in kept), kept
    assert any(place.startswith("table:") for place in kept), kept
    with pytest.raises(Exception, match="UserNotFoundException"):
        Directory.of(stage).client.admin_get_user(UserPoolId=Directory.of(stage).pool_id, Username=email)
    assert [str(r) for r in stage.refusals[refused_before:]] == []

    # When the same request comes again, it answers the same execution; a new request erases nothing more
    assert _erase(stage, admin, customer_id).json()["execution_arn"] == answer["execution_arn"]
    again = _erase(stage, admin, customer_id, key="second-run").json()
    assert again["execution_arn"] != answer["execution_arn"]
    assert stage.wait_execution(again["execution_arn"], timeout=60)["status"] == "SUCCEEDED"
    second = _receipt(stage, admin, customer_id).json()
    assert second["erasure_status"] == "completed", second
    assert not any(second["counts"].values()), second
    assert [str(r) for r in stage.refusals[refused_before:]] == []


def test_the_audit_trail_holds_no_personal_data_of_an_erased_customer(stage: EmbeddedStage) -> None:
    # Given a customer who chatted (rate bucket, connection slots, turns) and was erased
    her = open_chat(stage, "audited-ayaka")
    her.say(HER_WORDS)
    customer_id = token_subject(her.token)
    response = _erase(stage, her.token, customer_id)
    assert stage.wait_execution(response.json()["execution_arn"], timeout=60)["status"] == "SUCCEEDED"
    stage.settle(timeout=60, wait_executions=False)
    # When the audit trail is read back from its locked bucket
    stream = stage.function("lambdas.events.router.handler").environment["AUDIT_STREAM_NAME"]
    destination = stage.client("firehose").describe_delivery_stream(DeliveryStreamName=stream)[
        "DeliveryStreamDescription"
    ]["Destinations"][0]["ExtendedS3DestinationDescription"]
    bucket = destination["BucketARN"].split(":::", 1)[1]
    lines = [line for _, line in read_lines(stage.client("s3"), bucket, destination["Prefix"].split("!{", 1)[0])]
    text = "\n".join(json.dumps(line) for line in lines)
    # Then it records her session's changes and removals, but never her id, address or words in clear
    assert any(line["pk"] == f"SESSION#{her.session_id}" and line["change"] == "deleted" for line in lines)
    assert customer_id not in text
    assert "audited-ayaka@example.com" not in text
    assert HER_WORDS not in text
    # The only keys that hold a customer id (rate buckets, connection slots) never reach the router
    assert not any(line["pk"].startswith("LIMIT#") for line in lines)
    # And the erasure's own record is there under the pseudonym
    assert any(line["pk"].startswith("ERASURE#") and line["change"] == "created" for line in lines)
