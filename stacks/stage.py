"""One deployable stage of MangaAssist: the four stacks, wired, tagged and checked by cdk-nag."""

from __future__ import annotations

from aws_cdk import Environment, IPolicyValidationPlugin, Stage, Tags, Validations
from cdk_nag import AwsSolutionsChecks
from constructs import Construct

from stacks.api_stack import ApiStack
from stacks.config import StageConfig
from stacks.events_stack import EventsStack
from stacks.orchestration_stack import OrchestrationStack
from stacks.outputs import add_stage_outputs
from stacks.storage_stack import StorageStack


def nag_checks(stage: Stage) -> list[IPolicyValidationPlugin]:
    """The cdk-nag rule packs a stage runs at synthesis (bench/synth_breakdown.py times them)."""
    return [AwsSolutionsChecks(stage, verbose=True)]


class MangaAssistStage(Stage):
    """Storage <- Events <- Orchestration <- Api, named MangaAssist-<stage>-<Part>.

    ``nag`` runs the AwsSolutions checks on the stage (synth fails on any unacknowledged
    finding); tests that only read templates may turn it off to save time.
    """

    def __init__(self, scope: Construct, config: StageConfig, *, nag: bool = True) -> None:
        env = Environment(account=config.account, region=config.region) if config.account else None
        super().__init__(scope, f"MangaAssist-{config.name}", env=env)
        self.config = config
        prefix = f"MangaAssist-{config.name}"

        self.storage = StorageStack(self, "Storage", stack_name=f"{prefix}-Storage", config=config)
        self.events = EventsStack(self, "Events", stack_name=f"{prefix}-Events", config=config, storage=self.storage)
        self.orchestration = OrchestrationStack(
            self,
            "Orchestration",
            stack_name=f"{prefix}-Orchestration",
            config=config,
            storage=self.storage,
            events=self.events,
        )
        self.api = ApiStack(
            self,
            "Api",
            stack_name=f"{prefix}-Api",
            config=config,
            storage=self.storage,
            events=self.events,
            orchestration=self.orchestration,
        )

        add_stage_outputs(self)

        Tags.of(self).add("Project", "MangaAssist")
        Tags.of(self).add("Stage", config.name)
        for key, value in config.tags.items():
            Tags.of(self).add(key, value)
        if nag:
            Validations.of(self).add_plugins(*nag_checks(self))
