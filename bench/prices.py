"""The price table of the cost benchmark (bench/cost.py): us-east-1, on-demand, USD, no free tier.

Sources, one AWS pricing page per service, named in each entry. These figures were NOT retrieved
from the pages for this table: it was written on 2026-11-24 on a machine without network access,
from the public list prices as the author knew them in 2025. Every entry says so ("as listed on
<page> (retrieved: not retrieved, ...)"). Check the pages before a total decides anything;
entries the author was unsure of carry a comment saying what to check.

Each price is USD per ``per`` units of ``unit``; :meth:`Price.per_unit` gives USD per one unit, so
the arithmetic in bench/cost.py never meets a "per million".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

#: The day this table was written (not the day the pages were read: see the module docstring).
RECORDED: Final = "2026-11-24"
REGION: Final = "us-east-1"
_NOT_RETRIEVED: Final = f"retrieved: not retrieved, list price as known in 2025, recorded {RECORDED}"


@dataclass(frozen=True)
class Price:
    """One list price: ``usd`` per ``per`` ``unit`` (e.g. 0.20 USD per 1,000,000 requests)."""

    usd: float
    per: float
    unit: str
    page: str

    @property
    def per_unit(self) -> float:
        """USD for one ``unit``."""
        return self.usd / self.per

    @property
    def source(self) -> str:
        return f'as listed on "{self.page}" ({_NOT_RETRIEVED})'


MILLION: Final = 1_000_000
GB: Final = 1024**3

PRICES: Final[dict[str, Price]] = {
    # AWS Lambda: requests, and duration on arm64 (Graviton), first tier (up to 7.5 bn GB-s a month).
    "lambda.requests": Price(0.20, MILLION, "request", "AWS Lambda pricing"),
    "lambda.arm64_gb_second": Price(0.0000133334, 1, "GB-second (arm64)", "AWS Lambda pricing"),
    # DynamoDB on-demand, Standard table class, after the November 2024 price cut (half of
    # 1.25 / 0.25 USD per million before it).
    "dynamodb.write_request_unit": Price(0.625, MILLION, "write request unit", "Amazon DynamoDB pricing: on-demand"),
    "dynamodb.read_request_unit": Price(0.125, MILLION, "read request unit", "Amazon DynamoDB pricing: on-demand"),
    # Amazon Data Firehose, Direct PUT into S3: per GB ingested, each record rounded up to 5 KB.
    "firehose.ingested_gb": Price(0.029, 1, "GB ingested (5 KB per record minimum)", "Amazon Data Firehose pricing"),
    # EventBridge: custom events published (each 64 KB chunk is one event), and archive processing.
    "eventbridge.custom_events": Price(1.00, MILLION, "event (64 KB chunk)", "Amazon EventBridge pricing"),
    # Unsure: the archive's per-GB processing price (0.10); storage (0.023 per GB-month) is left out.
    "eventbridge.archive_gb": Price(0.10, 1, "GB archived", "Amazon EventBridge pricing"),
    # SNS standard topics: each 64 KB chunk published is one request; delivery to SQS is free.
    # Unsure: that PublishBatch bills by 64 KB of the whole batch, not per message (check the
    # PublishBatch note on the page).
    "sns.requests": Price(0.50, MILLION, "publish request (64 KB chunk)", "Amazon SNS pricing"),
    # SQS standard queues: each 64 KB chunk of a request is one request.
    "sqs.requests": Price(0.40, MILLION, "request (64 KB chunk)", "Amazon SQS pricing"),
    # API Gateway WebSocket APIs: messages in 32 KB increments (first billion a month), and
    # connection minutes.
    "apigateway.websocket_messages": Price(1.00, MILLION, "message (32 KB increment)", "Amazon API Gateway pricing"),
    "apigateway.connection_minutes": Price(0.25, MILLION, "connection minute", "Amazon API Gateway pricing"),
    # CloudWatch Logs, Standard class, data ingested (Lambda logs, first 10 TB tier since 2025).
    "cloudwatch.logs_ingested_gb": Price(0.50, 1, "GB ingested", "Amazon CloudWatch pricing"),
    # X-Ray: traces recorded.
    "xray.traces": Price(5.00, MILLION, "trace recorded", "AWS X-Ray pricing"),
    # Bedrock on-demand, Anthropic Claude 3 Haiku (the stages' model until its end of life on
    # Bedrock, 2026-09-10; kept to price earlier runs).
    "bedrock.claude3_haiku_input_tokens": Price(0.00025, 1000, "input token", "Amazon Bedrock pricing"),
    "bedrock.claude3_haiku_output_tokens": Price(0.00125, 1000, "output token", "Amazon Bedrock pricing"),
    # Bedrock on-demand, Anthropic Claude Haiku 4.5 (the stage default model, global profile).
    # Unsure: Anthropic lists $1 / $5 per million tokens; check that Bedrock's page lists the
    # same for the global cross-region profile (geographic profiles may cost more).
    "bedrock.claude_haiku_4_5_input_tokens": Price(0.001, 1000, "input token", "Amazon Bedrock pricing"),
    "bedrock.claude_haiku_4_5_output_tokens": Price(0.005, 1000, "output token", "Amazon Bedrock pricing"),
}

#: The Bedrock prices of each model id the cost model knows (input, output); others are not priced.
MODEL_PRICES: Final[dict[str, tuple[str, str]]] = {
    "anthropic.claude-3-haiku-20240307-v1:0": (
        "bedrock.claude3_haiku_input_tokens",
        "bedrock.claude3_haiku_output_tokens",
    ),
    "global.anthropic.claude-haiku-4-5-20251001-v1:0": (
        "bedrock.claude_haiku_4_5_input_tokens",
        "bedrock.claude_haiku_4_5_output_tokens",
    ),
}


def price(name: str) -> float:
    """USD per one unit of the named price."""
    return PRICES[name].per_unit
