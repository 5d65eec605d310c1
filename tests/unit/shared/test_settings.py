"""lambdas.shared.settings: one reader of the stage settings, one store, and the stage TTL on every write."""

from __future__ import annotations

import dataclasses
import importlib
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from embedded.events import sqs_record
from lambdas.events import customer_notifier, dashboard, summary
from lambdas.events.messages import EVENT_HANDOFF_WAITING, HandoffMessage
from lambdas.orchestration import handoff as handoff_steps
from lambdas.shared import env, keys, settings
from lambdas.shared.records import Agent, Role
from lambdas.shared.serialize import marshal_item, unmarshal_item
from lambdas.shared.store import DynamoSessionStore

PROD_TTL_HOURS = 72
LAMBDAS = Path(__file__).resolve().parents[3] / "lambdas"

#: Every handler module that builds the store, and so writes the table with its TTL.
STORE_USERS = (
    "lambdas.api.agent",
    "lambdas.api.rest",
    "lambdas.events.customer_notifier",
    "lambdas.events.dashboard",
    "lambdas.events.escalation",
    "lambdas.events.summary",
    "lambdas.orchestration.cleanup_worker",
    "lambdas.orchestration.handoff",
    "lambdas.ws.runtime",
)


@pytest.fixture
def prod(table_name: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[DynamoSessionStore]:
    """The production stage's settings (72 h sessions) on the moto table; yields the functions' store."""
    monkeypatch.setenv("TABLE_NAME", table_name)
    monkeypatch.setenv("SESSION_TTL_HOURS", str(PROD_TTL_HOURS))
    monkeypatch.setenv("CLEANUP_SHARDS", "16")
    env.reset()
    yield settings.store()
    env.reset()


def _ttl_window(before: float) -> tuple[int, int]:
    hours = PROD_TTL_HOURS * 3600
    return int(before) + hours, int(time.time()) + hours


def _raw(store: DynamoSessionStore, key: keys.Key) -> dict[str, Any]:
    item = store.table.client.get_item(TableName=store.table.table_name, Key=marshal_item(key), ConsistentRead=True)[
        "Item"
    ]
    return unmarshal_item(item)


# ------------------------------------------------------------------ reading the settings


def test_settings_are_read_once_with_the_documented_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    config = settings.settings()
    assert (config.session_ttl_hours, config.cleanup_shards) == (24, 8)  # tests/unit/conftest.py
    assert (config.summary_interval, config.context_turns, config.max_reassignments) == (10, 20, 2)
    assert (config.manager_skill, config.archive_prefix, config.bedrock_model_id) == ("manager", "sessions", None)
    # Read once per container: a later change is seen only after env.reset()
    monkeypatch.setenv("SESSION_TTL_HOURS", "48")
    assert settings.settings().session_ttl_hours == 24
    env.reset()
    assert settings.settings().session_ttl_hours == 48


@pytest.mark.parametrize("name", ["SESSION_TTL_HOURS", "CLEANUP_SHARDS"])
def test_fails_without_a_setting_every_function_gets(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.delenv(name)
    env.reset()
    with pytest.raises(env.MissingSetting, match=name):
        settings.settings()


@pytest.mark.parametrize(
    ("name", "value"),
    [("SESSION_TTL_HOURS", "0"), ("SESSION_TTL_HOURS", "8761"), ("CLEANUP_SHARDS", "65"), ("SUMMARY_INTERVAL", "1")],
)
def test_fails_on_a_setting_out_of_its_one_set_of_bounds(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    env.reset()
    with pytest.raises(env.MissingSetting, match=rf"{name} must be in"):
        settings.settings()


def test_a_guardrail_is_read_as_both_of_its_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    assert (settings.settings().bedrock_guardrail_id, settings.settings().bedrock_guardrail_version) == (None, None)
    monkeypatch.setenv("BEDROCK_GUARDRAIL_ID", "gr0abc123")
    monkeypatch.setenv("BEDROCK_GUARDRAIL_VERSION", "4")
    env.reset()
    config = settings.settings()
    assert (config.bedrock_guardrail_id, config.bedrock_guardrail_version) == ("gr0abc123", "4")


def test_fails_naming_the_missing_half_of_a_guardrail(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BEDROCK_GUARDRAIL_ID", "gr0abc123")
    env.reset()
    with pytest.raises(env.MissingSetting, match="BEDROCK_GUARDRAIL_VERSION is required when a guardrail is named"):
        settings.settings()


def test_fails_naming_the_variable_when_a_needed_text_setting_is_absent() -> None:
    with pytest.raises(env.MissingSetting, match="CORS_ALLOWED_ORIGINS"):
        settings.settings().origins()
    with pytest.raises(env.MissingSetting, match="ARCHIVE_PREFIX"):
        dataclasses.replace(settings.settings(), archive_prefix="").need("archive_prefix")


def test_every_stage_variable_names_a_settings_field() -> None:
    fields = set(settings.Settings.__dataclass_fields__)
    assert {spec.field for spec in settings.STAGE_VARIABLES.values()} == fields


def test_no_module_but_settings_reads_a_stage_variable() -> None:
    # Given every Python file of the functions' package
    reads = re.compile(r"""env\.(?:require|optional|integer|flag)\(\s*["']([A-Z_]+)["']""")
    offenders = []
    for path in LAMBDAS.rglob("*.py"):
        if path.name == "settings.py":
            continue
        offenders += [f"{path.relative_to(LAMBDAS)}: {name}" for name in reads.findall(path.read_text())]
    # Then none of them parses a stage setting itself
    assert [o for o in offenders if o.split(": ")[1] in settings.STAGE_VARIABLES] == []


def test_the_deploy_side_sets_every_required_stage_variable_and_no_unknown_one() -> None:
    from stacks.functions import STAGE_VARIABLE_NAMES

    required = {name for name, spec in settings.STAGE_VARIABLES.items() if spec.required}
    assert set(STAGE_VARIABLE_NAMES) <= set(settings.STAGE_VARIABLES)
    assert required <= set(STAGE_VARIABLE_NAMES)


@pytest.mark.parametrize("module_name", STORE_USERS)
def test_every_function_builds_the_one_store_with_the_stage_ttl_and_shards(
    prod: DynamoSessionStore, module_name: str
) -> None:
    module = importlib.import_module(module_name)
    built = module.store()
    assert built is prod
    assert (built.table.ttl_seconds, built.table.cleanup_shards) == (PROD_TTL_HOURS * 3600, 16)


# ------------------------------------------------------------------ the stage TTL on every write


def test_customer_notifier_keeps_the_stage_ttl_when_it_records_a_notice(prod: DynamoSessionStore) -> None:
    # Given a prod session without a live connection
    before = time.time()
    session = prod.sessions.create_session("c-1")
    # When the notifier records a notice as a system turn
    outcome = customer_notifier.notify(
        settings.store(), HandoffMessage(session.session_id, "handoff_started", "An agent joins shortly.")
    )
    # Then the session's TTL slid to 72 h, not 24 h, and the turn expires with it
    assert outcome == "recorded"
    low, high = _ttl_window(before)
    assert low <= _raw(prod, keys.session_key(session.session_id))["ttl"] <= high
    turn = prod.turns.list_turns(session.session_id).items[-1]
    assert (turn.role, low <= turn.ttl <= high) == (Role.SYSTEM, True)


def test_summaries_expire_with_the_stage_ttl(prod: DynamoSessionStore) -> None:
    before = time.time()
    session = prod.sessions.create_session("c-1")
    for n in range(10):
        prod.turns.add_turn(session.session_id, Role.USER, f"turn {n}")
    outcome = summary.summarise(
        settings.store().turns, session.session_id, 10, interval=10, generate=summary.extractive_summary
    )
    assert outcome.status == "generated"
    stored = prod.turns.latest_summary(session.session_id)
    assert stored is not None
    low, high = _ttl_window(before)
    assert low <= stored.ttl <= high


def test_agent_inbox_items_expire_with_the_stage_ttl(prod: DynamoSessionStore) -> None:
    before = time.time()
    session_id = prod.sessions.create_session("c-1").session_id
    handoff = prod.handoffs.put_handoff(
        session_id, reason="billing", status="queued", handoff_id="h-1"
    )  # what the item stands for
    body = {"session_id": session_id, "handoff_id": "h-1", "event_type": EVENT_HANDOFF_WAITING, "reason": "billing"}
    assert dashboard.record_handler(SQSRecord(sqs_record(body))) == "h-1"
    low, high = _ttl_window(before)
    item_key = keys.inbox_item_key(keys.WAITING_INBOX, "h-1", priority="normal", waiting_since=handoff.created_at)
    assert low <= _raw(prod, item_key)["ttl"] <= high


def test_handoff_steps_write_with_the_stage_ttl(prod: DynamoSessionStore) -> None:
    # Given an active session and an available agent
    before = time.time()
    session = prod.sessions.create_session("c-1")
    prod.agents.put_agent(Agent(agent_id="agent-1", skills=("billing",)))
    event = {"session_id": session.session_id, "handoff_id": "h-1", "reason": "billing", "priority": "normal"}
    # When the workflow reserves the agent and begins the handoff
    check = handoff_steps.check_agent.__wrapped__
    begin = handoff_steps.begin.__wrapped__
    reserved = check(event, None)
    begin({**event, "agent_id": reserved["agent_id"], "execution_arn": None}, None)
    # Then the handoff, its system turn and the session carry the 72 h TTL; the agent's registry
    # record, which only its retirement ends, carries none
    low, high = _ttl_window(before)
    handoff = prod.handoffs.get_handoff(session.session_id, "h-1")
    agent = prod.agents.get_agent("agent-1")
    assert handoff is not None
    assert agent is not None
    assert low <= handoff.ttl <= high
    assert agent.ttl is None
    assert low <= _raw(prod, keys.session_key(session.session_id))["ttl"] <= high
    assert all(low <= t.ttl <= high for t in prod.turns.list_turns(session.session_id).items)
