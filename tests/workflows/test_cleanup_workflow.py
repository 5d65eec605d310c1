"""The cleanup state machine, as synthesized, executed on moto: query pages, Map, worker, counts."""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import boto3
import pytest
from moto import mock_aws

from embedded.runtime import Invocations, in_process
from embedded.services.dynamodb import atomic_requests
from embedded.synth import stage_config
from lambdas.orchestration import cleanup_worker
from lambdas.shared import env as lambda_env
from lambdas.shared import keys
from lambdas.shared.records import Role, SessionStatus
from lambdas.shared.store import DynamoSessionStore
from stacks.config import with_overrides
from stacks.functions import stage_environment
from tests.workflows.orchestration_harness import REGION, Deployed, deploy, synthesize_orchestration

SHARDS = 3
CONFIG = with_overrides(
    stage_config("dev"), name="test", cleanup_shards=SHARDS, workflow_timeout_minutes=5, review_ttl_days=1
)
HOUR = 3600
SMALL_PAGE = 7


@pytest.fixture(scope="module")
def templates() -> dict[str, Any]:
    return synthesize_orchestration(CONFIG)


@pytest.fixture(scope="module")
def small_page_templates() -> dict[str, Any]:
    """The same stage with cleanup index pages of SMALL_PAGE sessions, so a few dozen sessions take many pages."""
    with mock.patch("stacks.orchestration_stack.CLEANUP_PAGE_SIZE", SMALL_PAGE):
        return synthesize_orchestration(CONFIG, variant=f"cleanup pages of {SMALL_PAGE}")


@contextmanager
def _deployed(templates: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Deployed, Invocations]]:
    with (
        mock_aws(config={"stepfunctions": {"execute_state_machine": True}}),
        atomic_requests(),
        in_process() as calls,
    ):
        deployed = deploy(templates)
        # Worker code also runs in this process: give it the function's environment (the stage's settings too)
        for name, value in {**stage_environment(CONFIG), "TABLE_NAME": deployed.table_name}.items():
            monkeypatch.setenv(name, value)
        yield deployed, calls
        lambda_env.reset()


@pytest.fixture
def world(templates: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Deployed, Invocations]]:
    with _deployed(templates, monkeypatch) as running:
        yield running


@pytest.fixture
def small_pages(
    small_page_templates: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Deployed, Invocations]]:
    with _deployed(small_page_templates, monkeypatch) as running:
        yield running


def _worker_environment(deployed: Deployed, monkeypatch: pytest.MonkeyPatch) -> None:
    """Give the in-process worker code the deployed worker function's environment."""
    config = boto3.client("lambda", region_name=REGION).get_function_configuration(
        FunctionName=deployed.function("CleanupWorker")
    )
    for name, value in config["Environment"]["Variables"].items():
        monkeypatch.setenv(name, value)
    lambda_env.reset()


def _store(deployed: Deployed, at: float) -> DynamoSessionStore:
    return DynamoSessionStore(deployed.table_name, clock=lambda: at, cleanup_shards=SHARDS)


def _session(
    deployed: Deployed, *, ended_ago: int, status: SessionStatus = SessionStatus.DISCONNECTED, turns: int = 3
) -> str:
    """A session with ``turns`` turns, a summary and a handoff, that ended ``ended_ago`` seconds ago."""
    store = _store(deployed, time.time() - ended_ago - 60)
    session = store.sessions.create_session("customer-1")
    for n in range(turns):
        store.turns.add_turn(session.session_id, Role.USER if n % 2 == 0 else Role.ASSISTANT, f"turn {n + 1} text")
    store.turns.put_summary(
        session.session_id,
        1,
        summary_text="asked about volume 3",
        window_start=1,
        window_end=3,
        turn_count_at_summary=3,
    )
    store.handoffs.put_handoff(session.session_id, reason="billing", handoff_id="h-1")
    _store(deployed, time.time() - ended_ago).sessions.update_status(session.session_id, status)
    return session.session_id


