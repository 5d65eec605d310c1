"""What every step of the story shares: the step record, the one way a step fails, what the step mixins may call."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from moto.ses.models import ses_backends

if TYPE_CHECKING:
    from embedded import EmbeddedStage
    from embedded.cloudformation.intrinsics import Deployed
    from embedded.services.cognito import Directory, SignedIn
    from lambdas.shared.store import DynamoSessionStore
    from stacks.config import StageConfig

T = TypeVar("T")


@dataclass
class Step:
    """One step of the story: what was done, what was called, what changed."""

    title: str
    calls: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    seconds: float = 0.0


class StoryError(AssertionError):
    """A step whose outcome is not what the product promises."""


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise StoryError(message)


def present(value: T | None, what: str) -> T:
    """``value``, or a StoryError saying ``what`` is missing."""
    if value is None:
        raise StoryError(f"{what} is missing")
    return value


@dataclass
class StreamedReply:
    """The assistant's reply to one message as the customer received it: deltas, then how it ended."""

    reply_to: int
    text: str = ""
    frames: int = 0  # every frame of the reply: one PostToConnection each
    end: dict[str, Any] | None = None  # the final or reply_blocked frame

    @property
    def turn_number(self) -> int | None:
        return int(self.end["turn_number"]) if self.end is not None else None


def streamed_replies(frames: list[dict[str, Any]]) -> list[StreamedReply]:
    """The assistant's replies among ``frames``, in the order they ended (deltas joined by ``reply_to``)."""
    open_replies: dict[int, StreamedReply] = {}
    ended: list[StreamedReply] = []
    for frame in frames:
        if frame.get("type") not in ("delta", "final", "reply_blocked"):
            continue
        reply = open_replies.setdefault(int(frame["reply_to"]), StreamedReply(int(frame["reply_to"])))
        reply.frames += 1
        if frame["type"] == "delta":
            reply.text += str(frame["text"])
        else:
            reply.end = frame
            ended.append(open_replies.pop(reply.reply_to))
    return ended


def token_subject(token: str) -> str:
    """The ``sub`` claim of a JWT (read, not verified: the stage's authorizer verifies it)."""
    payload = token.split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return str(claims["sub"])


class StoryParts:
    """What the story's step mixins use of :class:`local.story.Story`, declared once for the type checker.

    ``Story`` provides each of these; a mixin inherits from this class and calls them.
    """

    stage: EmbeddedStage
    config: StageConfig
    tokens: dict[str, str]
    signed_in: dict[str, SignedIn]
    directory: Directory
    session_id: str
    connection_id: str
    values: dict[str, Any]

    @property
    def table(self) -> Deployed:
        """The stage's session table, as deployed."""
        raise NotImplementedError

    def store(self) -> DynamoSessionStore:
        raise NotImplementedError

    def step(self, title: str) -> Step:
        raise NotImplementedError

    def done(self, step: Step, started: float) -> None:
        raise NotImplementedError

    def sign_in(self, who: str, role: str, *, email: str | None = None) -> str:
        raise NotImplementedError

    def auth(self, who: str) -> dict[str, str]:
        """``who``'s ``Authorization`` header, its token refreshed first when it nears expiry."""
        raise NotImplementedError

    def subject(self, who: str) -> str:
        """The identity provider's id (``sub``) of ``who``, signed in before: a customer or agent id."""
        return token_subject(self.tokens[who])

    def mail_to(self, address: str) -> list[Any]:
        """Every message the stage's mailer got SES to accept for ``address`` so far, oldest first."""
        backend = ses_backends[self.stage.cloud.account][self.stage.cloud.region]
        return [m for m in backend.sent_messages if address in m.destinations.get("ToAddresses", [])]

    def rest(self, step: Step, method: str, path: str, who: str | None, **kwargs: Any) -> Any:
        raise NotImplementedError

    def register_agent(
        self,
        step: Step,
        who: str,
        *,
        skills: tuple[str, ...] = ("general",),
        display_name: str | None = None,
        is_manager: bool = False,
        available: bool = False,
    ) -> str:
        """Register ``who`` as an agent through the admin route (as ``root``); its agent id."""
        raise NotImplementedError

    def set_presence(self, step: Step, who: str, status: str) -> dict[str, Any]:
        """``who`` sets its own presence through ``POST /agents/me/presence`` (200 expected)."""
        raise NotImplementedError

    def frames(self) -> list[Any]:
        raise NotImplementedError
