"""The router's batched writers without AWS: chunk limits, bounded jittered retries, error kinds."""

from __future__ import annotations

import json
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from lambdas.events.delivery import (
    EVENTS_MAX_ENTRIES,
    FIREHOSE_MAX_BYTES,
    FIREHOSE_MAX_RECORD_BYTES,
    FIREHOSE_MAX_RECORDS,
    Backoff,
    Entry,
    FirehoseWriter,
    chunked,
    packed,
    send_with_retries,
)


def entries(count: int, size: int = 10) -> list[Entry[int]]:
    return [Entry(str(n), n, size) for n in range(count)]


def client_error(code: str, status: int) -> ClientError:
    return ClientError({"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "Op")


def test_chunks_respect_the_count_limit() -> None:
    chunks = list(chunked(entries(1001), max_count=FIREHOSE_MAX_RECORDS, max_bytes=FIREHOSE_MAX_BYTES))
    assert [len(c) for c in chunks] == [500, 500, 1]


def test_chunks_respect_the_byte_limit() -> None:
    # Given 10 entries of 1 MiB: at most 4 fit under 4 MiB
    big = entries(10, size=1024 * 1024)
    chunks = list(chunked(big, max_count=500, max_bytes=FIREHOSE_MAX_BYTES))
    assert [len(c) for c in chunks] == [4, 4, 2]


def test_chunks_of_ten_for_events() -> None:
    assert [len(c) for c in chunked(entries(25), max_count=EVENTS_MAX_ENTRIES, max_bytes=256 * 1024)] == [10, 10, 5]


def test_only_failed_entries_are_resent_with_growing_jittered_delays() -> None:
    # Given a service that fails entry "2" twice and "4" once
    sent: list[list[int]] = []
    fail_plan = {2: 2, 4: 1}

    def send(payloads: list[int]) -> list[bool]:
        sent.append(list(payloads))
        ok = []
        for p in payloads:
            if fail_plan.get(p, 0) > 0:
                fail_plan[p] -= 1
                ok.append(False)
            else:
                ok.append(True)
        return ok

    sleeps: list[float] = []
    backoff = Backoff(attempts=4, base_seconds=0.1, cap_seconds=1.0, sleep=sleeps.append, rand=lambda: 0.5)
    # When sent
    left = send_with_retries(entries(5), send, backoff)
    # Then each retry carried only what had failed, delays are jittered exponential backoff
    assert left == []
    assert sent == [[0, 1, 2, 3, 4], [2, 4], [2]]
    assert sleeps == [0.05, 0.1]


def test_retries_are_bounded_and_what_is_left_is_returned() -> None:
    sleeps: list[float] = []
    backoff = Backoff(attempts=3, sleep=sleeps.append, rand=lambda: 1.0)
    left = send_with_retries(entries(3), lambda payloads: [p != 1 for p in payloads], backoff)
    assert [e.owner for e in left] == ["1"]
    assert len(sleeps) == 2  # 3 calls, 2 waits, never a wait after the last call


@pytest.mark.parametrize(
    "error",
    [
        client_error("ThrottlingException", 400),
        client_error("InternalFailure", 500),
        EndpointConnectionError(endpoint_url="x"),
    ],
)
def test_a_whole_call_failing_with_a_transient_error_is_retried(error: Exception) -> None:
    calls = {"n": 0}

    def send(payloads: list[int]) -> list[bool]:
        calls["n"] += 1
        if calls["n"] == 1:
            raise error
        return [True] * len(payloads)

    assert send_with_retries(entries(2), send, Backoff(sleep=lambda _: None)) == []
    assert calls["n"] == 2


def test_fails_a_chunk_at_once_on_an_error_a_retry_cannot_fix() -> None:
    calls = {"n": 0}

    def send(payloads: list[int]) -> list[bool]:
        calls["n"] += 1
        raise client_error("AccessDeniedException", 403)

    left = send_with_retries(entries(2), send, Backoff(sleep=lambda _: None))
    assert len(left) == 2
    assert calls["n"] == 1


def test_fails_fast_on_an_unbounded_or_inverted_backoff() -> None:
    with pytest.raises(ValueError, match=r"attempts must be 1\.\.10"):
        Backoff(attempts=0)
    with pytest.raises(ValueError, match="base <= cap"):
        Backoff(base_seconds=2, cap_seconds=1)


class FakeFirehose:
    """Records PutRecordBatch requests; every call succeeds."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    def put_record_batch(self, **kwargs: Any) -> dict[str, Any]:
        self.requests.append(kwargs)
        return {"FailedPutCount": 0, "RequestResponses": [{"RecordId": "x"}] * len(kwargs["Records"])}


def test_firehose_records_are_newline_delimited_json_in_one_call_per_500() -> None:
    fake = FakeFirehose()
    writer = FirehoseWriter(fake, "stream", Backoff(sleep=lambda _: None))
    failed = writer.write([Entry(str(n), {"n": n}, 0) for n in range(501)])
    assert failed == set()
    assert [len(r["Records"]) for r in fake.requests] == [500, 1]
    assert fake.requests[0]["Records"][0]["Data"] == b'{"n":0}\n'


def test_packed_lines_keep_their_order_and_fill_records_up_to_the_cap() -> None:
    lines = [("a", b"1234\n"), ("b", b"56\n"), ("c", b"789\n"), ("d", b"0123456789\n")]
    records = packed(lines, max_bytes=10)
    # Then "1234\n56\n" (8 bytes) takes no more; a line longer than the cap is a record of its own
    assert records == [({"a", "b"}, b"1234\n56\n"), ({"c"}, b"789\n"), ({"d"}, b"0123456789\n")]
    assert b"".join(data for _, data in records) == b"".join(line for _, line in lines)


class RejectFirst(FakeFirehose):
    """Rejects the first record of every call (``ServiceUnavailableException``)."""

    def put_record_batch(self, **kwargs: Any) -> dict[str, Any]:
        self.requests.append(kwargs)
        responses = [{"RecordId": "x"} for _ in kwargs["Records"]]
        responses[0] = {"ErrorCode": "ServiceUnavailableException", "ErrorMessage": "injected"}
        return {"FailedPutCount": 1, "RequestResponses": responses}


def test_a_packing_writer_puts_many_lines_in_one_record_that_a_reader_splits_back() -> None:
    fake = FakeFirehose()
    writer = FirehoseWriter(fake, "stream", Backoff(sleep=lambda _: None), pack=True)
    assert writer.write([Entry(str(n), {"n": n}, 0) for n in range(501)]) == set()
    # Then 501 lines are ONE record (Firehose bills each record at 5 KB at least) ...
    (request,) = fake.requests
    (record,) = request["Records"]
    # ... which holds every line, in order, one JSON document per line
    assert [json.loads(line) for line in record["Data"].splitlines()] == [{"n": n} for n in range(501)]


def test_a_packed_record_that_keeps_failing_reports_the_owner_of_every_line_it_holds() -> None:
    # Given three lines of 400 KiB: two fit in one 1,000 KiB record, the third is another
    fake = RejectFirst()
    writer = FirehoseWriter(fake, "stream", Backoff(attempts=3, sleep=lambda _: None), pack=True)
    entries = [Entry(owner, {"pad": "x" * 400 * 1024}, 0) for owner in ("a", "b", "c")]
    # When the first record is rejected on every attempt
    failed = writer.write(entries)
    # Then both owners of that record are reported, the other record went through at once, and
    # only the rejected record was resent
    assert failed == {"a", "b"}
    assert [len(r["Records"]) for r in fake.requests] == [2, 1, 1]
    assert FIREHOSE_MAX_RECORD_BYTES == 1000 * 1024
    assert all(len(r["Data"]) <= FIREHOSE_MAX_RECORD_BYTES for call in fake.requests for r in call["Records"])
