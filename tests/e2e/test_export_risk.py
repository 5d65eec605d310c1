"""Export approval by risk, on the embedded stage: a low score goes through audited, a high one waits for a person.

The dev stage's threshold (``export_review_min_score`` 2) is met by any customer record in the
table, so the same admin's request is approved automatically before the first session and waits
for the reviewer after it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from embedded import EmbeddedStage, embedded_stage
from embedded.services.sns import published
from embedded.synth import StageAssembly
from local.story import Story
from local.story.stage import story_config

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def story(synthesized: StageAssembly) -> Iterator[Story]:
    with embedded_stage(synthesized.assembly_dir) as stage:
        played = Story(stage, story_config())
        played.mint_tokens()
        yield played


def test_a_low_risk_export_completes_without_a_reviewer_and_a_high_risk_one_waits(story: Story) -> None:
    stage: EmbeddedStage = story.stage
    # Given a stage whose table holds no customer record yet
    # When the admin asks for an export / Then it completes with no reviewer, and the audit trail
    # holds the automatic approval with its reason (the story step asserts both)
    story.low_risk_export_needs_no_reviewer()
    (auto,) = story.audit_lines(f"REVIEW#export-{story.values['auto_export'].rsplit(':', 1)[-1]}")
    assert (auto["new_status"], auto["decided_by"]) == ("approved", "automatic")
    assert auto["decision_reason"].startswith("risk score 0: scope 0 (no customer records), size 0")
    assert (auto["risk_score"], auto["review_threshold"]) == (0, 2)

    # Given a customer's session in the table
    story.create_session()
    reviews = len(published(stage.cloud, story._reviewer_topic(), []))
    # When the same admin asks again
    step = story.step("a second export")
    response = story.rest(step, "POST", "/admin/export", "root", body={"reason": "quarterly analytics"})
    assert response.status == 202, response.body
    execution = response.json()["execution_arn"]
    stage.settle(
        until=lambda: len(published(stage.cloud, story._reviewer_topic(), [])) > reviews,
        timeout=30,
        wait_executions=False,
    )
    # Then it waits for the reviewer: running, the review requested, nothing exported, no automatic approval
    described = stage.client("stepfunctions").describe_execution(executionArn=execution)
    assert described["status"] == "RUNNING"
    states = story._states_entered(execution)
    assert "NeedsReview" in states
    assert "RecordAutomaticApproval" not in states
    assert "StartExport" not in states
    assert any("RequestReview" in name for name in states), states
    stage.settle(timeout=10, wait_executions=False)
    assert story.audit_lines(f"REVIEW#export-{execution.rsplit(':', 1)[-1]}") == []
    # And no call of either was refused by a policy
    assert stage.refusals == []
