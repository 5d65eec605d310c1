"""Bedrock Runtime ``Converse`` and ``ConverseStream`` answered in-process, at the client: moto 5.2 has neither.

Inside ``stub.installed()``, every ``boto3.client("bedrock-runtime", ...)`` the code under test
creates is a real botocore client (so the request is validated against the service model, as
AWS would) whose ``Converse`` and ``ConverseStream`` never leave the process: a ``before-call``
hook answers them with ``stub.answer(request)`` (``request`` as the caller passed it:
``modelId``, ``system``, ``messages``, ...). Converse gets it wrapped in a complete response
(validated against the output shape, as botocore's Stubber does); ConverseStream gets a botocore
EventStream of the answer split into token-sized deltas (``embedded.services.bedrock_stream``:
encoded in AWS's event-stream framing and decoded by botocore's own parser), ending, as Bedrock's
does, in a ``metadata`` event whose ``usage`` counts the tokens read (:func:`input_tokens`, the
same count Converse reports) and written (one per delta). Every call of
either is recorded in ``stub.calls`` (``streamed`` tells them apart). Other services and other
operations are untouched (moto still serves them).

A call that names a guardrail (``guardrailConfig``) is screened by one of ``stub.guardrails`` (the
stage's, deployed from its template) as Bedrock screens it (``embedded.services.bedrock_guardrail``):
``answer`` gets, and ``calls`` record, the messages as the model reads them (personal data masked,
``{EMAIL}``), and a reply the guardrail blocks is its blocked message with ``stopReason:
guardrail_intervened``. A guardrail or version that does not exist fails the call as Bedrock does.

A request's ``inferenceConfig.maxTokens`` is honoured as Bedrock honours it: an answer longer than
that many tokens (:func:`~embedded.services.bedrock_stream.tokens`, about four characters each)
is cut after them and ends with ``stopReason: max_tokens``, streamed or not.

A test may make a model refuse, as Bedrock does: ``stub.refuse(model_id, "throttled")`` (or
``"end_of_life"``, ``"legacy"``: :data:`~embedded.services.bedrock_stream.BEDROCK_REFUSALS`, the
same codes, statuses and messages) answers every call naming exactly that model id with that
error until ``stub.refuse(model_id, None)``; each refused call is recorded in ``stub.refused``.

Usage::

    stub = BedrockStub(answer=lambda request: "a fixed reply")
    with mock_aws(), stub.installed():
        ... code that calls boto3.client("bedrock-runtime").converse(...) or .converse_stream(...) ...
    assert stub.calls[0].model_id == "anthropic.claude-3-haiku-20240307-v1:0"
"""

from __future__ import annotations

import copy
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import boto3
from botocore.awsrequest import AWSResponse
from botocore.validate import validate_parameters

from embedded.services.bedrock_guardrail import INTERVENED, GuardrailPolicy, GuardrailRefused, find, screen_request
from embedded.services.bedrock_stream import BEDROCK_REFUSALS, Pacing, event_stream, reply_events, tokens

SERVICE = "bedrock-runtime"
_PARAMS_KEY = "e2e_bedrock_stub_params"


@dataclass(frozen=True)
class ConverseCall:
    """One Converse call the stub answered."""

    model_id: str
    system: tuple[str, ...]
    messages: tuple[tuple[str, str], ...]  # (role, text) per message, text blocks joined
    caller: str  # POWERTOOLS_SERVICE_NAME of the invocation that called (the function's service)
    reply: str
    streamed: bool = False  # ConverseStream (True) or Converse
    tokens: int = 0  # the deltas a streamed reply was split into
    input_tokens: int = 0  # the tokens the call reported it read (its usage's inputTokens)
    stop_reason: str = "end_turn"  # guardrail_intervened: the guardrail blocked the input or the reply
    guardrail: str | None = None  # the guardrail that screened the call (its id)

    @property
    def prompt(self) -> str:
        """The text of the last user message."""
        return next((text for role, text in reversed(self.messages) if role == "user"), "")


