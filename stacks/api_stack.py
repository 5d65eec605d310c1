"""ApiStack: the REST API and the WebSocket API."""

from __future__ import annotations

from aws_cdk import Stack
from constructs import Construct

from stacks.config import StageConfig
from stacks.events_stack import EventsStack
from stacks.orchestration_stack import OrchestrationStack
from stacks.storage_stack import StorageStack


class ApiStack(Stack):
    """The client-facing APIs. Receives everything it fronts."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: StageConfig,
        storage: StorageStack,
        events: EventsStack,
        orchestration: OrchestrationStack,
        **kwargs: object,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)  # type: ignore[arg-type]
        self.config = config
