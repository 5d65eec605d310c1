"""The ``capacity`` block of a stage: the load it is built for, and every limit derived from it.

A stage states its target (concurrent chats, messages per chat per minute, the reply's p95
duration, connects per second at peak, REST calls per chat, the model's tokens per message) and a
headroom factor. :class:`CapacityLimits` derives from it what the stacks set: the WebSocket route
throttles and the stage default, the REST throttle, the message function's reserved concurrency,
and the stream router's batch size, batching window and parallelization factor. It also reports
what the stage needs from account quotas it cannot set (Bedrock requests and tokens per minute,
API Gateway's regional requests per second, Lambda's concurrency). docs/capacity.md walks the
chain from the customer's socket to the model, with the quota behind each limit.

None of the derived limits is hand-set in cdk.json: a stage that still names one is refused with
the value its target derives (:func:`refuse_retired_keys`). The hand-set limits that remain (the
per-connection and per-customer message buckets, the function timeout, the WAF's per-IP rate)
are checked against the target in :meth:`CapacityConfig.validate`, with the numbers in the message.

The message function's timeout and the reply's deadline derive from the longest reply: the
first frame's p95 plus ``max_output_tokens`` at the model's measured ``model_tokens_per_second``,
within what the WebSocket route's synchronous invocation allows (:data:`ROUTE_INTEGRATION_SECONDS`);
a reply still being written at the deadline stops there and the customer continues it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Final

from stacks.errors import ConfigError

#: API Gateway's regional throttle over every API of an account (requests per second, burst):
#: "Amazon API Gateway quotas", account-level throttling; the rate is adjustable, the burst is not.
ACCOUNT_API_RATE: Final = 10_000
ACCOUNT_API_BURST: Final = 5_000
#: A route's burst: two seconds of its rate, so a synchronised wave of messages is absorbed.
BURST_SECONDS: Final = 2
#: The smallest route rate and burst a stage gets, so a few people testing by hand are never refused.
MIN_RATE: Final = 5
MIN_BURST: Final = 10
#: The REST API's floor: the pages and the agent console of a small team, whatever the chats.
MIN_REST_RATE: Final = 20

#: Per chat turn, from the cost run (docs/performance.md, "cost per 1,000 turns"): 8,400 Firehose
#: records over the two delivery streams per 1,000 turns, one per routed stream record.
ROUTED_RECORDS_PER_TURN: Final = 4.2
#: Table write units per turn (5,120 WRU per 1,000 turns, GSIs apart): a stream shard per partition,
#: a partition per 1,000 write units a second (DynamoDB developer guide, partitions).
WRITE_UNITS_PER_TURN: Final = 5.12
PARTITION_WRITE_UNITS: Final = 1_000
#: Model calls per turn: the reply, and a summary every few turns (1,200 calls per 1,000 turns).
MODEL_CALLS_PER_TURN: Final = 1.2
#: Output tokens count this many times against the tokens-per-minute quota of Anthropic's Claude
#: models from Claude 3.7 on (Bedrock user guide, "How tokens are counted in Amazon Bedrock").
OUTPUT_TOKEN_BURNDOWN: Final = 5
#: The stream router's cost of a batch: a fixed part (the PutEvents, Firehose and SNS calls) and a
#: part per record (its audit and analytics lines): the cost run's router averages 73 ms for one
#: turn's four records.
ROUTER_BATCH_SECONDS: Final = 0.06
ROUTER_RECORD_SECONDS: Final = 0.004
#: Batch sizes the router may take, smallest first (a failed batch is retried whole: small is better).
ROUTER_BATCH_SIZES: Final = (100, 200, 500, 1000)
#: The most batches of one shard Lambda runs at once (ParallelizationFactor 1..10).
MAX_PARALLELIZATION: Final = 10
#: The longest the router waits to fill a batch: a handoff's event is routed within this.
MAX_BATCHING_WINDOW_SECONDS: Final = 5

#: cdk.json keys this module now derives: a stage that sets one is told the derived value instead.
RETIRED_KEYS: Final = {
    "api_throttle_rate": "rest_rate",
    "api_throttle_burst": "rest_burst",
    "ws_connect_throttle_rate": "ws_connect_rate",
    "ws_connect_throttle_burst": "ws_connect_burst",
    "ws_message_throttle_rate": "ws_message_rate",
    "ws_message_throttle_burst": "ws_message_burst",
    "message_reserved_concurrency": "message_reserved_concurrency",
    "stream_batch_size": "stream_batch_size",
    "stream_batching_window_seconds": "stream_batching_window_seconds",
}

#: API Gateway waits this long for a WebSocket route's integration, whatever its type, and the limit cannot
#: be raised ("Quotas for configuring and running a WebSocket API in API Gateway", integration timeout).
#: The message function is the sendMessage route's Lambda proxy integration, invoked synchronously: past
#: it API Gateway gives up on the invocation and counts an integration error, so the function ends first.
ROUTE_INTEGRATION_SECONDS: Final = 29
#: Of those 29 s, a cold start's initialisation, which API Gateway waits for and the function timeout does not count.
COLD_START_SECONDS: Final = 3
#: After the deadline: the rest of the reply posted, the reply stored as a turn, the final frame posted.
STORE_SECONDS: Final = 3
#: The longest timeout the route allows the message function, and so the longest reply deadline.
MAX_MESSAGE_TIMEOUT_SECONDS: Final = ROUTE_INTEGRATION_SECONDS - COLD_START_SECONDS
#: Lambda's own ceiling on a function timeout ("Configure Lambda function timeout": 1..900 s).
LAMBDA_MAX_TIMEOUT_SECONDS: Final = 900

#: The numeric settings and their ranges.
_BOUNDS: dict[str, tuple[float, float]] = {
    "concurrent_chats": (1, 1_000_000),
    "messages_per_chat_per_minute": (0.1, 60),
    "reply_p95_seconds": (0.5, 600),
    "first_frame_p95_seconds": (0.1, 60),
    "connects_per_second": (0.1, 10_000),
    "rest_requests_per_chat_per_minute": (0, 600),
    "input_tokens_per_message": (1, 200_000),
    "output_tokens_per_message": (1, 64_000),
    "headroom": (1, 10),
    "model_tokens_per_second": (1, 1_000),
    "max_output_tokens": (1, 64_000),
}


def _ceil(value: float) -> int:
    # 333.33... * 1.5 is 500.0000001 in floating point: round first so a whole number stays whole.
    return math.ceil(round(value, 6))


def _route(rate: float, floor: int = MIN_RATE) -> tuple[int, int]:
    """A throttle (rate, burst) that admits ``rate`` a second, at least ``floor``, within the account's burst."""
    whole = max(floor, _ceil(rate))
    return whole, min(ACCOUNT_API_BURST, max(MIN_BURST, whole * BURST_SECONDS))