def _archive(deployed: Deployed, session_id: str) -> tuple[list[dict[str, Any]], str]:
    bucket = deployed.ref("Storage", "AWS::S3::Bucket", "ArchiveBucket")
    obj = boto3.client("s3", region_name=REGION).get_object(Bucket=bucket, Key=f"sessions/{session_id}.jsonl")
    lines = obj["Body"].read().decode().splitlines()
    return [json.loads(line) for line in lines], str(obj["ETag"])


def _run(deployed: Deployed) -> dict[str, Any]:
    machine = deployed.state_machine("Cleanup")
    done = deployed.wait_done(deployed.start(machine, {}), timeout=240)
    assert done["status"] == "SUCCEEDED", done
    return dict(json.loads(done["output"]))


def test_cleans_old_sessions_keeps_recent_finishes_half_cleaned_and_second_run_changes_nothing(
    world: tuple[Deployed, Invocations],
) -> None:
    deployed, calls = world
    store = DynamoSessionStore(deployed.table_name, cleanup_shards=SHARDS)
    # Given an old disconnected session, an old deleted one, a recent one (within the grace)
    old = _session(deployed, ended_ago=2 * HOUR)
    deleted = _session(deployed, ended_ago=2 * HOUR, status=SessionStatus.DELETED)
    recent = _session(deployed, ended_ago=60)
    # and an old one that a crashed run half-cleaned: archive written, some items deleted
    half = _session(deployed, ended_ago=3 * HOUR)
    expected_half = [json.loads(line) for line in _jsonl_with_env(deployed, half).splitlines()]
    bucket = deployed.ref("Storage", "AWS::S3::Bucket", "ArchiveBucket")
    boto3.client("s3", region_name=REGION).put_object(
        Bucket=bucket, Key=f"sessions/{half}.jsonl", Body=_jsonl_with_env(deployed, half).encode()
    )
    store.sessions.invalidate(half, ["TURN#"])
    _, half_etag = _archive(deployed, half)

    # When the cleanup runs
    totals = _run(deployed)

    # Then three sessions were archived, the recent one was not even queried
    assert totals == {"sessions_seen": 3, "sessions_archived": 3, "sessions_failed": 0, "items_deleted": 12}
    seen = {c.event["session_id"] for c in calls.by_handler("lambdas.orchestration.cleanup_worker.handler")}
    assert seen == {old, deleted, half}
    for session_id in (old, deleted, half):
        session = store.sessions.get_session(session_id)
        assert session is not None
        assert session.status == SessionStatus.ARCHIVED
        assert session.archive_key == f"sessions/{session_id}.jsonl"
        assert store.sessions.list_session_items(session_id).items == [session]  # only META is left
    recent_session = store.sessions.get_session(recent)
    assert recent_session is not None
    assert recent_session.status == SessionStatus.DISCONNECTED
    assert len(store.sessions.list_session_items(recent).items) == 6  # META, 3 turns, summary, handoff
    # and the archive holds every item of the session, one JSON line each, in key order
    lines, _ = _archive(deployed, old)
    assert [line["type"] for line in lines] == ["handoff", "session", "summary", "turn", "turn", "turn"]
    turns = [line for line in lines if line["type"] == "turn"]
    assert [(t["turn_number"], t["role"], t["content"]) for t in turns] == [
        (1, "user", "turn 1 text"),
        (2, "assistant", "turn 2 text"),
        (3, "user", "turn 3 text"),
    ]
    assert next(line for line in lines if line["type"] == "summary")["summary_text"] == "asked about volume 3"
    assert next(line for line in lines if line["type"] == "session")["status"] == "disconnected"
    assert all("PK" not in line and "ttl" not in line for line in lines)
    # and the half-cleaned session's archive was kept, not rewritten with fewer items
    half_lines, etag = _archive(deployed, half)
    assert etag == half_etag
    assert half_lines == expected_half

    # When it runs again
    calls.calls.clear()
    again = _run(deployed)

    # Then nothing changes
    assert again == {"sessions_seen": 0, "sessions_archived": 0, "sessions_failed": 0, "items_deleted": 0}
    assert not calls.by_handler("lambdas.orchestration.cleanup_worker.handler")


