"""What answers the functions' Bedrock calls under ``make local``.

By default a local responder (a ``BedrockStub`` of the harness) whose every reply starts with
``[local responder]``, so nobody mistakes it for a model, and whose streamed replies are paced
like a model writing: the chat page shows the deltas arriving. Summarisation requests get a
short fixed text that says the same.

With ``BEDROCK=aws`` the functions' ``bedrock-runtime`` calls leave the process for real
Bedrock, signed with the credentials the user had when ``make local`` started (moto replaces
the environment's credentials with fake ones while the stage runs). The stage's guardrail exists
only on the embedded stage, not in that account, so those calls leave without it
(``guardrailConfig`` removed): real Bedrock would refuse a guardrail it does not have.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from unittest import mock

import boto3

from embedded.services.bedrock import SERVICE, BedrockStub
from embedded.services.bedrock_stream import Pacing
from lambdas.events import summary as summary_generator

PREFIX = "[local responder]"
#: Requests moto must let through to AWS when Bedrock is real.
BEDROCK_URLS = (r"https://bedrock-runtime\.[a-z0-9-]+\.amazonaws\.com/.*",)
#: A model writes a token every few tens of milliseconds after a short think.
DEFAULT_PACING = Pacing(first=0.3, every=0.04)


def local_answer(request: dict[str, Any]) -> str:
    """The local responder's reply to a Converse or ConverseStream request."""
    system = [str(block.get("text", "")) for block in request.get("system", [])]
    messages = request.get("messages") or []
    if system == [summary_generator.SYSTEM_PROMPT]:
        return f"{PREFIX} A stand-in summary of this conversation (no model was asked)."
    last = next((m for m in reversed(messages) if m.get("role") == "user"), None)
    text = "".join(str(block.get("text", "")) for block in (last or {}).get("content", [])).strip()
    if not text:
        return f"{PREFIX} Hello! I stand in for the model under make local. Ask me anything."
    return (
        f"{PREFIX} You said: {text}. "
        "I am the stand-in for Bedrock that make local runs, not a model, so I only repeat you. "
        "My reply streams in pieces, the way a model's does, so you can watch the deltas arrive. "
        "Run make local with BEDROCK=aws to ask the real model."
    )


def local_responder(pacing: Pacing | None = DEFAULT_PACING) -> BedrockStub:
    """The stand-in for Bedrock (see the module docstring)."""
    return BedrockStub(answer=local_answer, pacing=pacing)


@dataclass
class AwsBedrock(BedrockStub):
    """Lets the functions' Bedrock Runtime calls through to AWS with the user's own credentials.

    ``credentials`` are botocore's frozen credentials, read before the stage replaced the
    environment's; ``region`` is where the model is called.
    """

    credentials: Any = None
    region: str = "us-east-1"

    @contextmanager
    def installed(self) -> Iterator[BedrockStub]:
        original = boto3.client
        frozen = self.credentials

        def client(*args: Any, **kwargs: Any) -> Any:
            service = args[0] if args else kwargs.get("service_name")
            if service == SERVICE:
                kwargs = {
                    **kwargs,
                    "region_name": kwargs.get("region_name") or self.region,
                    "aws_access_key_id": frozen.access_key,
                    "aws_secret_access_key": frozen.secret_key,
                    "aws_session_token": frozen.token,
                }
                created = original(*args, **kwargs)
                for operation in ("Converse", "ConverseStream"):
                    created.meta.events.register(f"before-parameter-build.{SERVICE}.{operation}", _without_guardrail)
                return created
            return original(*args, **kwargs)

        with mock.patch.object(boto3, "client", client):
            yield self


def _without_guardrail(params: dict[str, Any], **_: Any) -> None:
    """The embedded stage's guardrail is unknown to the real account: the call goes without it."""
    params.pop("guardrailConfig", None)


def aws_bedrock(region: str) -> AwsBedrock:
    """Real Bedrock with the credentials of this environment now; an error when there are none."""
    credentials = boto3.Session().get_credentials()
    if credentials is None:
        raise SystemExit("BEDROCK=aws needs AWS credentials (a profile, or AWS_ACCESS_KEY_ID and its secret)")
    return AwsBedrock(credentials=credentials.get_frozen_credentials(), region=region)
