"""Bedrock ``ConverseStream`` answers built in-process: moto 5.2 has no Bedrock Runtime.

The answer is a real botocore ``EventStream``: each event is encoded in AWS's binary event-stream
framing (prelude, headers, JSON payload, CRCs) and decoded by botocore's own parser, exactly as a
response off the wire is, so the code under test sees what the SDK would hand it.

Usage::

    events = reply_events("Volume 3 is out.")          # messageStart, deltas, stops, metadata
    stream = event_stream(client, events)               # iterate it like response["stream"]
    paced = event_stream(client, events, pacing=Pacing(first=0.2, every=0.02))
    broken = event_stream(client, [*events[:3], stream_error("modelStreamErrorException")])
"""

from __future__ import annotations

import json
import re
import struct
import time
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from botocore.awsrequest import AWSResponse
from botocore.eventstream import EventStream
from botocore.parsers import EventStreamJSONParser

#: Roughly a model token: up to four characters with the whitespace before them.
_TOKEN = re.compile(r"\s*\S{1,4}|\s+")


def tokens(text: str) -> list[str]:
    """``text`` split into token-sized pieces (about four characters each) that join back to it."""
    return _TOKEN.findall(text)


def reply_events(
    text: str, *, stop_reason: str = "end_turn", pieces: Sequence[str] | None = None, input_tokens: int = 10
) -> list[dict[str, Any]]:
    """The events of a ConverseStream that answers ``text`` (split into :func:`tokens` unless ``pieces``).

    The last event is Bedrock's ``metadata``: ``usage`` counts ``input_tokens`` read and one output
    token per delta.
    """
    deltas = [
        {"contentBlockDelta": {"delta": {"text": piece}, "contentBlockIndex": 0}}
        for piece in (tokens(text) if pieces is None else pieces)
    ]
    output_tokens = len(deltas)
    return [
        {"messageStart": {"role": "assistant"}},
        *deltas,
        {"contentBlockStop": {"contentBlockIndex": 0}},
        {"messageStop": {"stopReason": stop_reason}},
        {
            "metadata": {
                "usage": {
                    "inputTokens": input_tokens,
                    "outputTokens": output_tokens,
                    "totalTokens": input_tokens + output_tokens,
                },
                "metrics": {"latencyMs": 1},
            }
        },
    ]


def stream_error(code: str = "modelStreamErrorException", message: str = "The model stream broke.") -> dict[str, Any]:
    """An exception event: botocore raises it as ``EventStreamError`` (a ClientError) when reached."""
    return {"__exception__": code, "message": message}


@dataclass(frozen=True)
class Pacing:
    """When events are handed over: the first text after ``first`` seconds, then one every ``every``."""

    first: float = 0.0
    every: float = 0.0


def _header(name: str, value: str) -> bytes:
    encoded = value.encode()
    return bytes([len(name)]) + name.encode() + b"\x07" + struct.pack(">H", len(encoded)) + encoded


def encode_event(event: dict[str, Any]) -> bytes:
    """One event in the binary event-stream framing AWS sends."""
    if "__exception__" in event:
        headers = {":message-type": "exception", ":exception-type": event["__exception__"]}
        payload = {"message": event.get("message", "")}
    else:
        [(event_type, payload)] = event.items()
        headers = {":message-type": "event", ":event-type": event_type}
    headers[":content-type"] = "application/json"
    header_bytes = b"".join(_header(name, value) for name, value in headers.items())
    body = json.dumps(payload).encode()
    total = 12 + len(header_bytes) + len(body) + 4
    prelude = struct.pack(">II", total, len(header_bytes))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    message = prelude + header_bytes + body
    return message + struct.pack(">I", zlib.crc32(message))


class _RawStream:
    """What botocore reads an event stream from: ``stream()`` yields bytes, ``close()`` ends it.

    ``text_times`` holds when each text event was handed over (``time.perf_counter``): the moments
    a real model's tokens would have arrived.
    """

    def __init__(self, events: Sequence[dict[str, Any]], pacing: Pacing | None) -> None:
        self._events = list(events)
        self._pacing = pacing
        self.closed = False
        self.text_times: list[float] = []

    def stream(self) -> Iterator[bytes]:
        for event in self._events:
            if self.closed:
                return
            if "contentBlockDelta" in event:
                if self._pacing is not None:
                    time.sleep(self._pacing.first if not self.text_times else self._pacing.every)
                self.text_times.append(time.perf_counter())
            yield encode_event(event)

    def close(self) -> None:
        self.closed = True