def test_worker_is_idempotent_on_an_archived_or_missing_session(world: tuple[Deployed, Invocations]) -> None:
    deployed, _ = world
    session_id = _session(deployed, ended_ago=2 * HOUR)
    first = _invoke_worker(deployed, session_id)
    second = _invoke_worker(deployed, session_id)
    missing = _invoke_worker(deployed, "no-such-session")
    assert first["status"] == "archived"
    assert first["archive_written"] is True
    assert second["status"] == "already_archived"
    assert second["items_deleted"] == 0
    assert missing["status"] == "not_found"


def _invoke_worker(deployed: Deployed, session_id: str) -> dict[str, Any]:
    response = boto3.client("lambda", region_name=REGION).invoke(
        FunctionName=deployed.function("CleanupWorker"), Payload=json.dumps({"session_id": session_id}).encode()
    )
    assert "FunctionError" not in response
    return dict(json.loads(response["Payload"].read()))


def _jsonl_with_env(deployed: Deployed, session_id: str) -> str:
    lambda_env.reset()
    try:
        return cleanup_worker._jsonl(session_id)
    finally:
        lambda_env.reset()


def test_tally_adds_worker_results_and_shard_totals() -> None:
    results = [
        {"session_id": "a", "archived": True, "items_deleted": 4},
        {"session_id": "b", "failed": True},
        {"session_id": "c", "archived": False, "items_deleted": 0},
    ]
    page = cleanup_worker.add_up(results, {"sessions_seen": 1, "sessions_archived": 1, "items_deleted": 2})
    assert page == {"sessions_seen": 4, "sessions_archived": 2, "sessions_failed": 1, "items_deleted": 6}
    assert cleanup_worker.add_up([page, page], {}) == {
        "sessions_seen": 8,
        "sessions_archived": 4,
        "sessions_failed": 2,
        "items_deleted": 12,
    }


class _LateWriter:
    """An S3 client whose first read lets a whole other cleanup run finish first.

    Reproduces two overlapping runs: this run looks for the archive (absent), the other run
    then archives and deletes everything, and only then does this run read the partition.
    """

    def __init__(self, other_run: Any) -> None:
        self._real = boto3.client("s3", region_name=REGION)
        self._other_run = other_run
        self._fired = False

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._real, name)
        if name not in ("head_object", "get_object", "list_objects_v2") or self._fired:
            return attribute

        def first_read(**kwargs: Any) -> Any:
            try:
                return attribute(**kwargs)
            finally:
                self._fired = True
                self._other_run()

        return first_read


def test_an_overlapping_run_never_replaces_a_complete_archive_with_less(
    world: tuple[Deployed, Invocations], monkeypatch: pytest.MonkeyPatch
) -> None:
    deployed, _ = world
    store = DynamoSessionStore(deployed.table_name, cleanup_shards=SHARDS)
    # Given a session of 13 items (META, 10 turns, a summary, a handoff) past its grace
    session_id = _session(deployed, ended_ago=2 * HOUR, turns=10)
    assert len(store.sessions.list_session_items(session_id).items) == 13
    real_s3 = cleanup_worker.s3
    _worker_environment(deployed, monkeypatch)

    def other_run() -> None:
        monkeypatch.setattr(cleanup_worker, "s3", real_s3)
        assert cleanup_worker.clean_session(session_id)["status"] == "archived"

    late = _LateWriter(other_run)
    monkeypatch.setattr(cleanup_worker, "s3", lambda: late)

    # When a second run overlaps it: it finds no archive, then the first run archives and deletes
    second = cleanup_worker.clean_session(session_id)

    # Then the complete archive is still there, the second run archived nothing and lost nothing
    lines, _ = _archive(deployed, session_id)
    assert len(lines) == 13
    assert [line["turn_number"] for line in lines if line["type"] == "turn"] == list(range(1, 11))
    assert second["archived"] is False
    session = store.sessions.get_session(session_id)
    assert session is not None
    assert session.status == SessionStatus.ARCHIVED
    assert session.archive_key == f"sessions/{session_id}.jsonl"


