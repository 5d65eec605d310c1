"""The handoff metrics on the embedded stage: a handoff's life, from the table stream through the
router and the bus's HandoffChanged rule, becomes EMF lines in the HandoffMetrics function's
output (what Lambda sends to its log group); the minute's schedule makes the sessions gauge count.
Every call is made as the functions' roles, so a missing grant fails here."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from embedded import EmbeddedStage, embedded_stage
from embedded.synth import StageAssembly
from local.story import Story
from local.story.metrics import GAUGE_HANDLER, HANDOFF_HANDLER, emf_values
from local.story.stage import story_config

pytestmark = pytest.mark.slow

STEPS = (
    "mint_tokens",
    "create_session",
    "connect",
    "request_handoff",
    "no_agent_free",
    "agent_accepts",
    "agent_replies",
    "agent_closes_handoff",
    "handoff_metrics_after_close",
)


@pytest.fixture(scope="module")
def played(synthesized: StageAssembly) -> Iterator[tuple[EmbeddedStage, Story]]:
    with embedded_stage(synthesized.assembly_dir) as stage:
        story = Story(stage, story_config())
        for name in STEPS:
            getattr(story, name)()
        stage.settle(timeout=30, wait_executions=False)
        yield stage, story


def test_a_handoffs_life_is_one_handoff_changed_event_per_step_each_measured_once(
    played: tuple[EmbeddedStage, Story],
) -> None:
    stage, story = played
    handoff_id = story.values["handoff_id"]
    calls = [c for c in stage.calls.by_handler(HANDOFF_HANDLER) if c.event["detail"]["handoff_id"] == handoff_id]
    # The router put one event per step of the handoff's life, in the order it lived them
    assert [c.event["detail"]["changes"] for c in calls] == [
        ["requested"],
        ["assigned"],
        ["first_reply"],
        ["completed"],
    ]
    assert all(c.error is None for c in calls)
    # Each printed its metrics twice: by service alone, and by reason and priority
    overall = emf_values(calls, ["service"])
    assert {name: len(values) for name, values in overall.items()} == {
        "HandoffsRequested": 1,
        "HandoffsAssigned": 1,
        "TimeToAssignment": 1,
        "TimeToFirstReply": 1,
        "HandoffsCompleted": 1,
        "HandoffDuration": 1,
    }
    assert emf_values(calls, ["service", "reason", "priority"]) == overall
    # The times agree with the handoff record the events were made from
    record = story.store().handoffs.get_handoff(story.session_id, handoff_id)
    assert record is not None
    assert record.assigned_at is not None
    assert record.first_reply_at is not None
    assert overall["TimeToAssignment"] == [float(record.assigned_at - record.created_at)]
    assert overall["TimeToFirstReply"] == [float(record.first_reply_at - record.assigned_at)]
    # And every EMF document names one namespace, one service, and no ids. The
    # stage gives the function the app's namespace; which one the documents carry here depends on
    # the process that first imported the module (handlers run in-process: a unit test may have
    # imported it under the suite's namespace), so the test holds them to one, not to a name.
    environment = stage.function(HANDOFF_HANDLER).environment
    assert environment["POWERTOOLS_METRICS_NAMESPACE"] == "MangaAssist"
    assert environment["POWERTOOLS_SERVICE_NAME"] == "HandoffMetrics"
    documents = [d for call in calls for d in call.emf()]
    assert len({d["_aws"]["CloudWatchMetrics"][0]["Namespace"] for d in documents}) == 1
    assert len({d["service"] for d in documents}) == 1
    for call in calls:
        for document in call.emf():
            assert story.session_id not in str(document)
            assert handoff_id not in str(document)


def test_the_sessions_gauge_counted_on_the_status_index_as_its_role(played: tuple[EmbeddedStage, Story]) -> None:
    stage, _ = played
    (call,) = stage.calls.by_handler(GAUGE_HANDLER)
    assert call.error is None
    assert call.result == {"SessionsActive": 1, "SessionsInHandoff": 0}
    assert emf_values([call], ["service"]) == {"SessionsActive": [1.0], "SessionsInHandoff": [0.0]}


def test_nothing_was_refused(played: tuple[EmbeddedStage, Story]) -> None:
    stage, _ = played
    assert stage.refusals == []
