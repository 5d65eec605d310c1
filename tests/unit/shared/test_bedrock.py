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


def test_fallback_reason_names_what_another_model_can_mend_and_nothing_else() -> None:
    def error(code: str, message: str = "m") -> ClientError:
        return ClientError({"Error": {"Code": code, "Message": message}}, "ConverseStream")

    eol = "This model version has reached the end of its life. Please refer to the AWS documentation for more details."
    legacy = "Access denied. This Model is marked by provider as Legacy and you have not been actively using the model"
    assert bedrock.fallback_reason(error("ThrottlingException")) == "throttled"
    assert bedrock.fallback_reason(error("ServiceUnavailableException")) == "throttled"
    assert bedrock.fallback_reason(error("ModelNotReadyException")) == "not_ready"
    assert bedrock.fallback_reason(error("ModelTimeoutException")) == "timeout"
    assert bedrock.fallback_reason(ReadTimeoutError(endpoint_url="https://bedrock")) == "timeout"
    assert bedrock.fallback_reason(error("InternalServerException")) == "model_error"
    assert bedrock.fallback_reason(error("ResourceNotFoundException", eol)) == "end_of_life"
    assert bedrock.fallback_reason(error("ResourceNotFoundException", legacy)) == "end_of_life"
    assert bedrock.fallback_reason(error("ValidationException", legacy)) == "end_of_life"
    # A bad request or a missing grant fails on any model alike
    assert bedrock.fallback_reason(error("ValidationException", "Malformed input request")) is None
    assert bedrock.fallback_reason(error("ResourceNotFoundException", "Model not found")) is None
    assert bedrock.fallback_reason(error("AccessDeniedException", legacy)) is None
    assert bedrock.fallback_reason(ValueError("not a call")) is None
