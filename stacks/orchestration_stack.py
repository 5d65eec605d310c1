"""OrchestrationStack: the Step Functions workflows (handoff, cleanup, export)."""

from __future__ import annotations

from aws_cdk import Stack
from constructs import Construct

from stacks.config import StageConfig
from stacks.events_stack import EventsStack
from stacks.storage_stack import StorageStack


class OrchestrationStack(Stack):
    """The multi-step workflows. Receives the storage and the event bus they react to."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: StageConfig,
        storage: StorageStack,
        events: EventsStack,
        **kwargs: object,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)  # type: ignore[arg-type]
        self.config = config