def test_a_run_deletes_only_items_held_by_an_archive_it_read_back(
    world: tuple[Deployed, Invocations], monkeypatch: pytest.MonkeyPatch
) -> None:
    deployed, _ = world
    store = DynamoSessionStore(deployed.table_name, cleanup_shards=SHARDS)
    # Given a session whose archive object already exists but holds only its first turn
    session_id = _session(deployed, ended_ago=2 * HOUR)
    full = [json.loads(line) for line in _jsonl_with_env(deployed, session_id).splitlines()]
    first_turn = next(line for line in full if line["type"] == "turn")
    bucket = deployed.ref("Storage", "AWS::S3::Bucket", "ArchiveBucket")
    s3 = boto3.client("s3", region_name=REGION)
    s3.put_object(Bucket=bucket, Key=f"sessions/{session_id}.jsonl", Body=json.dumps(first_turn).encode() + b"\n")

    # When the worker cleans it
    _worker_environment(deployed, monkeypatch)
    result = cleanup_worker.clean_session(session_id)

    # Then the short archive was not replaced, and every deleted item is in an archive object
    first, _ = _archive(deployed, session_id)
    assert first == [first_turn]
    archived: list[dict[str, Any]] = []
    for obj in s3.list_objects_v2(Bucket=bucket, Prefix=f"sessions/{session_id}")["Contents"]:
        body = s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read().decode()
        archived += [json.loads(line) for line in body.splitlines()]
    for line in full:
        if line["type"] != "session":
            assert line in archived, line
    assert result["status"] == "archived"
    assert result["items_deleted"] == 5
    assert store.sessions.list_session_items(session_id).items == [store.sessions.get_session(session_id)]


def test_a_sweep_pages_through_distributed_maps_and_its_history_does_not_grow_with_the_sessions(
    small_pages: tuple[Deployed, Invocations],
) -> None:
    deployed, calls = small_pages
    store = DynamoSessionStore(deployed.table_name, cleanup_shards=SHARDS)
    # Given 60 sessions past their grace, several index pages in every shard
    sessions = []
    for _ in range(60):
        opened = _store(deployed, time.time() - 2 * HOUR - 60).sessions.create_session("customer-2")
        _store(deployed, time.time() - 2 * HOUR - 30).turns.add_turn(opened.session_id, Role.USER, "hello")
        _store(deployed, time.time() - 2 * HOUR).sessions.update_status(opened.session_id, SessionStatus.DISCONNECTED)
        sessions.append(opened.session_id)
    per_shard = Counter(keys.cleanup_shard(session_id, SHARDS) for session_id in sessions)

    # When one sweep runs
    machine = deployed.state_machine("Cleanup")
    execution = deployed.start(machine, {})
    done = deployed.wait_done(execution, timeout=240)

    # Then every session is archived, page by page in every shard
    assert done["status"] == "SUCCEEDED", done
    assert json.loads(done["output"]) == {
        "sessions_seen": 60,
        "sessions_archived": 60,
        "sessions_failed": 0,
        "items_deleted": 60,
    }
    assert all(store.sessions.get_session(session_id).status == SessionStatus.ARCHIVED for session_id in sessions)  # type: ignore[union-attr]
    tallies = len(calls.by_handler("lambdas.orchestration.cleanup_worker.tally"))
    assert tallies - 1 >= sum(math.ceil(count / SMALL_PAGE) for count in per_shard.values()) > SHARDS
    # And the parent's history holds the shards' map run, not the sessions (an Inline Map records
    # about 7 events per session: 420 here, 25,000 after about 3,500 sessions)
    history = boto3.client("stepfunctions", region_name=REGION).get_execution_history(
        executionArn=execution, maxResults=1000
    )["events"]
    assert len(history) < 40, [event["type"] for event in history]
    assert {"MapRunStarted", "MapRunSucceeded"} <= {event["type"] for event in history}


