"""The cost benchmark's arithmetic: the price table's units, each service's billing rule, a bill by hand.

The benchmark itself (bench/cost.py on the embedded stage) is not part of `make test`; what it
multiplies is, so a wrong unit or rounding rule fails here and not silently in a table.
"""

from __future__ import annotations

import pytest

from bench import cost
from bench.meter import IndexSpec, TableSpec
from bench.prices import MODEL_PRICES, PRICES, price
from bench.usage import (
    FirehosePut,
    Invocation,
    Usage,
    billed_ms,
    chunks,
    firehose_billed_bytes,
    firehose_objects,
    gb_seconds,
    lambda_compute_seconds,
    read_units,
    tokens,
    write_units,
)

HAIKU = "anthropic.claude-3-haiku-20240307-v1:0"
GIB = 1024**3


@pytest.mark.parametrize(
    ("name", "usd_per_unit"),
    [
        ("lambda.requests", 0.20 / 1e6),
        ("lambda.arm64_gb_second", 0.0000133334),
        ("dynamodb.write_request_unit", 0.625 / 1e6),
        ("dynamodb.read_request_unit", 0.125 / 1e6),
        ("firehose.ingested_gb", 0.029),
        ("eventbridge.custom_events", 1.00 / 1e6),
        ("sns.requests", 0.50 / 1e6),
        ("sqs.requests", 0.40 / 1e6),
        ("apigateway.websocket_messages", 1.00 / 1e6),
        ("apigateway.connection_minutes", 0.25 / 1e6),
        ("cloudwatch.logs_ingested_gb", 0.50),
        ("xray.traces", 5.00 / 1e6),
        ("bedrock.claude3_haiku_input_tokens", 0.00025 / 1000),
        ("bedrock.claude3_haiku_output_tokens", 0.00125 / 1000),
        ("bedrock.claude_haiku_4_5_input_tokens", 0.001 / 1000),
        ("bedrock.claude_haiku_4_5_output_tokens", 0.005 / 1000),
    ],
)
def test_each_price_is_usd_per_one_unit(name: str, usd_per_unit: float) -> None:
    assert price(name) == pytest.approx(usd_per_unit)


def test_every_price_names_its_page_and_says_it_was_not_retrieved() -> None:
    for name, listed in PRICES.items():
        assert listed.usd > 0, name
        assert listed.per > 0, name
        assert listed.source.startswith(f'as listed on "{listed.page}" (retrieved: '), name
        assert "pricing" in listed.page.lower(), name
    assert all(key in PRICES for pair in MODEL_PRICES.values() for key in pair)


def test_dynamodb_bills_started_kilobytes_written_and_started_4_kb_read() -> None:
    assert [write_units(n) for n in (0, 1, 1024, 1025, 4096)] == [1, 1, 1, 2, 4]
    assert write_units(1500, transactional=True) == 4
    assert read_units(4096, consistent=True) == 1
    assert read_units(4097, consistent=True) == 2
    assert read_units(4097, consistent=False) == 1
    assert read_units(0, consistent=False) == 0.5
    assert read_units(100, consistent=True, transactional=True) == 2


def test_payloads_round_up_to_their_service_chunk() -> None:
    assert firehose_billed_bytes(1) == 5 * 1024
    assert firehose_billed_bytes(5 * 1024 + 1) == 10 * 1024
    assert chunks(32 * 1024, 32 * 1024) == 1
    assert chunks(32 * 1024 + 1, 32 * 1024) == 2
    assert tokens(0) == 0
    assert tokens(9) == 3


def test_lambda_duration_is_billed_in_whole_milliseconds_at_the_memory_size() -> None:
    assert billed_ms(0.0101) == 11
    assert billed_ms(0.5) == 500
    assert billed_ms(0) == 1
    assert gb_seconds(256, 1000) == 0.25
    # 256 MB is 256/1769 of a vCPU: 10 ms of CPU here take about 69 ms there; 1,769 MB and up run at full speed.
    assert lambda_compute_seconds(0.010, 256) == pytest.approx(0.010 * 1769 / 256)
    assert lambda_compute_seconds(0.010, 3008) == pytest.approx(0.010)


def test_firehose_writes_an_object_per_buffering_interval_or_size_whichever_comes_first() -> None:
    def puts(*moments: float, size: int = 1000) -> list[FirehosePut]:
        return [FirehosePut("audit", at, size) for at in moments]

    # A put every 30 s into a 60 s buffer: two puts an object (the third opens the next buffer)
    assert firehose_objects(puts(0, 30, 60, 90, 120), interval_seconds=60, size_bytes=5 * 1024**2) == 3
    # Out of order, the same: buffers follow arrival on the clock
    assert firehose_objects(puts(90, 0, 60, 30), interval_seconds=60, size_bytes=5 * 1024**2) == 2
    # The size closes a buffer early: the next put opens another at once
    assert firehose_objects(puts(0, 1, 2, 3, size=2000), interval_seconds=60, size_bytes=4000) == 2
    # A zero interval writes every put out alone; nothing put, nothing written
    assert firehose_objects(puts(0, 0, 0), interval_seconds=0, size_bytes=5 * 1024**2) == 3
    assert firehose_objects([], interval_seconds=60, size_bytes=1) == 0
    with pytest.raises(ValueError, match="interval_seconds"):
        firehose_objects(puts(0), interval_seconds=-1, size_bytes=1)


