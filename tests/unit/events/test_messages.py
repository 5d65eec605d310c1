"""lambdas.events.messages: the handoff topic's message vocabulary and the body every consumer parses."""

from __future__ import annotations

import json

import pytest

from lambdas.events import messages


def test_a_body_parses_straight_or_wrapped_in_an_sns_notification() -> None:
    body = {"session_id": "s-1", "event_type": messages.EVENT_CLOSED, "handoff_id": "h-1", "outcome": "active"}
    for raw in (json.dumps(body), json.dumps({"Type": "Notification", "Message": json.dumps(body)})):
        parsed = messages.parse_body(raw)
        assert (parsed.session_id, parsed.event_type, parsed.handoff_id, parsed.outcome) == (
            "s-1",
            "completed",
            "h-1",
            "active",
        )
        assert (parsed.priority, parsed.text, parsed.agent_id) == ("normal", "", None)


@pytest.mark.parametrize("raw", ["not json", "[]", json.dumps({"event_type": "x"}), json.dumps({"session_id": "s"})])
def test_fails_on_a_body_without_its_session_and_event(raw: str) -> None:
    with pytest.raises(messages.InvalidMessage):
        messages.parse_body(raw)


def test_the_customer_hears_of_escalations_and_closes_only() -> None:
    assert messages.CUSTOMER_EVENTS == ("queued", "escalated", "completed")