def input_tokens(request: dict[str, Any]) -> int:
    """The input tokens the stub reports for ``request``: one per 4 characters of its system and message text, + 1."""
    texts = [str(block.get("text", "")) for block in request.get("system") or []]
    texts += [str(block.get("text", "")) for m in request.get("messages") or [] for block in m.get("content") or []]
    return sum(len(text) for text in texts) // 4 + 1


def echo_answer(request: dict[str, Any]) -> str:
    """The default answer: the echo responder's reply to the last user message."""
    messages = request.get("messages") or []
    last = next((m for m in reversed(messages) if m.get("role") == "user"), None)
    text = "".join(block.get("text", "") for block in (last or {}).get("content", []))
    return f"You said: {text}" if text else "Hello! How can I help you find your next manga?"


@dataclass
class BedrockStub:
    """Answers Converse for clients created while ``installed()`` (see the module docstring)."""

    answer: Callable[[dict[str, Any]], str] = echo_answer
    calls: list[ConverseCall] = field(default_factory=list)
    #: when a streamed answer's deltas are handed over (None: all at once), as a model writes them
    pacing: Pacing | None = None
    #: the guardrails a call may name, by id (the embedded stage fills it as it deploys them)
    guardrails: dict[str, GuardrailPolicy] = field(default_factory=dict)
    #: models that refuse every call, by model id: a key of BEDROCK_REFUSALS (see the module docstring)
    refusing: dict[str, str] = field(default_factory=dict)
    #: (model id, error code) of every refused call, in order
    refused: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def refuse(self, model_id: str, kind: str | None) -> None:
        """Make calls naming ``model_id`` fail as Bedrock does for ``kind``; None answers them again."""
        if kind is not None and kind not in BEDROCK_REFUSALS:
            raise ValueError(f"kind must be one of {sorted(BEDROCK_REFUSALS)} or None (given {kind!r})")
        with self._lock:
            if kind is None:
                self.refusing.pop(model_id, None)
            else:
                self.refusing[model_id] = kind

    def _model_refusal(self, request: dict[str, Any]) -> tuple[AWSResponse, dict[str, Any]] | None:
        """Bedrock's error response when the request's model refuses (recorded), else None."""
        model_id = str(request.get("modelId"))
        with self._lock:
            kind = self.refusing.get(model_id)
            if kind is None:
                return None
            code, status, message = BEDROCK_REFUSALS[kind]
            self.refused.append((model_id, code))
        error = {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}}
        return AWSResponse(None, status, {}, None), error

    def _reply(self, request: dict[str, Any]) -> tuple[dict[str, Any], str, str, str | None]:
        """(the request as the model reads it, the reply, its stop reason, the guardrail's id) for ``request``."""
        config = request.get("guardrailConfig")
        if config is None:
            reply, stop = capped(self.answer(request), request)
            return request, reply, stop, None
        policy = find(self.guardrails, config)
        seen, blocked = screen_request(policy, request)
        if blocked:  # the model is never asked
            return seen, policy.blocked_input, INTERVENED, policy.guardrail_id
        reply, stop = capped(self.answer(seen), request)
        reply, blocked = policy.screen_output(reply)
        return seen, reply, INTERVENED if blocked else stop, policy.guardrail_id

    def _record(
        self,
        request: dict[str, Any],
        reply: str,
        *,
        streamed: bool,
        token_count: int = 0,
        stop_reason: str = "end_turn",
        guardrail: str | None = None,
        read: int = 0,
    ) -> ConverseCall:
        messages = tuple(
            (str(m.get("role")), "".join(str(b.get("text", "")) for b in m.get("content", [])))
            for m in request.get("messages", [])
        )
        call = ConverseCall(
            model_id=str(request.get("modelId")),
            system=tuple(str(block.get("text", "")) for block in request.get("system", [])),
            messages=messages,
            caller=os.environ.get("POWERTOOLS_SERVICE_NAME", ""),
            reply=reply,
            streamed=streamed,
            tokens=token_count,
            input_tokens=read,
            stop_reason=stop_reason,
            guardrail=guardrail,
        )
        with self._lock:
            self.calls.append(call)
        return call

    def respond_stream(self, client: Any, request: dict[str, Any]) -> dict[str, Any]:
        """The ConverseStream response to ``request`` (recorded): the answer as token-sized deltas."""
        seen, reply, stop, guardrail = self._reply(request)
        read = input_tokens(seen)
        self._record(
            seen, reply, streamed=True, token_count=len(tokens(reply)), stop_reason=stop, guardrail=guardrail, read=read
        )
        stream = event_stream(client, reply_events(reply, stop_reason=stop, input_tokens=read), pacing=self.pacing)
        return {"stream": stream, "ResponseMetadata": {"HTTPStatusCode": 200}}

    def respond(self, request: dict[str, Any]) -> dict[str, Any]:
        """The Converse response to ``request`` (recorded)."""
        seen, reply, stop, guardrail = self._reply(request)
        read, written = input_tokens(seen), len(reply) // 4 + 1
        self._record(seen, reply, streamed=False, stop_reason=stop, guardrail=guardrail, read=read)
        return {
            "output": {"message": {"role": "assistant", "content": [{"text": reply}]}},
            "stopReason": stop,
            "usage": {"inputTokens": read, "outputTokens": written, "totalTokens": read + written},
            "metrics": {"latencyMs": 1},
        }

    def attach(self, client: Any) -> Any:
        """Make ``client`` (a bedrock-runtime client) answer Converse and ConverseStream from this stub."""

        def capture(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
            context[_PARAMS_KEY] = copy.deepcopy(params)

        def answer(model: Any, context: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
            refused = self._model_refusal(context[_PARAMS_KEY])
            if refused is not None:
                return refused
            try:
                response = self.respond(context[_PARAMS_KEY])
            except GuardrailRefused as refusal:
                return _refusal(refusal)
            validate_parameters(response, model.output_shape)
            return AWSResponse(None, 200, {}, None), response

        def answer_stream(context: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
            refused = self._model_refusal(context[_PARAMS_KEY])
            if refused is not None:
                return refused
            try:
                return AWSResponse(None, 200, {}, None), self.respond_stream(client, context[_PARAMS_KEY])
            except GuardrailRefused as refusal:
                return _refusal(refusal)

        service_id = client.meta.service_model.service_id.hyphenize()
        for operation, handler in (("Converse", answer), ("ConverseStream", answer_stream)):
            client.meta.events.register(f"before-parameter-build.{service_id}.{operation}", capture)
            client.meta.events.register(f"before-call.{service_id}.{operation}", handler)
        return client

    @contextmanager
    def installed(self) -> Iterator[BedrockStub]:
        """Patch ``boto3.client`` so every bedrock-runtime client created in the block is attached."""
        original = boto3.client

        def client(*args: Any, **kwargs: Any) -> Any:
            created = original(*args, **kwargs)
            service = args[0] if args else kwargs.get("service_name")
            return self.attach(created) if service == SERVICE else created

        with mock.patch.object(boto3, "client", client):
            yield self


def capped(answer: str, request: dict[str, Any]) -> tuple[str, str]:
    """``(reply, stopReason)``: ``answer``, or its first ``inferenceConfig.maxTokens`` tokens and ``max_tokens``."""
    limit = (request.get("inferenceConfig") or {}).get("maxTokens")
    pieces = tokens(answer)
    if isinstance(limit, int) and not isinstance(limit, bool) and 0 < limit < len(pieces):
        return "".join(pieces[:limit]), "max_tokens"
    return answer, "end_turn"


def _refusal(refused: GuardrailRefused) -> tuple[AWSResponse, dict[str, Any]]:
    """The error response botocore raises as a ClientError with Bedrock's code and message."""
    error = {
        "Error": {"Code": refused.code, "Message": refused.message},
        "ResponseMetadata": {"HTTPStatusCode": refused.status},
    }
    return AWSResponse(None, refused.status, {}, None), error