def event_stream(client: Any, events: Sequence[dict[str, Any]], *, pacing: Pacing | None = None) -> EventStream:
    """A botocore EventStream of ``client``'s ConverseStream that yields ``events`` (decoded by botocore)."""
    shape = client.meta.service_model.operation_model("ConverseStream").output_shape.members["stream"]
    return EventStream(_RawStream(events, pacing), shape, EventStreamJSONParser(), "ConverseStream")


@dataclass(frozen=True)
class Refusal:
    """A ConverseStream call that fails before its stream opens (throttling, validation, ...)."""

    code: str = "ThrottlingException"
    status: int = 429
    message: str = "refused"


#: Bedrock Runtime's own refusals, by what they mean: (code, HTTP status, message) exactly as
#: Bedrock answers a model that is throttled, past its end of life, or Legacy for an account that
#: has not used it lately (the messages of ``ResourceNotFoundException`` seen from Converse and
#: InvokeModel on models that reached those states).
BEDROCK_REFUSALS: dict[str, tuple[str, int, str]] = {
    "throttled": ("ThrottlingException", 429, "Too many requests, please wait before trying again."),
    "end_of_life": (
        "ResourceNotFoundException",
        404,
        "This model version has reached the end of its life. Please refer to the AWS documentation for more details.",
    ),
    "legacy": (
        "ResourceNotFoundException",
        404,
        "Access denied. This Model is marked by provider as Legacy and you have not been actively using the model "
        "in the last 30 days. Please upgrade to an active model on Amazon Bedrock",
    ),
}


def refusal(kind: str) -> Refusal:
    """The :class:`Refusal` Bedrock answers for ``kind`` (a key of :data:`BEDROCK_REFUSALS`)."""
    code, status, message = BEDROCK_REFUSALS[kind]
    return Refusal(code, status, message)


class StreamAnswers:
    """Answers ``client``'s ConverseStream calls in order, in-process (register once per client).

    Each answer is a list of events (:func:`reply_events`, maybe ending in :func:`stream_error`)
    or a :class:`Refusal`. ``requests`` holds every call's parameters as the caller passed them;
    ``streams`` every stream handed out, whose ``closed`` says whether the caller released it.
    """

    def __init__(self, client: Any, *answers: list[dict[str, Any]] | Refusal, pacing: Pacing | None = None) -> None:
        self._client = client
        self._answers = list(answers)
        self._pacing = pacing
        self.requests: list[dict[str, Any]] = []
        self.streams: list[_RawStream] = []
        service = client.meta.service_model.service_id.hyphenize()
        client.meta.events.register(f"before-parameter-build.{service}.ConverseStream", self._capture)
        client.meta.events.register(f"before-call.{service}.ConverseStream", self._answer)

    @property
    def pending(self) -> int:
        """Answers not asked for yet."""
        return len(self._answers)

    def _capture(self, params: dict[str, Any], **_: Any) -> None:
        self.requests.append(json.loads(json.dumps(params)))

    def _answer(self, **_: Any) -> tuple[Any, dict[str, Any]]:
        if not self._answers:
            raise AssertionError("ConverseStream was called more often than the test expected")
        answer = self._answers.pop(0)
        if isinstance(answer, Refusal):
            error = {
                "Error": {"Code": answer.code, "Message": answer.message},
                "ResponseMetadata": {"HTTPStatusCode": answer.status},
            }
            return AWSResponse(None, answer.status, {}, None), error
        stream = event_stream(self._client, answer, pacing=self._pacing)
        self.streams.append(stream._raw_stream)  # the stub's own object: its closed flag and times
        return AWSResponse(None, 200, {}, None), {"stream": stream, "ResponseMetadata": {"HTTPStatusCode": 200}}
