"""lambdas.shared.queue_body: the object a queue body carries, raw or in SNS's envelope, or why there is none."""

from __future__ import annotations

import json

import pytest

from lambdas.shared.queue_body import json_object

MESSAGE = {"session_id": "s-1", "event_type": "handoff"}


def test_a_raw_delivery_is_read_as_it_is() -> None:
    assert json_object(json.dumps(MESSAGE)) == MESSAGE


def test_an_sns_envelope_is_opened() -> None:
    envelope = {"Type": "Notification", "MessageId": "m-1", "Message": json.dumps(MESSAGE)}
    assert json_object(json.dumps(envelope)) == MESSAGE


def test_an_object_that_only_looks_like_an_envelope_is_the_message() -> None:
    # No Message member: a published object that happens to have a Type of its own
    assert json_object(json.dumps({"Type": "Notification", "x": 1})) == {"Type": "Notification", "x": 1}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("not json", "body is not JSON: Expecting value"),
        (json.dumps({"Type": "Notification", "Message": "{broken"}), "body is not JSON: Expecting property name"),
        (json.dumps({"Type": "Notification", "Message": 7}), "body is not JSON: the JSON object must be str"),
        (json.dumps([MESSAGE]), "body must be a JSON object"),
        (json.dumps({"Type": "Notification", "Message": "[1]"}), "body must be a JSON object"),
    ],
)
def test_a_body_without_an_object_says_why(body: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        json_object(body)
