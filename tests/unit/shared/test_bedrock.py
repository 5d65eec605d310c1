"""lambdas.shared.bedrock: which Bedrock errors are worth a retry, and the text of an answer."""

from __future__ import annotations

from botocore.exceptions import ClientError, ReadTimeoutError

from lambdas.shared import bedrock


def _error(code: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "m"}}, "Converse")


def test_throttling_and_timeouts_are_transient_and_a_bad_request_is_not() -> None:
    assert bedrock.is_transient(_error("ThrottlingException"))
    assert bedrock.is_transient(ReadTimeoutError(endpoint_url="https://bedrock"))
    assert not bedrock.is_transient(_error("ValidationException"))


def test_the_text_of_an_answer_joins_its_text_blocks() -> None:
    response = {"output": {"message": {"content": [{"text": "Try "}, {"image": {}}, {"text": "Mob Psycho."}]}}}
    assert bedrock.response_text(response) == "Try Mob Psycho."
