"""What answers Bedrock under ``make local``: the local responder, and the way through to real Bedrock.

The real path cannot be exercised here (no AWS account): this checks it up to the HTTP layer. A
``bedrock-runtime`` call made while the stage's moto mock is active must carry the user's own
credentials and must not be answered by moto; other services stay on moto.
"""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.credentials import ReadOnlyCredentials
from moto import mock_aws

from lambdas.events import summary as summary_generator
from local.responder import BEDROCK_URLS, PREFIX, AwsBedrock, local_answer

MODEL = "anthropic.claude-3-haiku-20240307-v1:0"


def test_local_responder_says_what_it_is() -> None:
    chat = local_answer({"messages": [{"role": "user", "content": [{"text": "Is Frieren volume 3 out?"}]}]})
    assert chat.startswith(f"{PREFIX} You said: Is Frieren volume 3 out?")
    assert chat.count(". ") >= 3  # several sentences: the message Lambda streams them as several deltas
    summary = local_answer({"system": [{"text": summary_generator.SYSTEM_PROMPT}], "messages": []})
    assert summary.startswith(PREFIX)
    assert "no model was asked" in summary


def test_real_bedrock_calls_leave_moto_with_the_users_credentials() -> None:
    user = ReadOnlyCredentials("AKIAUSERSOWNKEY00000", "user-secret", None)
    sent: list[Any] = []

    class Body:
        def stream(self, **_: Any) -> Any:
            return iter([b'{"message": "answered by the test, not by moto"}'])

    def network(request: Any, **_: Any) -> AWSResponse:
        """Stands for the network: what reaches here was let through by moto."""
        sent.append(request)
        return AWSResponse(request.url, 400, {"x-amzn-ErrorType": "ValidationException"}, Body())

    config: Any = {"core": {"mock_credentials": True, "passthrough": {"urls": list(BEDROCK_URLS), "services": []}}}
    with mock_aws(config=config), AwsBedrock(credentials=user, region="us-west-2").installed():
        client = boto3.client("bedrock-runtime")
        client.meta.events.register_last("before-send.bedrock-runtime.Converse", network)
        with pytest.raises(client.exceptions.ValidationException, match="answered by the test"):
            client.converse(
                modelId=MODEL,
                messages=[{"role": "user", "content": [{"text": "hi"}]}],
                guardrailConfig={"guardrailIdentifier": "embeddedonly1", "guardrailVersion": "1"},
            )
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="still-on-moto")
        assert [b["Name"] for b in s3.list_buckets()["Buckets"]] == ["still-on-moto"]
    assert len(sent) == 1
    assert sent[0].url.startswith("https://bedrock-runtime.us-west-2.amazonaws.com/model/")
    assert "Credential=AKIAUSERSOWNKEY00000/" in sent[0].headers["Authorization"].decode()
    # the embedded stage's guardrail does not exist in the account: the call leaves without it
    assert b"guardrailConfig" not in sent[0].body
