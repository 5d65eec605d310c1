"""lambdas.ws.default: an unknown action names the valid ones."""

from __future__ import annotations

import json

import pytest

from embedded.events import ws_event
from lambdas.ws import default
from tests.unit.ws.chat import ALICE, CTX


@pytest.mark.parametrize("body", ['{"action": "dance"}', "plain text", None])
def test_default_route_names_the_valid_actions(body: str | None) -> None:
    response = default.handler(ws_event("$default", body=body, authorizer=ALICE), CTX)
    frame = json.loads(response["body"])
    assert response["statusCode"] == 200
    assert (frame["type"], frame["code"]) == ("error", "unknown_action")
    assert "sendMessage" in frame["message"]
    assert set(frame) == {"type", "code", "message"}
