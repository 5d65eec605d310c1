"""WebSocket connection records (``CONN#<id>``)."""

from __future__ import annotations

from lambdas.shared import keys
from lambdas.shared.records import Connection
from lambdas.shared.serialize import marshal_item, unmarshal_item
from lambdas.shared.store.table import Aggregate, require_id


class Connections(Aggregate):
    """Connection operations."""

    def put_connection(
        self,
        connection_id: str,
        *,
        session_id: str,
        customer_id: str,
        domain_name: str,
        stage: str,
    ) -> Connection:
        """Record a WebSocket connection (overwrites: a retried $connect is harmless)."""
        for name, value in (
            ("connection_id", connection_id),
            ("session_id", session_id),
            ("customer_id", customer_id),
            ("domain_name", domain_name),
            ("stage", stage),
        ):
            require_id(value, name)
        now = self.table.now()
        connection = Connection(
            connection_id=connection_id,
            session_id=session_id,
            customer_id=customer_id,
            domain_name=domain_name,
            stage=stage,
            connected_at=now,
            ttl=now + self.table.ttl_seconds,
        )
        self.table.client.put_item(TableName=self.table.table_name, Item=marshal_item(connection.to_item()))
        return connection

    def get_connection(self, connection_id: str) -> Connection | None:
        require_id(connection_id, "connection_id")
        item = self.table.get(keys.connection_key(connection_id))
        return Connection.from_item(item) if item else None

    def delete_connection(self, connection_id: str) -> Connection | None:
        """Delete a connection record; returns what it held (None if it was gone already)."""
        require_id(connection_id, "connection_id")
        resp = self.table.client.delete_item(
            TableName=self.table.table_name,
            Key=marshal_item(keys.connection_key(connection_id)),
            ReturnValues="ALL_OLD",
        )
        item = resp.get("Attributes")
        return Connection.from_item(unmarshal_item(item)) if item else None