def test_a_per_session_run_cleans_exactly_that_session_and_never_before_its_grace_ends(
    world: tuple[Deployed, Invocations],
) -> None:
    deployed, calls = world
    store = DynamoSessionStore(deployed.table_name, cleanup_shards=SHARDS)
    # Given two sessions past their grace and one still within it
    mine = _session(deployed, ended_ago=2 * HOUR)
    other = _session(deployed, ended_ago=2 * HOUR)
    recent = _session(deployed, ended_ago=60)
    machine = deployed.state_machine("Cleanup")

    # When the cleanup runs for one session (what its schedule starts), then for the recent one
    done = deployed.wait_done(deployed.start(machine, {"session_id": mine, "trigger": "session_schedule"}))
    early = deployed.wait_done(deployed.start(machine, {"session_id": recent, "trigger": "session_schedule"}))

    # Then exactly that session is archived, without a sweep; the recent one is left for later
    assert done["status"] == "SUCCEEDED", done
    assert json.loads(done["output"]) == {
        "sessions_seen": 1,
        "sessions_archived": 1,
        "sessions_failed": 0,
        "items_deleted": 5,
    }
    statuses = {sid: store.sessions.get_session(sid).status for sid in (mine, other, recent)}  # type: ignore[union-attr]
    assert statuses == {
        mine: SessionStatus.ARCHIVED,
        other: SessionStatus.DISCONNECTED,
        recent: SessionStatus.DISCONNECTED,
    }
    assert early["status"] == "SUCCEEDED", early
    assert json.loads(early["output"])["sessions_archived"] == 0
    assert "SweepShards" not in deployed.states_entered(done["executionArn"])
    worker_runs = calls.by_handler("lambdas.orchestration.cleanup_worker.handler")
    assert [c.event["session_id"] for c in worker_runs] == [mine, recent]


def test_an_ended_session_gets_one_self_deleting_schedule_at_its_grace_end(
    world: tuple[Deployed, Invocations], monkeypatch: pytest.MonkeyPatch
) -> None:
    deployed, _ = world
    store = DynamoSessionStore(deployed.table_name, cleanup_shards=SHARDS)
    session_id = _session(deployed, ended_ago=10)
    cleanup_at = store.sessions.get_session(session_id).cleanup_at  # type: ignore[union-attr]
    config = boto3.client("lambda", region_name=REGION).get_function_configuration(
        FunctionName=deployed.function("CleanupTriggersCleanupScheduler")
    )
    for name, value in config["Environment"]["Variables"].items():
        monkeypatch.setenv(name, value)
    lambda_env.reset()
    group = config["Environment"]["Variables"]["CLEANUP_SCHEDULE_GROUP"]
    scheduler = boto3.client("scheduler", region_name=REGION)
    scheduler.create_schedule_group(Name=group)

    # When SessionEnded reaches the scheduler function, twice (EventBridge delivers at least once)
    first = cleanup_worker.schedule_session_cleanup(session_id)
    again = cleanup_worker.schedule_session_cleanup(session_id)

    # Then one schedule starts the cleanup of that session a minute after its grace ends, then goes
    assert cleanup_at is not None
    assert (first["status"], again["status"]) == ("scheduled", "already_scheduled")
    schedule = scheduler.get_schedule(Name=f"cleanup-{session_id}", GroupName=group)
    expected_at = cleanup_at + CONFIG.cleanup_grace_seconds + 60
    assert first["at"] == expected_at
    assert schedule["ScheduleExpression"] == cleanup_worker.at_expression(expected_at)
    assert schedule["ActionAfterCompletion"] == "DELETE"
    assert schedule["Target"]["Arn"] == deployed.state_machine("Cleanup")
    assert json.loads(schedule["Target"]["Input"]) == {"session_id": session_id, "trigger": "session_schedule"}
    assert [s["Name"] for s in scheduler.list_schedules(GroupName=group)["Schedules"]] == [f"cleanup-{session_id}"]
    # And an id that cannot name a session schedules nothing
    assert cleanup_worker.schedule_session_cleanup("../x")["status"] == "invalid_session_id"


