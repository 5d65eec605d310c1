"""What the handoff tests share: a handoff begun as the workflow begins it."""

from __future__ import annotations

from typing import Any

from lambdas.shared.store import DynamoSessionStore
from lambdas.usecases.assign_agent import begin_handoff


def begin(store: DynamoSessionStore, session_id: str, handoff_id: str = "h-1", agent_id: str = "a-1") -> Any:
    """Hand ``session_id`` to ``agent_id`` as the workflow's begin step does."""
    return begin_handoff(
        store,
        session_id,
        handoff_id=handoff_id,
        agent_id=agent_id,
        reason="billing",
        priority="normal",
        execution_arn="arn:exec",
        system_text="handed over",
    )