def router_batch_seconds(records: int) -> float:
    """How long the stream router takes over one batch of ``records`` (the assumed cost above)."""
    return ROUTER_BATCH_SECONDS + ROUTER_RECORD_SECONDS * records


@dataclass(frozen=True)
class CapacityLimits:
    """What a stage's target derives: the limits the stacks set, and the quotas it needs from the account."""

    #: The target's own load, without headroom.
    messages_per_second: float
    ws_message_rate: int
    ws_message_burst: int
    ws_connect_rate: int
    ws_connect_burst: int
    #: The WebSocket stage's default (``$disconnect``, ``$default``): the larger route's.
    ws_default_rate: int
    ws_default_burst: int
    rest_rate: int
    rest_burst: int
    #: Concurrency that runs every message the sendMessage throttle admits for its p95 duration.
    message_reserved_concurrency: int
    stream_records_per_second: float
    stream_shards: int
    stream_batch_size: int
    stream_batching_window_seconds: int
    stream_parallelization_factor: int
    #: Model calls a minute at the rate the gateway admits: the Bedrock requests-per-minute quota the
    #: stage needs (reported, never set: it is the account's). A stage-wide cap on model calls sizes from it.
    bedrock_requests_per_minute: int
    #: Tokens a minute against the quota: input plus output times the model's burndown rate.
    bedrock_tokens_per_minute: int
    #: Requests a second the stage's throttles admit together, against API Gateway's regional quota.
    api_gateway_requests_per_second: int
    #: Seconds the longest reply takes: the first frame's p95, then max_output_tokens at the model's rate.
    reply_write_seconds: float
    #: How long the model may write a reply (``REPLY_DEADLINE_SECONDS``): the write time, within the route's limit.
    reply_deadline_seconds: int
    #: The message function's timeout: the deadline and the time to store the reply (or the hand-set timeout).
    message_timeout_seconds: int