def test_an_admin_cleanup_of_every_age_leaves_a_session_still_within_its_resume_grace(
    world: tuple[Deployed, Invocations],
) -> None:
    deployed, _ = world
    store = DynamoSessionStore(deployed.table_name, cleanup_shards=SHARDS)
    # Given a session that dropped its connection a minute ago and one that ended two hours ago
    recent = _session(deployed, ended_ago=60)
    old = _session(deployed, ended_ago=2 * HOUR)
    # When an admin sweeps with older_than_seconds 0 (every waiting session)
    machine = deployed.state_machine("Cleanup")
    done = deployed.wait_done(
        deployed.start(machine, {"older_than_seconds": 0, "requested_by": "root", "role": "admin"})
    )
    # Then the old one is archived; the recent one is not claimed: its customer may still come back
    assert done["status"] == "SUCCEEDED", done
    assert json.loads(done["output"])["sessions_archived"] == 1
    kept = store.sessions.get_session(recent)
    assert kept is not None
    assert kept.status == SessionStatus.DISCONNECTED
    assert len(store.sessions.list_session_items(recent).items) == 6
    assert store.sessions.get_session(old).status == SessionStatus.ARCHIVED  # type: ignore[union-attr]
    # And the customer can still resume it
    resumed = store.sessions.resume_session(recent, "customer-1", "conn-back", since=int(time.time()) - HOUR)
    assert resumed.status == SessionStatus.ACTIVE


def test_a_session_resumed_after_the_worker_read_it_is_not_cleaned(
    world: tuple[Deployed, Invocations], monkeypatch: pytest.MonkeyPatch
) -> None:
    deployed, _ = world
    store = DynamoSessionStore(deployed.table_name, cleanup_shards=SHARDS)
    # Given a session disconnected 50 minutes ago, and a per-session run that reads it as still waiting
    session_id = _session(deployed, ended_ago=50 * 60)
    _worker_environment(deployed, monkeypatch)
    real = cleanup_worker.store().sessions.get_session

    def read_then_resumed(sid: str, **kwargs: Any) -> Any:
        stale = real(sid, **kwargs)
        # the customer comes back right after the worker's read
        store.sessions.resume_session(sid, "customer-1", "conn-back", since=int(time.time()) - HOUR)
        return stale

    monkeypatch.setattr(cleanup_worker.store().sessions, "get_session", read_then_resumed)
    # When the worker cleans it as if its grace were over (what an admin's older_than_seconds 0 asks)
    result = cleanup_worker.clean_session(session_id, eligible_before=int(time.time()) + 1)
    # Then the claim is refused: nothing archived, nothing deleted, the session is live with every record
    assert (result["status"], result["archived"], result["items_deleted"]) == ("not_claimed", False, 0)
    session = store.sessions.get_session(session_id)
    assert session is not None
    assert (session.status, session.connection_id) == (SessionStatus.ACTIVE, "conn-back")
    assert len(store.sessions.list_session_items(session_id).items) == 6
    bucket = deployed.ref("Storage", "AWS::S3::Bucket", "ArchiveBucket")
    listed = boto3.client("s3", region_name=REGION).list_objects_v2(Bucket=bucket, Prefix=f"sessions/{session_id}")
    assert listed.get("KeyCount", 0) == 0
