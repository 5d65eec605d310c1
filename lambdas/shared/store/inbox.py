"""Agent inbox items: one per (inbox, handoff), written once, expiring with the stage's TTL."""

from __future__ import annotations

from botocore.exceptions import ClientError

from lambdas.shared import keys
from lambdas.shared.schema import TTL_ATTRIBUTE
from lambdas.shared.serialize import marshal_item
from lambdas.shared.store.table import CONDITION_FAILED, TableCore, code_of, require_id


class Inbox(TableCore):
    """Inbox operations."""

    def put_inbox_item(
        self,
        agent_id: str,
        *,
        session_id: str,
        handoff_id: str,
        reason: str,
        priority: str = "normal",
    ) -> bool:
        """Put a handoff into an agent's inbox (``AGENT#<id>`` / ``INBOX#<handoff_id>``), once.

        True when written; False when it was there already (a redelivered message). The item
        expires with the session TTL.
        """
        for name, value in (
            ("agent_id", agent_id),
            ("session_id", session_id),
            ("handoff_id", handoff_id),
            ("reason", reason),
        ):
            require_id(value, name)
        now = self._now()
        item = {
            **keys.agent_inbox_key(agent_id, handoff_id),
            "agent_id": agent_id,
            "session_id": session_id,
            "handoff_id": handoff_id,
            "reason": reason,
            "priority": priority,
            "created_at": now,
            TTL_ATTRIBUTE: now + self.ttl_seconds,
        }
        try:
            self._put_new(item)
        except ClientError as err:
            if code_of(err) == CONDITION_FAILED:
                return False
            raise
        return True

    def remove_inbox_item(self, agent_id: str, handoff_id: str) -> None:
        """Take a handoff out of an inbox (``keys.WAITING_INBOX`` for the shared one); absent is fine."""
        require_id(agent_id, "agent_id")
        require_id(handoff_id, "handoff_id")
        self.client.delete_item(TableName=self.table_name, Key=marshal_item(keys.agent_inbox_key(agent_id, handoff_id)))
