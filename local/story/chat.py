"""A customer chatting on the embedded stage, through its public surface only: shared by the fault and load tests.

``open_chat`` signs a customer in to the stage's user pool, creates a session over REST, connects
over WebSocket and waits for the welcome frame (the onboarding workflow); ``Chat.say`` sends one
message and returns the frames it produced.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from embedded import EmbeddedStage
from embedded.services.cognito import Directory
from lambdas.shared.store import DynamoSessionStore

#: The Step Functions executor threads of moto and the stage's pumps are not built for callers on
#: several threads; a test that drives the stage from threads takes this lock around ``settle``.
SETTLE_LOCK = threading.RLock()


@dataclass
class Chat:
    """One customer's connected session."""

    stage: EmbeddedStage
    who: str
    token: str
    session_id: str
    connection_id: str
    seen: int = 0
    sent: list[str] = field(default_factory=list)

    def frames(self) -> list[Any]:
        return self.stage.websocket.frames(self.connection_id)

    def new_frames(self) -> list[Any]:
        """The frames received since the last call."""
        frames = self.frames()
        fresh, self.seen = frames[self.seen :], len(frames)
        return fresh

    def say(self, text: str) -> list[Any]:
        """Send one chat message; the frames it produced (the route's reply and every post)."""
        self.new_frames()
        self.sent.append(text)
        self.stage.websocket.send(self.connection_id, {"action": "sendMessage", "text": text})
        return self.new_frames()

    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


def table_name(stage: EmbeddedStage) -> str:
    return str(stage.only("AWS::DynamoDB::Table").ref)


def summary_items(stage: EmbeddedStage, session_id: str) -> list[dict[str, Any]]:
    """The session's stored summaries, as raw DynamoDB items (read straight from the table)."""
    items: list[dict[str, Any]] = stage.client("dynamodb").query(
        TableName=table_name(stage),
        KeyConditionExpression="PK = :pk AND begins_with(SK, :s)",
        ExpressionAttributeValues={":pk": {"S": f"SESSION#{session_id}"}, ":s": {"S": "SUMMARY#"}},
    )["Items"]
    return items


def store_of(stage: EmbeddedStage) -> DynamoSessionStore:
    return DynamoSessionStore(table_name(stage), client=stage.client("dynamodb"), clock=stage.clock)


def sign_in(stage: EmbeddedStage, who: str, role: str, directory: Directory | None = None) -> str:
    """An ID token of ``who`` (created in ``role``'s group on first use)."""
    directory = directory or Directory.of(stage)
    address = f"{who}@example.com"
    directory.ensure_user(address, role=role, verified=False)
    return directory.sign_in(address).id_token


def open_chat(stage: EmbeddedStage, who: str, *, directory: Directory | None = None, settle: bool = True) -> Chat:
    """``who`` signs in as a customer, creates a session and connects; the welcome frame is consumed.

    ``settle=False`` leaves the onboarding workflow to a later ``stage.settle()`` (many chats
    opened at once settle together).
    """
    from local.story.base import token_subject

    token = sign_in(stage, who, "customer", directory)
    response = stage.rest.request(
        "POST",
        "/sessions",
        headers={"Authorization": f"Bearer {token}"},
        body={"customer_id": token_subject(token)},
    )
    if response.status != 201:
        raise AssertionError(f"POST /sessions for {who} answered {response.status}: {response.body}")
    body = response.json()
    session_id = str(body.get("session_id") or body.get("id"))
    connection_id = stage.websocket.connect(query={"token": token, "session_id": session_id})
    chat = Chat(stage, who, token, session_id, connection_id)
    if settle:
        wait_welcome(stage, [chat])
    return chat


def wait_welcome(stage: EmbeddedStage, chats: list[Chat], *, timeout: float = 60) -> None:
    """Settle until every chat has its welcome frame, then mark it seen."""
    with SETTLE_LOCK:
        stage.settle(until=lambda: all(c.frames() for c in chats), timeout=timeout)
    for chat in chats:
        welcome = chat.new_frames()
        if not welcome or welcome[0].get("type") != "welcome":
            raise AssertionError(f"{chat.who}: first frame is not a welcome: {welcome[:1]}")
