"""The single table's physical schema, as the Lambda code imports it: defined in :mod:`contracts.schema`."""

from contracts.schema import (
    AVAILABLE_AGENTS,
    CLEANUP,
    CUSTOMER_SESSIONS,
    GLOBAL_INDEXES,
    PARTITION_KEY,
    SESSIONS_BY_STATUS,
    SORT_KEY,
    TTL_ATTRIBUTE,
    IndexSchema,
    KeyType,
)

__all__ = [
    "AVAILABLE_AGENTS",
    "CLEANUP",
    "CUSTOMER_SESSIONS",
    "GLOBAL_INDEXES",
    "PARTITION_KEY",
    "SESSIONS_BY_STATUS",
    "SORT_KEY",
    "TTL_ATTRIBUTE",
    "IndexSchema",
    "KeyType",
]