def test_a_function_run_per_object_is_repriced_at_its_measured_average() -> None:
    usage = Usage("d", turns=4)
    usage.invocations = [
        Invocation("lock", 256, 0.010, 0.020, 300),
        Invocation("lock", 256, 0.030, 0.040, 500),
        Invocation("other", 512, 0.5),
        Invocation("lock", 256, 0.020, 0.030, 400),
    ]
    usage.reprice_per_object("lock", 2)

    assert usage.invocations_by_handler() == {"lock": 2, "other": 1}
    locks = [i for i in usage.invocations if i.handler == "lock"]
    assert [i.local_cpu for i in locks] == pytest.approx([0.020, 0.020])
    assert [i.waiting for i in locks] == pytest.approx([0.030, 0.030])
    assert [i.log_bytes for i in locks] == [400, 400]
    usage.reprice_per_object("absent", 3)  # a function that never ran is left alone
    assert len(usage.invocations) == 3


def test_a_small_bill_by_hand() -> None:
    # Given two turns: two 1,024 MB invocations of 0.5 s each, 6 write units (4 table, 2 index),
    # 3 read units, two 5 KB Firehose records, 4 WebSocket messages, a minute connected, 1,000
    # input and 200 output tokens on Claude 3 Haiku
    usage = Usage(
        "hand",
        model_id=HAIKU,
        turns=2,
        invocations=[Invocation("lambdas.ws.message.handler", 1024, local_cpu=0.0, waiting=0.5) for _ in range(2)],
        write_units=4,
        index_write_units=2,
        read_units=3,
        firehose_records=2,
        firehose_billed_bytes=2 * 5 * 1024,
        ws_messages=4,
        connection_seconds=60,
        input_tokens=1000,
        output_tokens=200,
    )

    # When it is billed per 1,000 turns (500 times what two turns cost)
    bill = cost.bill(usage)

    # Then each line is the hand computation
    assert bill["lambda_requests"] == pytest.approx(2 * 0.20e-6 * 500)
    assert bill["lambda_duration"] == pytest.approx(2 * 0.5 * 0.0000133334 * 500)  # 1 GB x 0.5 s, twice
    assert bill["dynamodb_writes"] == pytest.approx(6 * 0.625e-6 * 500)
    assert bill["dynamodb_reads"] == pytest.approx(3 * 0.125e-6 * 500)
    assert bill["firehose"] == pytest.approx(10 * 1024 / GIB * 0.029 * 500)
    assert bill["eventbridge"] == bill["sns"] == bill["sqs"] == 0
    assert bill["websocket_messages"] == pytest.approx(4 * 1e-6 * 500)
    assert bill["websocket_minutes"] == pytest.approx(1 * 0.25e-6 * 500)
    assert bill["logs"] == pytest.approx(2 * cost.PLATFORM_LOG_BYTES / GIB * 0.50 * 500)
    assert bill["xray"] == pytest.approx(2 * 5e-6 * 500)
    assert bill["model"] == pytest.approx((1000 * 0.00025 / 1000 + 200 * 0.00125 / 1000) * 500)
    assert set(bill) == {*cost.COMPONENTS, "model"}


def test_fails_to_bill_no_turns_or_an_unpriced_model() -> None:
    with pytest.raises(ValueError, match="no turns"):
        cost.bill(Usage("empty"))
    with pytest.raises(KeyError, match=r"add it to bench/prices\.py"):
        cost.model_cost(Usage("other", model_id="amazon.nova-pro-v1:0", turns=1, input_tokens=10))


def test_a_gsi_bills_a_write_when_its_entry_changes_and_two_when_its_key_does() -> None:
    spec = TableSpec(
        "PK",
        "SK",
        (IndexSpec("GSI1", "customer_id", "updated_at", "ALL"), IndexSpec("Keys", "customer_id", None, "KEYS_ONLY")),
    )
    all_index, keys_only = spec.indexes
    old = {"PK": {"S": "SESSION#1"}, "SK": {"S": "META"}, "customer_id": {"S": "c"}, "updated_at": {"N": "1"}}
    moved = {**old, "updated_at": {"N": "2"}}
    counted = {**old, "turn_count": {"N": "3"}}
    assert spec.index_write_units(all_index, None, old) == 1  # a new entry
    assert spec.index_write_units(all_index, old, moved) == 2  # a new sort key: delete and put
    assert spec.index_write_units(all_index, old, counted) == 1  # a projected attribute changed
    assert spec.index_write_units(all_index, old, old) == 0
    assert spec.index_write_units(keys_only, old, counted) == 0  # not projected: no index write
    assert spec.index_write_units(all_index, {"PK": {"S": "x"}}, {"PK": {"S": "x"}}) == 0  # sparse: not in the index
