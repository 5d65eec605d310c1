"""Benchmark of streamed chat replies: how soon the customer reads the reply, against the reply in one piece.

Run with ``python -m bench.streaming``. The model is a stub with a fixed pace: its first token
comes :data:`FIRST_TOKEN_SECONDS` after the call, then one every :data:`TOKEN_SECONDS`, for a
reply of about :data:`REPLY_TOKENS` tokens. The message Lambda's own ``handle_message`` streams
it (ConverseStream: tokens handed over as the pace says, in AWS's event-stream framing, through
botocore's parser); the baseline (bench/baseline_reply.py) gets the same reply from a Converse
that returns when the last token would have been written, stores it and posts it whole. Both run
in the same process on moto, with :data:`LATENCY` of simulated network time on every AWS call
(DynamoDB and PostToConnection), on the same messages.

Measured per reply, median of :data:`RUNS`:

- first frame: from the model's first token to the end of the PostToConnection of the
  customer's first frame of the reply;
- extra time: from the model's last token to the end of the post that completes the text on
  the customer's screen (the last delta; for the baseline its one frame), and to the end of the
  post of the reply's last frame (the final frame, once the reply is stored);
- posts: the PostToConnection calls of one reply, against its tokens.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Mapping, Sequence
from typing import Any

import boto3
from botocore.awsrequest import AWSResponse

from bench import baseline_reply
from bench.message_path import LATENCY, REGION, ChatBench, _aws, _chatting
from embedded.events import authorizer_context, ws_event
from embedded.round_trips import RoundTrips
from embedded.services.bedrock_stream import Pacing, StreamAnswers, reply_events, tokens
from lambdas.shared.responder import BedrockResponder
from lambdas.ws import message
from lambdas.ws.frames import route_context

RUNS = 5
FIRST_TOKEN_SECONDS = 0.25
TOKEN_SECONDS = 0.015
TARGET_FIRST_FRAME_MS = 50.0
MODEL = "anthropic.claude-3-haiku-20240307-v1:0"
REPLY = (
    "Frieren: Beyond Journey's End follows an elf mage after her party has defeated the Demon King, "
    "and it is quiet, funny and sad in turns. Volume 3 came out in March, and the collector's edition "
    "ships with a slipcase and a poster! Would you like me to check whether it reaches Osaka before "
    "the weekend? I can also compare it with the standard edition, which is a little cheaper, or "
    "suggest something similar, such as Witch Hat Atelier or Delicious in Dungeon."
)
REPLY_TOKENS = len(tokens(REPLY))


class PacedConverse:
    """Answers a client's Converse with :data:`REPLY` once the paced model would have finished writing it."""

    def __init__(self, client: Any) -> None:
        self.first_token_at: list[float] = []
        self.last_token_at: list[float] = []
        client.meta.events.register("before-call.bedrock-runtime.Converse", self._answer)

    def _answer(self, **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        start = time.perf_counter()
        writing = FIRST_TOKEN_SECONDS + (REPLY_TOKENS - 1) * TOKEN_SECONDS
        time.sleep(writing)
        self.first_token_at.append(start + FIRST_TOKEN_SECONDS)
        self.last_token_at.append(start + writing)
        usage = {"inputTokens": 10, "outputTokens": REPLY_TOKENS, "totalTokens": 10 + REPLY_TOKENS}
        return AWSResponse(None, 200, {}, None), {
            "output": {"message": {"role": "assistant", "content": [{"text": REPLY}]}},
            "stopReason": "end_turn",
            "usage": usage,
            "metrics": {"latencyMs": int(writing * 1000)},
        }


def _posts(trips: RoundTrips) -> list[float]:
    """When each PostToConnection ended, in order."""
    return sorted(c.end for c in trips.calls if c.operation == "PostToConnection")


def measure() -> dict[str, dict[str, float]]:
    """Medians of both paths: first_frame_ms, extra_ms, posts (per reply)."""
    results: dict[str, list[dict[str, float]]] = {"streamed": [], "whole": []}
    with _aws():
        bench = ChatBench.create()
        ddb, management, clock, store, send_to = bench.ddb, bench.management, bench.clock, bench.store, bench.send_to
        streaming_client = boto3.client("bedrock-runtime", region_name=REGION)
        answers = StreamAnswers(
            streaming_client,
            *[reply_events(REPLY) for _ in range(RUNS)],
            pacing=Pacing(first=FIRST_TOKEN_SECONDS, every=TOKEN_SECONDS),
        )
        whole_client = boto3.client("bedrock-runtime", region_name=REGION)
        paced = PacedConverse(whole_client)
        streamer = BedrockResponder(MODEL, client=streaming_client)
        whole = BedrockResponder(MODEL, client=whole_client)
        _chatting(store, "alice", "conn-streamed")
        _chatting(store, "bob", "conn-whole")
        ctx = route_context(
            ws_event(
                "sendMessage",
                connection_id="conn-streamed",
                authorizer=authorizer_context("alice", customer_id="alice", role="customer"),
            )
        )

        for run in range(RUNS):
            clock.advance(60)  # the buckets are idle again: each message takes the path of a person typing
            body = json.dumps({"action": "sendMessage", "text": f"Tell me about Frieren ({run})"})
            with RoundTrips(ddb, management, latency=LATENCY) as trips:
                outcome = message.handle_message(store, streamer, ctx, body, send_to("conn-streamed"))
            if outcome != "replied":
                raise RuntimeError(f"a streamed bench reply was not answered: {outcome}")
            model = answers.streams[run]
            posts = _posts(trips)
            results["streamed"].append(
                {
                    "first_frame_ms": (posts[0] - model.text_times[0]) * 1000,
                    "text_ms": (posts[-2] - model.text_times[-1]) * 1000,
                    "extra_ms": (posts[-1] - model.text_times[-1]) * 1000,
                    "posts": len(posts),
                }
            )
            with RoundTrips(ddb, management, latency=LATENCY) as trips:
                outcome = baseline_reply.handle_message(
                    store,
                    whole,
                    "conn-whole",
                    "bob",
                    f"Tell me about Frieren ({run})",
                    send_to("conn-whole"),
                    context_turns=bench.context_turns,
                    per_connection=bench.per_connection,
                    per_customer=bench.per_customer,
                )
            if outcome != "replied":
                raise RuntimeError(f"a whole bench reply was not answered: {outcome}")
            posts = _posts(trips)
            results["whole"].append(
                {
                    "first_frame_ms": (posts[0] - paced.first_token_at[run]) * 1000,
                    "text_ms": (posts[-1] - paced.last_token_at[run]) * 1000,
                    "extra_ms": (posts[-1] - paced.last_token_at[run]) * 1000,
                    "posts": len(posts),
                }
            )
    return {path: _medians(samples) for path, samples in results.items()}


def _medians(samples: Sequence[Mapping[str, float]]) -> dict[str, float]:
    return {key: statistics.median(s[key] for s in samples) for key in samples[0]}


def run() -> list[dict[str, Any]]:
    """The rows `make bench` prints (keys of bench.__main__.Row)."""
    result = measure()
    streamed, whole = result["streamed"], result["whole"]
    model = (
        f"stub model: first token at {FIRST_TOKEN_SECONDS * 1000:.0f} ms, then 1 per {TOKEN_SECONDS * 1000:.0f} ms, "
        f"{REPLY_TOKENS} tokens; {LATENCY * 1000:g} ms per AWS call"
    )
    return [
        {
            "what": f"chat reply: model's first token to the customer's first frame ({model})",
            "this": f"{streamed['first_frame_ms']:.0f} ms (streamed)",
            "baseline": f"{whole['first_frame_ms']:,.0f} ms (whole reply in one frame)",
            "target": f"<= {TARGET_FIRST_FRAME_MS:.0f} ms",
            "met": streamed["first_frame_ms"] <= TARGET_FIRST_FRAME_MS,
            "runs": RUNS,
        },
        {
            "what": "chat reply: time beyond the model's last token until the text is complete; until the final frame",
            "this": f"{streamed['text_ms']:.0f} ms; {streamed['extra_ms']:.0f} ms",
            "baseline": f"{whole['text_ms']:.0f} ms (its one frame)",
            "target": "",
            "met": None,
            "runs": RUNS,
        },
        {
            "what": f"chat reply: PostToConnection calls per reply of {REPLY_TOKENS} tokens",
            "this": f"{streamed['posts']:.0f} (deltas + final)",
            "baseline": f"{whole['posts']:.0f} (one frame, after the whole reply)",
            "target": f"far fewer than tokens (< {REPLY_TOKENS // 4})",
            "met": streamed["posts"] < REPLY_TOKENS // 4,
            "runs": RUNS,
        },
    ]


if __name__ == "__main__":
    for row in run():
        print(row)
