"""EventsStack: the table stream's consumers (router, bus, fan-out, analytics, audit, summaries)."""

from __future__ import annotations

from aws_cdk import Stack
from constructs import Construct

from stacks.config import StageConfig
from stacks.storage_stack import StorageStack


class EventsStack(Stack):
    """Everything the table stream drives. Receives the storage it reads from."""

    def __init__(
        self, scope: Construct, construct_id: str, *, config: StageConfig, storage: StorageStack, **kwargs: object
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)  # type: ignore[arg-type]
        self.config = config
        self.storage = storage
