"""The whole story on the synthesized stage, stood up on moto, run once for the module's tests."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from embedded import EmbeddedStage, embedded_stage
from embedded.synth import StageAssembly
from local.story import STEPS, Step, Story, run_story
from local.story import privacy as contact
from local.story.conversation import STUB_SUMMARY
from local.story.handoff import RESOLVED
from local.story.stage import story_config
from tests.support.identity import refusal
from tests.support.personal_data import Needles, bucket_objects, log_lines

pytestmark = pytest.mark.slow


@dataclass
class StoryRun:
    stage: EmbeddedStage
    story: Story
    done: list[Step]
    #: The archive's objects (every version, as text) just before the story's last step erased alice.
    archived: list[tuple[str, str]]


def _archive(stage: EmbeddedStage) -> str:
    return stage.only("AWS::S3::Bucket", where=lambda b: b.logical_id.startswith("ArchiveBucket")).ref


@pytest.fixture(scope="module")
def told(synthesized: StageAssembly) -> Iterator[StoryRun]:
    """The story, run once on the synthesized stage deployed on a fresh moto account."""
    done: list[Step] = []
    archived: list[tuple[str, str]] = []
    before_erasure = STEPS.index("erasure_leaves_no_trace")

    def narrate(step: Step) -> None:
        done.append(step)
        if len(done) == before_erasure:
            archived.extend(bucket_objects(stage, only=_archive(stage)))

    with embedded_stage(synthesized.assembly_dir) as stage:
        story = run_story(stage, story_config(), narrate)
        yield StoryRun(stage, story, done, archived)


def test_story_runs_end_to_end_on_the_synthesized_stage(told: StoryRun) -> None:
    # Given the story has run (each step asserts its own outcome: see the step modules of local/story/)
    stage = told.stage
    # Then every step ran, and nothing the harness emulates was left unconsumed
    assert len(told.done) == len(STEPS)
    assert stage.streams.pending() == 0
    assert stage.rest.invalid_requests == []
    assert [(c.handler, repr(c.error)) for c in stage.calls.calls if c.error is not None and not refusal(c)] == []
    # And every Bedrock call (answered by the client stub) named the stage's model
    assert stage.bedrock.calls
    assert {c.model_id for c in stage.bedrock.calls} == {story_config().bedrock_model_id}


def test_no_log_line_and_no_object_outside_the_conversation_holds_personal_data(told: StoryRun) -> None:
    # Given what the story's people wrote and who they are (their sign-in addresses)
    addresses = sorted({signed_in.email for signed_in in told.story.signed_in.values()})
    texts = (*contact.CONTACT_MESSAGES.values(), contact.AGENT_REPLY, RESOLVED["resolution"], STUB_SUMMARY)
    texts = (*texts, contact.CONTACT_MESSAGE)
    needles = Needles(
        texts=(contact.CUSTOMER_EMAIL, contact.PRIVATE_EMAIL, *addresses, *texts),
        phones=(*contact.CUSTOMER_PHONES, contact.AGENT_PHONE, contact.PRIVATE_PHONE),
    )
    # the archive holds the conversation itself (and the exports of it) on purpose; the table's turns are not scanned
    archive = _archive(told.stage)
    # When every log line and every other object (every version; Firehose's analytics and audit records) is read
    lines = list(log_lines(told.stage))
    objects = list(bucket_objects(told.stage, exempt_buckets=[archive]))
    # Then the scan read what the story left (the router's lines, the delivered records) ...
    assert any('"stream changes"' in text for _, text in lines)
    assert any("customer_pseudonym" in text for _, text in objects)
    # ... and finds the contact details where the conversation is kept on purpose (the archive) ...
    # (as it was before the story's last step erased alice, whose conversation it is)
    archived = [hit.needle for where, text in told.archived for hit in needles.find(where, text)]
    assert {contact.CUSTOMER_EMAIL, *contact.CUSTOMER_PHONES, contact.AGENT_PHONE} <= set(archived)
    # ... and none of it holds an address, a phone number or a message's text
    hits = [hit for where, text in (*lines, *objects) for hit in needles.find(where, text)]
    assert [str(hit) for hit in hits] == []


def test_no_metric_is_dimensioned_by_a_customer_session_agent_or_address(told: StoryRun) -> None:
    # Given every EMF document the story's functions printed
    documents = [document for call in told.stage.calls.calls for document in call.emf()]
    dimensions = {
        name
        for document in documents
        for directive in document["_aws"]["CloudWatchMetrics"]
        for names in directive["Dimensions"]
        for name in names
    }
    # Then metrics were emitted, dimensioned only by bounded names, none of which identifies a person
    assert documents
    personal = {name for name in dimensions if re.search(r"customer|session|agent|user|email|phone", name, re.I)}
    assert personal == set(), sorted(dimensions)
