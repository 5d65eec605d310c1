"""What the handoff queue consumer tests share: the SNS-wrapped handoff message and a Lambda context."""

from __future__ import annotations

from typing import Any

from embedded.events import lambda_context

CONTEXT = lambda_context("fn", memory_limit_in_mb=128)


def handoff_body(session_id: str, handoff_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "handoff_id": handoff_id,
        "event_type": "handoff",
        "agent_id": None,
        "reason": "escalated",
        "priority": "high",
        "text": "We are connecting you with a support agent.",
        "event_id": "ev-1",
        **extra,
    }