@dataclass(frozen=True)
class CapacityConfig:
    """The load a stage is built for. Defaults: a small team trying the chat."""

    concurrent_chats: int = 50
    messages_per_chat_per_minute: float = 2.0
    #: The message function's duration at p95: the whole streamed reply and storing both turns.
    reply_p95_seconds: float = 4.0
    #: The customer's wait for the reply's first frame at p95 (the simulation checks it).
    first_frame_p95_seconds: float = 2.0
    connects_per_second: float = 2.0
    #: REST calls a chat makes a minute (its history, sessions, the agent console's reads).
    rest_requests_per_chat_per_minute: float = 6.0
    input_tokens_per_message: int = 1500
    output_tokens_per_message: int = 160
    #: Every rate is sized for the target times this.
    headroom: float = 1.5
    #: Output tokens a second of the slower of the stage's models (the primary and its fallback), as measured.
    model_tokens_per_second: float = 40.0
    #: The most output tokens of one reply (Bedrock's ``maxTokens``); a longer answer stops there, to be continued.
    max_output_tokens: int = 800
    #: The message function's timeout when hand-set (None: derived); refused below what the longest reply needs.
    message_timeout_seconds: int | None = None

    @property
    def limits(self) -> CapacityLimits:
        """Every limit derived from this target (docs/capacity.md gives the formula of each)."""
        messages = self.concurrent_chats * self.messages_per_chat_per_minute / 60
        ws_message_rate, ws_message_burst = _route(messages * self.headroom)
        ws_connect_rate, ws_connect_burst = _route(self.connects_per_second * self.headroom)
        rest = self.concurrent_chats * self.rest_requests_per_chat_per_minute / 60 * self.headroom
        rest_rate, rest_burst = _route(rest, MIN_REST_RATE)
        batch, window, parallel, shards, records = self._router(ws_message_rate)
        requests = _ceil(ws_message_rate * 60 * MODEL_CALLS_PER_TURN)
        tokens = requests * (self.input_tokens_per_message + OUTPUT_TOKEN_BURNDOWN * self.output_tokens_per_message)
        write, deadline, timeout = self._reply_times()
        return CapacityLimits(
            messages_per_second=messages,
            ws_message_rate=ws_message_rate,
            ws_message_burst=ws_message_burst,
            ws_connect_rate=ws_connect_rate,
            ws_connect_burst=ws_connect_burst,
            ws_default_rate=max(ws_message_rate, ws_connect_rate),
            ws_default_burst=max(ws_message_burst, ws_connect_burst),
            rest_rate=rest_rate,
            rest_burst=rest_burst,
            message_reserved_concurrency=_ceil(ws_message_rate * self.reply_p95_seconds),
            stream_records_per_second=records,
            stream_shards=shards,
            stream_batch_size=batch,
            stream_batching_window_seconds=window,
            stream_parallelization_factor=parallel,
            bedrock_requests_per_minute=requests,
            bedrock_tokens_per_minute=tokens,
            api_gateway_requests_per_second=rest_rate + 2 * ws_message_rate + 2 * ws_connect_rate,
            reply_write_seconds=write,
            reply_deadline_seconds=deadline,
            message_timeout_seconds=timeout,
        )

    @property
    def needed_message_timeout_seconds(self) -> int:
        """The timeout the longest reply needs (the derived one, whatever is hand-set)."""
        write = self.first_frame_p95_seconds + self.max_output_tokens / self.model_tokens_per_second
        return min(_ceil(write), MAX_MESSAGE_TIMEOUT_SECONDS - STORE_SECONDS) + STORE_SECONDS

    def _reply_times(self) -> tuple[float, int, int]:
        """The longest reply's write time, the reply deadline and the message function's timeout.

        Write time: ``first_frame_p95_seconds + max_output_tokens / model_tokens_per_second``. The
        deadline is that, rounded up, at most :data:`MAX_MESSAGE_TIMEOUT_SECONDS` less
        :data:`STORE_SECONDS`; the timeout is the deadline plus :data:`STORE_SECONDS`. A hand-set
        timeout replaces the derived one, and the deadline is it less :data:`STORE_SECONDS`.
        """
        write = self.first_frame_p95_seconds + self.max_output_tokens / self.model_tokens_per_second
        deadline = min(_ceil(write), MAX_MESSAGE_TIMEOUT_SECONDS - STORE_SECONDS)
        if self.message_timeout_seconds is not None:
            return write, max(1, self.message_timeout_seconds - STORE_SECONDS), self.message_timeout_seconds
        return write, deadline, deadline + STORE_SECONDS

    @staticmethod
    def _router(ws_message_rate: int) -> tuple[int, int, int, int, float]:
        """Batch size, window, parallelization, shards and records a second for the messages the gateway admits.

        Records spread over one shard per table partition (a partition per 1,000 write units a
        second); each shard's records must be handled as fast as they come: ``parallelization``
        batches at once, each of ``batch`` records in :func:`router_batch_seconds`. The smallest
        batch that keeps up within 10 parallel batches wins; the window is the time one shard
        takes to fill a batch, at most :data:`MAX_BATCHING_WINDOW_SECONDS`, at least 1 s.
        """
        records = ws_message_rate * ROUTED_RECORDS_PER_TURN
        shards = max(1, _ceil(ws_message_rate * WRITE_UNITS_PER_TURN / PARTITION_WRITE_UNITS))
        per_shard = records / shards
        for batch in ROUTER_BATCH_SIZES:
            parallel = max(1, _ceil(per_shard * router_batch_seconds(batch) / batch))
            if parallel <= MAX_PARALLELIZATION:
                window = min(MAX_BATCHING_WINDOW_SECONDS, max(1, _ceil(batch / per_shard)))
                return batch, window, parallel, shards, records
        raise ConfigError(
            f"the stream router cannot keep up with {per_shard:.0f} records a second on each of {shards} shards "
            f"even in batches of {ROUTER_BATCH_SIZES[-1]}, {MAX_PARALLELIZATION} at once"
        )

    def validate(self, stage: str, hand_set: Mapping[str, float]) -> None:
        """Raise ConfigError naming ``capacity.<key>``, or a hand-set limit the target needs more of.

        ``hand_set`` holds the stage's own limits the target bounds: the per-connection and
        per-customer messages a minute, the function timeout, the WAF's per-IP rate.
        """
        for key, (low, high) in _BOUNDS.items():
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
                raise _fail(stage, f"capacity.{key}", f"must be a number in {low:g}..{high:g}", value)
        for key in ("concurrent_chats", "input_tokens_per_message", "output_tokens_per_message", "max_output_tokens"):
            if not isinstance(getattr(self, key), int):
                raise _fail(stage, f"capacity.{key}", "must be a whole number", getattr(self, key))
        if self.first_frame_p95_seconds > self.reply_p95_seconds:
            rule = f"must not exceed capacity.reply_p95_seconds ({self.reply_p95_seconds:g})"
            raise _fail(stage, "capacity.first_frame_p95_seconds", rule, self.first_frame_p95_seconds)
        limits = self.limits  # raises when the router cannot keep up
        if limits.api_gateway_requests_per_second > ACCOUNT_API_RATE:
            rule = (
                f"derives throttles admitting {limits.api_gateway_requests_per_second} requests a second, above "
                f"API Gateway's regional {ACCOUNT_API_RATE} (raise that quota, then this bound)"
            )
            raise _fail(stage, "capacity.concurrent_chats", rule, self.concurrent_chats)
        self._validate_hand_set(stage, hand_set, limits)
        self._validate_message_timeout(stage, limits)

    def _validate_message_timeout(self, stage: str, limits: CapacityLimits) -> None:
        """A hand-set message function timeout: a whole number, room for the longest reply, within the route's limit."""
        given = self.message_timeout_seconds
        if given is None:
            return
        if isinstance(given, bool) or not isinstance(given, int) or not 1 <= given <= LAMBDA_MAX_TIMEOUT_SECONDS:
            raise _fail(
                stage,
                "capacity.message_timeout_seconds",
                f"must be a whole number in 1..{LAMBDA_MAX_TIMEOUT_SECONDS}",
                given,
            )
        if given > MAX_MESSAGE_TIMEOUT_SECONDS:
            rule = (
                f"must be at most {MAX_MESSAGE_TIMEOUT_SECONDS} s: the sendMessage route invokes the function "
                f"synchronously and API Gateway waits {ROUTE_INTEGRATION_SECONDS} s for it, a cold start's "
                f"{COLD_START_SECONDS} s included"
            )
            raise _fail(stage, "capacity.message_timeout_seconds", rule, given)
        capped = _ceil(limits.reply_write_seconds) > MAX_MESSAGE_TIMEOUT_SECONDS - STORE_SECONDS
        needed = self.needed_message_timeout_seconds
        if given < needed:
            rule = (
                f"must be at least {needed} s: capacity.max_output_tokens ({self.max_output_tokens}) at "
                f"capacity.model_tokens_per_second ({self.model_tokens_per_second:g}) take "
                f"{self.max_output_tokens / self.model_tokens_per_second:g} s after the first frame's "
                f"{self.first_frame_p95_seconds:g} s, and storing the reply {STORE_SECONDS} s"
                + (" (the route's most; a longer reply stops at the deadline and is continued)" if capped else "")
            )
            raise _fail(stage, "capacity.message_timeout_seconds", rule, given)

    def _validate_hand_set(self, stage: str, hand_set: Mapping[str, float], limits: CapacityLimits) -> None:
        per_chat = self.messages_per_chat_per_minute
        for key in ("chat_connection_messages_per_minute", "chat_customer_messages_per_minute"):
            if key in hand_set and hand_set[key] < per_chat:
                rule = (
                    f"must be at least capacity.messages_per_chat_per_minute ({per_chat:g}): a chat at the "
                    f"target's pace would be refused"
                )
                raise _fail(stage, key, rule, hand_set[key])
        deadline = hand_set.get("bedrock_deadline_seconds")
        if deadline is not None and deadline < self.reply_p95_seconds:
            rule = (
                f"leaves the model {deadline:g} s, less than capacity.reply_p95_seconds ({self.reply_p95_seconds:g}): "
                f"the function timeout must be at least {_ceil(self.reply_p95_seconds) + 10} s"
            )
            raise _fail(stage, "lambda_timeout_seconds", rule, hand_set.get("lambda_timeout_seconds"))
        waf = hand_set.get("waf_ip_rate_limit")
        most = int(limits.rest_rate * WAF_WINDOW_SECONDS * WAF_IP_SHARE)
        if waf is not None and waf > most:
            rule = (
                f"must be at most a tenth of the stage's REST requests in {WAF_WINDOW_SECONDS} s: the target derives "
                f"a REST throttle of {limits.rest_rate}/s, so at most {most}"
            )
            raise _fail(stage, "waf_ip_rate_limit", rule, int(waf))


