"""What every step of the story shares: the step record and the one way a step fails."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Step:
    """One step of the story: what was done, what was called, what changed."""

    title: str
    calls: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    seconds: float = 0.0


class StoryError(AssertionError):
    """A step whose outcome is not what the seeds specify."""


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise StoryError(message)
