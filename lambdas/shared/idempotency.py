"""Powertools idempotency on the stage's own table: one store for every function that must act once.

Records live beside the application's items under their own partition,
``idempotency#<function name>``, with the request hash as sort key, so they are never a session,
turn or handoff: the stream router's filter (META, TURN#, SUMMARY#, HANDOFF# sort keys) passes
none of them on, and the cleanup sweep, which walks its own index, never sees them. They expire
with the table's TTL attribute. The record's status and payload use prefixed attribute names so
they cannot be mistaken for, or indexed as, an application item's ``status``.
"""

from __future__ import annotations

from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer

from lambdas.shared import env
from lambdas.shared.schema import PARTITION_KEY, SORT_KEY, TTL_ATTRIBUTE
from lambdas.shared.settings import resource


@env.once
def store() -> DynamoDBPersistenceLayer:
    """The container's persistence layer on ``TABLE_NAME`` (created on first use)."""
    return DynamoDBPersistenceLayer(
        table_name=resource("TABLE_NAME"),
        key_attr=PARTITION_KEY,
        sort_key_attr=SORT_KEY,
        expiry_attr=TTL_ATTRIBUTE,
        in_progress_expiry_attr="idempotency_in_progress_until",
        status_attr="idempotency_status",
        data_attr="idempotency_data",
        validation_key_attr="idempotency_validation",
    )
