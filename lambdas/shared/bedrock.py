"""Bedrock Converse with bounded, jittered retries of throttling, and an echo fallback.

Usage::

    text = converse_text(bedrock_client(), model_id, prompt, system="Summarise...")

The client is created with botocore retries off (one attempt per call): this module owns the
retry policy, so retries do not multiply (botocore's 3 x ours) and tests see every attempt.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any, Final

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from lambdas.shared import env

RETRYABLE: Final = frozenset(
    {
        "ThrottlingException",
        "ServiceUnavailableException",
        "ModelNotReadyException",
        "InternalServerException",
        "ModelTimeoutException",
    }
)

_system_random = random.SystemRandom()


class BedrockUnavailable(RuntimeError):
    """Converse still failed with a retryable error after every attempt."""


@env.once
def bedrock_client() -> Any:
    """bedrock-runtime client, once per container, without botocore's own retries."""
    return boto3.client(
        "bedrock-runtime",
        config=Config(retries={"total_max_attempts": 1}, connect_timeout=5, read_timeout=60),
    )


def converse_text(
    client: Any,
    model_id: str,
    prompt: str,
    *,
    system: str | None = None,
    max_tokens: int = 512,
    temperature: float = 0.2,
    attempts: int = 4,
    base_seconds: float = 0.5,
    cap_seconds: float = 8.0,
    sleep: Callable[[float], None] = time.sleep,
    rand: Callable[[], float] = _system_random.random,
) -> str:
    """The text of one Converse call; retries throttling and 5xx at most ``attempts`` calls.

    Before retry n (from 0) it sleeps ``rand() * min(cap, base * 2**n)`` (full jitter). Other
    errors (validation, access denied) are raised at once; retryable ones exhausted raise
    ``BedrockUnavailable``.
    """
    if attempts < 1:
        raise ValueError(f"attempts must be >= 1 (given {attempts})")
    request: dict[str, Any] = {
        "modelId": model_id,
        "messages": [{"role": "user", "content": [{"text": prompt}]}],
        "inferenceConfig": {"maxTokens": max_tokens, "temperature": temperature},
    }
    if system:
        request["system"] = [{"text": system}]
    last: ClientError | None = None
    for attempt in range(attempts):
        try:
            response = client.converse(**request)
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") not in RETRYABLE:
                raise
            last = err
            if attempt + 1 < attempts:
                sleep(rand() * min(cap_seconds, base_seconds * 2**attempt))
            continue
        blocks = response.get("output", {}).get("message", {}).get("content", [])
        return "".join(str(block["text"]) for block in blocks if "text" in block).strip()
    raise BedrockUnavailable(f"Bedrock model {model_id} still unavailable after {attempts} attempts") from last