#: The WAF's per-IP window (s), and the share of the stage's REST throttle in it one source IP may use.
WAF_WINDOW_SECONDS, WAF_IP_SHARE = 300, 0.1


def _fail(stage: str, key: str, rule: str, given: Any) -> ConfigError:
    return ConfigError(f"stage '{stage}': {key} {rule} (given {given!r})")


def refuse_retired_keys(stage: str, raw: Mapping[str, Any]) -> None:
    """Refuse a stage entry that still hand-sets a limit the capacity block derives, naming the derived value."""
    retired = sorted(set(raw) & set(RETIRED_KEYS))
    if not retired:
        return
    try:
        limits = capacity(stage, raw.get("capacity", {})).limits
        derived = ", ".join(f"{key} {getattr(limits, RETIRED_KEYS[key])}" for key in retired)
    except (ConfigError, TypeError):
        derived = "see docs/capacity.md"
    raise ConfigError(
        f"stage {stage!r}: {retired} are derived from the capacity block now (its target derives {derived}); "
        "remove them from cdk.json and state the load in capacity instead (docs/capacity.md)"
    )


def capacity(stage: str, raw: Any) -> CapacityConfig:
    """The ``capacity`` block of a stage entry as a CapacityConfig (validated with the stage)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"stage '{stage}': capacity must be an object (given {raw!r})")
    known = {f.name for f in fields(CapacityConfig)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"stage {stage!r}: unknown capacity keys {unknown}; allowed keys are {sorted(known)}")
    return CapacityConfig(**raw)
